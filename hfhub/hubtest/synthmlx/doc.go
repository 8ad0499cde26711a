// Package synthmlx generates an MLX checkpoint of any size on the fly, for
// the fake Hub (hfhub/hubtest) to serve at a real model's exact config,
// tensor names and sharding without storing it.
//
// Every byte of every shard is a pure function of (seed, shard, offset):
// the safetensors header is laid out once (safetensors.PlanFile), and a
// tensor's bytes are either seeded pseudo-random words (the packed
// quantized weights) or a repeated constant (scales, biases, norms and the
// other float tensors), chosen so the dequantized weights have a sane
// range: scales s = gain/sqrt(var(q)·cols) and biases -s·(2^bits-1)/2, so
// each linear layer keeps unit variance and the forward pass stays finite.
// Memory is the layout (a few hundred bytes per tensor), whatever the
// model size; reads at any offset need no state.
//
// The LFS sha256 and git blob id of each shard are known only after one
// streaming pass over it (Shard.ComputeDigests); Digests caches them in a
// file so the pass runs once per (config, seed, shard size).
package synthmlx
