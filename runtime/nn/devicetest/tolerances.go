package devicetest

// Tolerances are the bounds of the suite. A zero field takes its default
// (DefaultTolerances).
type Tolerances struct {
	// MatMul bounds |y − ref| of each output by MatMul·Σ_j |W_ij·x_j|.
	MatMul float64
	// Batched is MatMul's bound for the products a device may run with
	// reduced-precision inputs because they span many vectors: a chunk's
	// grouped experts (nn.ExpertGrouper; tf32 tensor cores on CUDA).
	Batched float64
	// Norm bounds an RMSNorm output by Norm·max |ref| of its row.
	Norm float64
	// Elementwise bounds element-wise ops (RoPE, GLU, gates, Combine,
	// routing weights, ...) relative to |ref| (with a floor of 1% of the
	// op's largest |ref|, so that cancellation near zero does not count).
	Elementwise float64
	// Mixer bounds Attention and DeltaNet outputs (and the DeltaNet state)
	// by Mixer·max |ref| of the output.
	Mixer float64
	// ModelF32 and ModelQuant bound Models' logits relative to max |logit|
	// for f32 and quantized checkpoints.
	ModelF32, ModelQuant float64
}

// DefaultTolerances are the CUDA backend's documented bounds.
func DefaultTolerances() Tolerances {
	return Tolerances{MatMul: 1e-4, Batched: 1e-3, Norm: 1e-5, Elementwise: 1e-5, Mixer: 1e-4, ModelF32: 1e-4, ModelQuant: 1e-3}
}

func (t Tolerances) filled() Tolerances {
	d := DefaultTolerances()
	pick := func(v, def float64) float64 {
		if v > 0 {
			return v
		}
		return def
	}
	return Tolerances{
		MatMul:      pick(t.MatMul, d.MatMul),
		Batched:     pick(t.Batched, d.Batched),
		Norm:        pick(t.Norm, d.Norm),
		Elementwise: pick(t.Elementwise, d.Elementwise),
		Mixer:       pick(t.Mixer, d.Mixer),
		ModelF32:    pick(t.ModelF32, d.ModelF32),
		ModelQuant:  pick(t.ModelQuant, d.ModelQuant),
	}
}
