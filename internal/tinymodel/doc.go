// Package tinymodel generates tiny deterministic qwen3_next and qwen3_5_moe
// checkpoints in MLX layout (float32 and quantized, single-file and sharded)
// for tests and for the bundled testdata copies.
package tinymodel
