package nn

import (
	"math"
	goruntime "runtime"
	"sync"
)

// Element-wise and small reduction operations, all in float32 storage with
// float64 accumulation where a sum is involved.

// RMSNorm writes x / sqrt(mean(x²) + eps) · w into dst (len(dst) == len(x)
// == len(w)). MLX checkpoints store zero-centred norms as 1+w already, so
// this one function serves them and plain norms; see RMSNormOffset and
// RMSNormUnit for the other variants.
func RMSNorm(dst, x, w []float32, eps float32) {
	inv := rmsInv(x, eps)
	for i, v := range x {
		dst[i] = v * inv * w[i]
	}
}

// RMSNormOffset writes x / sqrt(mean(x²) + eps) · (1 + w): a zero-centred
// norm whose weight was stored without the offset (transformers' layout).
func RMSNormOffset(dst, x, w []float32, eps float32) {
	inv := rmsInv(x, eps)
	for i, v := range x {
		dst[i] = v * inv * (1 + w[i])
	}
}

// RMSNormUnit writes x / sqrt(mean(x²) + eps): a norm without a weight.
func RMSNormUnit(dst, x []float32, eps float32) {
	inv := rmsInv(x, eps)
	for i, v := range x {
		dst[i] = v * inv
	}
}

func rmsInv(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
}

// RMSNormRows applies RMSNorm to each row of width len(w) in x.
func RMSNormRows(dst, x, w []float32, eps float32) {
	n := len(w)
	for i := 0; i+n <= len(x); i += n {
		RMSNorm(dst[i:i+n], x[i:i+n], w, eps)
	}
}

// L2Normalize scales x in place to x / sqrt(Σx² + eps), the form
// transformers (and the FLA kernels) use for the Gated DeltaNet q and k.
func L2Normalize(x []float32, eps float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss+eps))
	for i := range x {
		x[i] *= inv
	}
}

// Sigmoid is 1/(1+e^-x).
func Sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// SiLU is x·sigmoid(x).
func SiLU(x float32) float32 { return x * Sigmoid(x) }

// GELUTanh is the tanh approximation of GELU (PyTorch's
// gelu(approximate="tanh"), "gelu_pytorch_tanh" in configs).
func GELUTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// Softplus is log(1+e^x) with torch's default threshold: x > 20 returns x.
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// Expf is e^x through float64.
func Expf(x float32) float32 { return float32(math.Exp(float64(x))) }

// SwiGLU writes silu(gate)·up into dst.
func SwiGLU(dst, gate, up []float32) {
	for i, g := range gate {
		dst[i] = SiLU(g) * up[i]
	}
}

// Softmax replaces x by its softmax, computed stably.
func Softmax(x []float32) {
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

// TopK writes the indices of the k largest values of p into idx (len k),
// in descending order of value; equal values are ordered by ascending
// index.
func TopK(idx []int, p []float32) {
	k := len(idx)
	n := 0
	for i := range p {
		if n < k {
			idx[n] = i
			n++
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

func better(p []float32, a, b int) bool {
	if p[a] != p[b] {
		return p[a] > p[b]
	}
	return a < b
}

// Argmax returns the index of the largest value (the first on ties).
func Argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// Dot is Σ a[i]·b[i] in four float32 lanes.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// Axpy does y += a·x.
func Axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// AddTo does x += y.
func AddTo(x, y []float32) {
	for i, v := range y {
		x[i] += v
	}
}

// Scale does x *= a.
func Scale(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}

// Softcap replaces x by cap·tanh(x/cap) (cap > 0).
func Softcap(x []float32, cap float32) {
	for i, v := range x {
		x[i] = float32(float64(cap) * math.Tanh(float64(v/cap)))
	}
}

// Grow returns b resized to n, reallocated when its capacity is short
// (the contents are not kept).
func Grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// ParallelFor runs fn over [0, n) split into contiguous ranges, one per
// GOMAXPROCS goroutine, when n·workPerItem is large enough to pay for it.
func ParallelFor(n, workPerItem int, fn func(lo, hi int)) {
	p := goruntime.GOMAXPROCS(0)
	if p > n {
		p = n
	}
	if p <= 1 || n*workPerItem < 1<<15 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range p {
		lo, hi := i*n/p, (i+1)*n/p
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}
