// Package runtime is the model runner: the qwen3_next / qwen3_5_moe graph on
// MLX-quantized weights, decode state, the expert cache, tokenizer and sampler.
// It reads containers and checkpoints and knows nothing of HTTP, repacking or
// verification. It defines the backend interface that package metal implements.
package runtime
