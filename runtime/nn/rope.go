package nn

import "math"

// RoPE is a rotary position embedding over one head vector: pair i (for i
// below len(InvFreq)) rotates by pos·InvFreq[i]. NeoX pairing (rotate_half,
// transformers' default) pairs dims (i, i+Half); interleaved pairing (GPT-J,
// mlx traditional=True) pairs (2i, 2i+1). Dims not in a rotated pair pass
// through.
type RoPE struct {
	Half        int       // NeoX: distance between the two dims of a pair
	InvFreq     []float32 // per rotated pair
	Interleaved bool
}

// NewRoPE is the default (and partial) rotary embedding: the first
// rotaryDim dims of each head rotate, NeoX-paired, with transformers'
// inverse frequencies 1 / theta^(2i / rotaryDim) (the exponent computed in
// float32).
func NewRoPE(rotaryDim int, theta float64) *RoPE {
	half := rotaryDim / 2
	r := &RoPE{Half: half, InvFreq: make([]float32, half)}
	for i := range half {
		exp := float32(2*i) / float32(rotaryDim)
		r.InvFreq[i] = float32(1 / math.Pow(theta, float64(exp)))
	}
	return r
}

// NewProportionalRoPE is transformers' "proportional" rotary embedding
// (Gemma 4's full-attention layers): pairs (d, d + headDim/2) over the
// whole head, of which the first `pairs` (int(partial_rotary_factor ·
// headDim / 2)) rotate with inverse frequency theta^(−2d/headDim) / factor
// (the exponent over the full head dim); the others are the identity.
func NewProportionalRoPE(headDim, pairs int, theta, factor float64) *RoPE {
	half := headDim / 2
	n := max(min(pairs, half), 0)
	if factor == 0 {
		factor = 1
	}
	r := &RoPE{Half: half, InvFreq: make([]float32, n)}
	for i := range n {
		exp := float32(2*i) / float32(headDim)
		r.InvFreq[i] = float32(1 / math.Pow(theta, float64(exp)) / factor)
	}
	return r
}

// Apply rotates one head vector x for position pos.
func (r *RoPE) Apply(x []float32, pos int) {
	p := float32(pos)
	for i, f := range r.InvFreq {
		ang := float64(p * f) // the angle is a float32 product in transformers
		c, s := float32(math.Cos(ang)), float32(math.Sin(ang))
		i0, i1 := i, i+r.Half
		if r.Interleaved {
			i0, i1 = 2*i, 2*i+1
		}
		a, b := x[i0], x[i1]
		x[i0] = a*c - b*s
		x[i1] = b*c + a*s
	}
}
