package main

import _ "embed"

// Qwen3.5-397B-A17B (flash-moe's model) at its real per-layer dims: hidden
// 4096, 512 experts top-10 of 1024, one shared expert of 1024, Gated
// DeltaNet with 16 key / 64 value heads, full attention every 4th layer
// with 32 query / 2 KV heads of 256, 60 layers, vocab 248,320 (the
// Qwen3.6-35B MLX config with those fields changed; ~223 GB at 4-bit).
// The whole model does not fit this machine's disk: run it with -layers
// (4 layers, one of them full attention, are ~14 GB of experts) and
// -shard-bytes to keep the real repo's 46-shard layout.
//
//go:embed configs/qwen3.5-397b-a17b-4bit.json
var qwen397Config []byte

func init() {
	models["qwen3.5-397b"] = model{"mlx-community/Qwen3.5-397B-A17B-4bit", qwen397Config, 10}
}
