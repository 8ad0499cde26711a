package tinymodel

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// The generator must give the same bytes on every machine. math/rand/v2's
// PCG is specified bit for bit; the float math on top of it is kept to
// operations IEEE 754 rounds exactly the same way everywhere (integer sums,
// single products, divisions), with explicit float64 conversions wherever a
// compiler could otherwise fuse a multiply and an add (Go allows FMA fusion
// on arm64, ppc64le, s390x unless a conversion forbids it). The only
// transcendental function needed, log for A_log, is computed here from a
// series instead of math.Log, whose assembly versions differ by platform.

// rng is a deterministic stream for one tensor.
type rng struct{ r *rand.Rand }

// newRNG seeds a PCG with the spec seed and a hash of the tensor name, so a
// tensor's values depend on nothing but (seed, name) and the draw count.
func newRNG(seed uint64, name string) rng {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rng{rand.New(rand.NewPCG(seed, h.Sum64()))}
}

// normal returns an approximately standard normal value: the Irwin-Hall sum
// of twelve uniform 32-bit draws, centred. The sum is an exact integer, so
// the result is exact; mean 0, variance 1, support [-6, 6].
func (g rng) normal() float64 {
	var s int64
	for range 12 {
		s += int64(g.r.Uint32())
	}
	return float64(s-6<<32) * 0x1p-32
}

// uniform returns a value in [a, b).
func (g rng) uniform(a, b float64) float64 {
	u := float64(g.r.Uint64()>>11) * 0x1p-53
	return a + float64((b-a)*u)
}

// normalF32 returns mean + std*N(0,1) rounded to float32.
func (g rng) normalF32(mean, std float64) float32 {
	return float32(mean + float64(std*g.normal()))
}

// detLog is the natural logarithm for positive finite x, computed from
// frexp and the series ln(m) = 2*atanh((m-1)/(m+1)) with |(m-1)/(m+1)| <
// 0.172, so 25 terms reach full float64 precision.
func detLog(x float64) float64 {
	frac, exp := math.Frexp(x) // x = frac * 2^exp, frac in [0.5, 1)
	if frac < math.Sqrt2/2 {
		frac *= 2
		exp--
	}
	y := (frac - 1) / (frac + 1)
	y2 := float64(y * y)
	var sum float64
	term := y
	for k := 1; k < 50; k += 2 {
		sum += term / float64(k)
		term = float64(term * y2)
	}
	return float64(float64(exp)*math.Ln2) + float64(2*sum)
}
