package devicetest

import (
	"math"
	"math/rand/v2"
)

// The independent references: float64 scalar code that follows the
// contract's documentation, never a call of package nn's arithmetic.

func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
func silu64(x float64) float64    { return x * sigmoid64(x) }

func geluTanh64(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

func softplus64(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// rms64 is 1/sqrt(mean(x²)+eps).
func rms64(x []float64, eps float64) float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	return 1 / math.Sqrt(ss/float64(len(x))+eps)
}

// l2norm64 scales x to x/sqrt(Σx²+eps).
func l2norm64(x []float64, eps float64) {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss+eps)
	for i := range x {
		x[i] *= inv
	}
}

// softmax64 returns the softmax of x.
func softmax64(x []float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = max(mx, v)
	}
	out := make([]float64, len(x))
	var s float64
	for i, v := range x {
		out[i] = math.Exp(v - mx)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// randF32 returns n uniform values in [-scale, scale).
func randF32(r *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32((2*r.Float64() - 1) * scale)
	}
	return out
}

// randRange returns n uniform values in [lo, hi).
func randRange(r *rand.Rand, n int, lo, hi float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(lo + (hi-lo)*r.Float64())
	}
	return out
}

func maxAbs64(x []float64) float64 {
	var m float64
	for _, v := range x {
		m = max(m, math.Abs(v))
	}
	return m
}
