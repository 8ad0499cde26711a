package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

func nearT(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Fatalf("%s = %.9g, want %.9g", what, got, want)
	}
}

func TestNormVariantsByHand(t *testing.T) {
	x := []float32{3, -4} // mean(x²) = 12.5
	inv := 1 / math.Sqrt(12.5+1e-6)
	got := make([]float32, 2)
	RMSNormUnit(got, x, 1e-6)
	nearT(t, "unit[1]", float64(got[1]), -4*inv, 1e-6)
	RMSNormOffset(got, x, []float32{0.5, -1}, 1e-6)
	nearT(t, "offset[0]", float64(got[0]), 3*inv*1.5, 1e-6)
	nearT(t, "offset[1]", float64(got[1]), 0, 1e-6)
}

func TestGELUTanhAndSoftcapByHand(t *testing.T) {
	// torch.nn.functional.gelu(x, approximate="tanh")
	nearT(t, "gelu(1)", float64(GELUTanh(1)), 0.8411919906, 1e-6)
	nearT(t, "gelu(-0.5)", float64(GELUTanh(-0.5)), -0.1542859990, 1e-6)
	nearT(t, "gelu(0)", float64(GELUTanh(0)), 0, 0)
	x := []float32{30, -60, 0}
	Softcap(x, 30)
	nearT(t, "softcap(30)", float64(x[0]), 30*math.Tanh(1), 1e-5)
	nearT(t, "softcap(-60)", float64(x[1]), 30*math.Tanh(-2), 1e-5)
}

func TestProportionalAndInterleavedRoPE(t *testing.T) {
	// head 8, one rotating pair (d=0 with d=4), theta^0 = 1, factor 2:
	// angle pos/2; every other dim passes through.
	r := NewProportionalRoPE(8, 1, 1e6, 2)
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	r.Apply(x, 3)
	c, s := math.Cos(1.5), math.Sin(1.5)
	nearT(t, "x0", float64(x[0]), 1*c-5*s, 1e-6)
	nearT(t, "x4", float64(x[4]), 5*c+1*s, 1e-6)
	for _, i := range []int{1, 2, 3, 5, 6, 7} {
		nearT(t, "passthrough", float64(x[i]), float64(i+1), 0)
	}
	// pairs clamp to the head's half; frequencies use the exponent over the full head.
	if r := NewProportionalRoPE(8, 9, 100, 1); len(r.InvFreq) != 4 || math.Abs(float64(r.InvFreq[1])-math.Pow(100, -2.0/8)) > 1e-7 {
		t.Fatalf("inv freq %v", r.InvFreq)
	}
	// Interleaved pairing rotates (0,1) and (2,3).
	ri := NewRoPE(4, 10000)
	ri.Interleaved = true
	y := []float32{1, 0, 0, 1}
	ri.Apply(y, 1)
	nearT(t, "y0", float64(y[0]), math.Cos(1), 1e-6)
	nearT(t, "y1", float64(y[1]), math.Sin(1), 1e-6)
	a := 1 * math.Pow(10000, -0.5)
	nearT(t, "y2", float64(y[2]), -math.Sin(a), 1e-6)
	nearT(t, "y3", float64(y[3]), math.Cos(a), 1e-6)
}

// attendRef is causal attention over all keys of positions [max(0,
// p-window+1), p] (window 0: all), in float64, for one query head per KV
// head.
func attendRef(q, k, v [][]float64, window int, scale float64) [][]float64 {
	out := make([][]float64, len(q))
	for p := range q {
		lo := 0
		if window > 0 {
			lo = max(0, p-window+1)
		}
		s := make([]float64, p-lo+1)
		mx := math.Inf(-1)
		for j := range s {
			for d := range q[p] {
				s[j] += q[p][d] * k[lo+j][d]
			}
			s[j] *= scale
			mx = max(mx, s[j])
		}
		var z float64
		for j := range s {
			s[j] = math.Exp(s[j] - mx)
			z += s[j]
		}
		out[p] = make([]float64, len(v[0]))
		for j, w := range s {
			for d := range out[p] {
				out[p][d] += w / z * v[lo+j][d]
			}
		}
	}
	return out
}

// A sliding-window cache in chunks of every size (shorter and longer than
// the window) equals windowed attention over the whole sequence; so does a
// clone restored into a fresh cache half way, and a Reset cache run again.
func TestKVCacheWindowInChunks(t *testing.T) {
	const hd, n, W = 4, 13, 3
	r := rand.New(rand.NewPCG(7, 8))
	q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
	Q, K, V := make([]float32, n*hd), make([]float32, n*hd), make([]float32, n*hd)
	for p := range n {
		q[p], k[p], v[p] = make([]float64, hd), make([]float64, hd), make([]float64, hd)
		for d := range hd {
			Q[p*hd+d], K[p*hd+d], V[p*hd+d] = float32(r.NormFloat64()), float32(r.NormFloat64()), float32(r.NormFloat64())
			q[p][d], k[p][d], v[p][d] = float64(Q[p*hd+d]), float64(K[p*hd+d]), float64(V[p*hd+d])
		}
	}
	dims := AttnDims{Heads: 1, KVHeads: 1, HeadDim: hd, QStride: hd, Scale: 0.7}
	for _, window := range []int{0, W} {
		want := attendRef(q, k, v, window, 0.7)
		for chunk := 1; chunk <= n; chunk++ {
			c := NewKVCache(hd, hd, window)
			var saved LayerState
			run := func(c *KVCache, from int) {
				for p := from; p < n; p += chunk {
					T := min(chunk, n-p)
					O := make([]float32, T*hd)
					c.Attend(O, Q[p*hd:], K[p*hd:], V[p*hd:], T, dims)
					for i := range T {
						for d := range hd {
							if math.Abs(float64(O[i*hd+d])-want[p+i][d]) > 1e-5 {
								t.Fatalf("window %d, chunks of %d, from %d: position %d dim %d = %g, want %g", window, chunk, from, p+i, d, O[i*hd+d], want[p+i][d])
							}
						}
					}
					if p+T <= n/2 {
						saved = c.Clone()
					}
				}
			}
			run(c, 0)
			if c.Len() != n {
				t.Fatalf("Len %d after %d positions", c.Len(), n)
			}
			if saved != nil {
				fresh := NewKVCache(hd, hd, window)
				if !fresh.Restore(saved) {
					t.Fatal("Restore refused a clone of the same shape")
				}
				run(fresh, fresh.Len())
			}
			c.Reset()
			run(c, 0)
		}
	}
	if NewKVCache(hd, hd, 0).Restore(NewKVCache(hd, hd, W)) {
		t.Fatal("a full cache restored from a windowed one")
	}
}
