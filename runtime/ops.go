package runtime

import "math"

// Element-wise and small reduction operations of the forward pass, all in
// float32 storage with float64 accumulation where a sum is involved.

// rmsNorm writes x / sqrt(mean(x²) + eps) · w into dst (len(dst) == len(x) ==
// len(w)). MLX checkpoints store the zero-centred norms as 1+w already, so
// the same function serves the zero-centred norms and the plain gated norm.
func rmsNorm(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		dst[i] = v * inv * w[i]
	}
}

// rmsNormRows applies rmsNorm to each row of width len(w) in x.
func rmsNormRows(dst, x, w []float32, eps float32) {
	n := len(w)
	for i := 0; i+n <= len(x); i += n {
		rmsNorm(dst[i:i+n], x[i:i+n], w, eps)
	}
}

// l2Normalize scales x in place to x / sqrt(Σx² + eps), the form transformers
// (and the FLA kernels) use for the Gated DeltaNet q and k.
func l2Normalize(x []float32, eps float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss+eps))
	for i := range x {
		x[i] *= inv
	}
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

func silu(x float32) float32 { return x * sigmoid(x) }

// softplus is log(1+e^x) with torch's default threshold: x > 20 returns x.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// swiGLU writes silu(gate)·up into dst.
func swiGLU(dst, gate, up []float32) {
	for i, g := range gate {
		dst[i] = silu(g) * up[i]
	}
}

// softmax replaces x by its softmax, computed stably.
func softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	mx := x[0]
	for _, v := range x[1:] {
		if v > mx {
			mx = v
		}
	}
	var sum float64
	for i, v := range x {
		e := math.Exp(float64(v - mx))
		x[i] = float32(e)
		sum += e
	}
	inv := 1 / sum
	for i := range x {
		x[i] = float32(float64(x[i]) * inv)
	}
}

// topK writes the indices of the k largest values of p into idx (len k), in
// descending order of value; equal values are ordered by ascending index.
func topK(idx []int, p []float32) {
	k := len(idx)
	n := 0
	for i := range p {
		if n < k {
			idx[n] = i
			n++
			// insertion into the sorted prefix
			for j := n - 1; j > 0 && better(p, idx[j], idx[j-1]); j-- {
				idx[j], idx[j-1] = idx[j-1], idx[j]
			}
			continue
		}
		if !better(p, i, idx[k-1]) {
			continue
		}
		idx[k-1] = i
		for j := k - 1; j > 0 && better(p, idx[j], idx[j-1]); j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
}

// better reports whether element a ranks before element b.
func better(p []float32, a, b int) bool {
	if p[a] != p[b] {
		return p[a] > p[b]
	}
	return a < b
}

// argmax returns the index of the largest value (the first on ties).
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// rope holds the inverse frequencies of a partial NeoX-style rotary
// embedding: dims [0, rotary) of each head rotate in pairs (i, i+rotary/2)
// by pos·invFreq[i]; the rest pass through.
type rope struct {
	rotary  int
	invFreq []float32
}

func newRope(rotaryDim int, theta float64) *rope {
	half := rotaryDim / 2
	r := &rope{rotary: rotaryDim, invFreq: make([]float32, half)}
	for i := range half {
		// transformers: 1 / theta^(arange(0, dim, 2) / dim), in float32.
		exp := float32(2*i) / float32(rotaryDim)
		r.invFreq[i] = float32(1 / math.Pow(theta, float64(exp)))
	}
	return r
}

// apply rotates one head vector x (len ≥ rotary) for position pos.
func (r *rope) apply(x []float32, pos int) {
	half := r.rotary / 2
	p := float32(pos)
	for i := range half {
		ang := float64(p * r.invFreq[i]) // the angle is a float32 product in transformers
		c, s := float32(math.Cos(ang)), float32(math.Sin(ang))
		a, b := x[i], x[i+half]
		x[i] = a*c - b*s
		x[i+half] = b*c + a*s
	}
}

func expf(x float32) float32 { return float32(math.Exp(float64(x))) }
