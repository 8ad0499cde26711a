package synthetic

import "github.com/qpack-go/qpack/runtime"

// Qwen3Next80B returns the per-layer dims of Qwen3-Next-80B-A3B (qwen3_next;
// layers and vocab as given, the real model has 48 and 151,936): hidden
// 2048, 512 experts top-10 of 512 with one shared expert of 512, Gated
// DeltaNet with 16 key / 32 value heads of 128, full attention every 4th
// layer with 16 query / 2 KV heads of 256, partial rotary 0.25, rope theta
// 1e7, MLX 4-bit group 64 (1,769,472-byte expert blobs, 906 MB of experts
// per layer). The real config's intermediate_size (5120) is only used by
// mlp_only_layers, which it has none of.
func Qwen3Next80B(layers, vocab int) Dims {
	d := Real(layers, vocab)
	d.ModelType = runtime.TypeQwen3Next
	d.Experts, d.TopK = 512, 10
	return d
}
