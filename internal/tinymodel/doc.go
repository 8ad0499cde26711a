// Package tinymodel generates tiny deterministic qwen3_next, qwen3_5_moe
// (Generate, Variants) and Gemma 4 text-MoE (GenerateGemma4,
// Gemma4Variants) checkpoints in MLX layout (float32 and quantized,
// single-file and sharded) for tests and for the bundled testdata copies.
// The references under testdata/reference were computed from those copies
// with transformers (make_reference.py, gemma4_reference.py).
package tinymodel
