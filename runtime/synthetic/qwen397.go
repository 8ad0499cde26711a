package synthetic

// Qwen397B returns the per-layer dims of Qwen3.5-397B-A17B (layers and
// vocab as given; the real model has 60 and 248,320): hidden 4096, 512
// experts top-10 of 1024 with one shared expert of 1024, Gated DeltaNet
// with 16 key / 64 value heads of 128, full attention every 4th layer with
// 32 query / 2 KV heads of 256, MLX 4-bit group 64 (7,077,888-byte expert
// blobs, 3.6 GB of experts per layer).
func Qwen397B(layers, vocab int) Dims {
	d := Real(layers, vocab)
	d.Hidden = 4096
	d.Heads, d.KVHeads, d.HeadDim = 32, 2, 256
	d.LinKeyHeads, d.LinValueHeads = 16, 64
	d.Experts, d.TopK = 512, 10
	d.MoEInter, d.SharedInter = 1024, 1024
	return d
}
