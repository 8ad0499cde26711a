// Package qwen3next is the runner's qwen3_next / qwen3_5_moe architecture
// (Qwen3-Next, Qwen3.5/3.6 MoE): a hybrid of Gated DeltaNet layers and
// gated full-attention layers (every full_attention_interval-th), each
// followed by a sparse MoE block with a sigmoid-gated shared expert (or a
// dense SwiGLU MLP), on MLX-quantized weights. It registers both model
// types with package runtime at init; import it (or runtime/models/all)
// for runtime.Load to run them.
package qwen3next
