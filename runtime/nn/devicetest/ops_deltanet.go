package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// dnShape is one Gated DeltaNet layer's dimensions and weights.
type dnShape struct {
	Nk, Nv, Dk, Dv, K   int
	conv                []float32 // [C][K]
	negA, dtBias, normW []float32
	eps                 float32
}

func (s *dnShape) C() int { return 2*s.Nk*s.Dk + s.Nv*s.Dv }

func newDNShape(r *rand.Rand, Nk, Nv, Dk, Dv, K int) *dnShape {
	s := &dnShape{Nk: Nk, Nv: Nv, Dk: Dk, Dv: Dv, K: K, eps: 1e-6}
	s.conv = randF32(r, s.C()*K, 0.6)
	s.negA = make([]float32, Nv)
	for i := range s.negA {
		s.negA[i] = -float32(math.Exp(r.Float64()*2 - 1))
	}
	s.dtBias = randF32(r, Nv, 1)
	s.normW = randRange(r, Dv, 0.5, 1.5)
	return s
}

// dnRef is the reference state of a DeltaNet layer: the conv window
// [K-1][C] and the recurrent state [Nv][Dk][Dv], in float64.
type dnRef struct {
	s      *dnShape
	window []float64
	S      []float64
}

func newDNRef(s *dnShape) *dnRef {
	return &dnRef{s: s, window: make([]float64, (s.K-1)*s.C()), S: make([]float64, s.Nv*s.Dk*s.Dv)}
}

// step runs one chunk of T tokens as DeltaNetArgs documents and returns Y
// [T, Nv·Dv].
func (h *dnRef) step(mixed, z, b, a []float32, T int) []float64 {
	s := h.s
	C, K, Nk, Nv, Dk, Dv := s.C(), s.K, s.Nk, s.Nv, s.Dk, s.Dv
	Kd := Nk * Dk
	Y := make([]float64, T*Nv*Dv)
	for t := range T {
		u := mixed[t*C : (t+1)*C]
		cv := make([]float64, C)
		for ch := range C {
			w := s.conv[ch*K : (ch+1)*K]
			acc := float64(w[K-1]) * float64(u[ch])
			for j := range K - 1 {
				acc += float64(w[j]) * h.window[j*C+ch]
			}
			cv[ch] = silu64(acc)
		}
		if K > 1 {
			copy(h.window, h.window[C:])
			for ch := range C {
				h.window[(K-2)*C+ch] = float64(u[ch])
			}
		}
		q, k, v := cv[:Kd], cv[Kd:2*Kd], cv[2*Kd:]
		for hk := range Nk {
			l2norm64(q[hk*Dk:(hk+1)*Dk], 1e-6)
			for i := hk * Dk; i < (hk+1)*Dk; i++ {
				q[i] /= math.Sqrt(float64(Dk))
			}
			l2norm64(k[hk*Dk:(hk+1)*Dk], 1e-6)
		}
		for hv := range Nv {
			hk := hv / (Nv / Nk)
			S := h.S[hv*Dk*Dv : (hv+1)*Dk*Dv]
			kh, qh, vh := k[hk*Dk:(hk+1)*Dk], q[hk*Dk:(hk+1)*Dk], v[hv*Dv:(hv+1)*Dv]
			decay := math.Exp(float64(s.negA[hv]) * softplus64(float64(a[t*Nv+hv])+float64(s.dtBias[hv])))
			beta := sigmoid64(float64(b[t*Nv+hv]))
			for i := range S {
				S[i] *= decay
			}
			delta := make([]float64, Dv)
			for j := range Dv {
				var m float64
				for i := range Dk {
					m += S[i*Dv+j] * kh[i]
				}
				delta[j] = beta * (vh[j] - m)
			}
			for i := range Dk {
				for j := range Dv {
					S[i*Dv+j] += kh[i] * delta[j]
				}
			}
			o := make([]float64, Dv)
			for j := range Dv {
				for i := range Dk {
					o[j] += S[i*Dv+j] * qh[i]
				}
			}
			inv := rms64(o, float64(s.eps))
			y := Y[(t*Nv+hv)*Dv : (t*Nv+hv+1)*Dv]
			for j := range Dv {
				y[j] = o[j] * inv * float64(s.normW[j]) * silu64(float64(z[(t*Nv+hv)*Dv+j]))
			}
		}
	}
	return Y
}

// dnInputs are a sequence's DeltaNet inputs.
type dnInputs struct{ mixed, z, b, a []float32 }

func newDNInputs(r *rand.Rand, s *dnShape, T int) dnInputs {
	return dnInputs{
		mixed: randF32(r, T*s.C(), 1.5),
		z:     randF32(r, T*s.Nv*s.Dv, 2),
		b:     randF32(r, T*s.Nv, 2),
		a:     randF32(r, T*s.Nv, 2),
	}
}

func (in dnInputs) rows(s *dnShape, t0, t1 int) dnInputs {
	C, V := s.C(), s.Nv*s.Dv
	return dnInputs{in.mixed[t0*C : t1*C], in.z[t0*V : t1*V], in.b[t0*s.Nv : t1*s.Nv], in.a[t0*s.Nv : t1*s.Nv]}
}

// dnRun queues one chunk on the device and returns Y.
func dnRun(t *testing.T, dev nn.Device, s *dnShape, w dnWeights, st nn.TensorState, in dnInputs, T int) []float32 {
	t.Helper()
	Y := view(dev, T*s.Nv*s.Dv)
	dev.DeltaNet(st, &nn.DeltaNetArgs{T: T, Nk: s.Nk, Nv: s.Nv, Dk: s.Dk, Dv: s.Dv, K: s.K, Eps: s.eps,
		Y: Y, Mixed: put(dev, in.mixed), Z: put(dev, in.z), B: put(dev, in.b), A: put(dev, in.a),
		Conv: w.conv, NegA: w.negA, DtBias: w.dtBias, Norm: w.norm})
	return get(t, dev, Y)
}

type dnWeights struct{ conv, negA, dtBias, norm nn.Tensor }

func dnResident(t *testing.T, dev nn.Device, s *dnShape) dnWeights {
	var w dnWeights
	for _, p := range []struct {
		dst *nn.Tensor
		v   []float32
	}{{&w.conv, s.conv}, {&w.negA, s.negA}, {&w.dtBias, s.dtBias}, {&w.norm, s.normW}} {
		var err error
		if *p.dst, err = dev.Constant(p.v); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// DeltaNet: chunks (17 tokens; 1 and 16) against token-by-token steps and both against the
// float64 reference, outputs and the final conv window and recurrent
// state; several shapes (GQA-like value heads per key head, K = 2 and 4).
func testDeltaNet(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(8)
	// The last two: the real models' head dims (128), and dims past them
	// (a GPU may keep the state in registers up to 128).
	for _, sh := range [][5]int{{2, 4, 8, 5, 4}, {1, 1, 16, 16, 2}, {2, 6, 12, 7, 4}, {1, 2, 128, 128, 4}, {1, 1, 136, 130, 4}} {
		s := newDNShape(r, sh[0], sh[1], sh[2], sh[3], sh[4])
		w := dnResident(t, dev, s)
		// A chunk of 17 and one of 16: a GPU may take another kernel for
		// decode-sized chunks (CUDA's and Metal's up to 16 tokens).
		const T = 17
		in := newDNInputs(r, s, T)
		name := fmt.Sprintf("Nk%d Nv%d Dk%d Dv%d K%d", s.Nk, s.Nv, s.Dk, s.Dv, s.K)
		ref := newDNRef(s)
		want := ref.step(in.mixed, in.z, in.b, in.a, T)
		scale := same(len(want), maxAbs64(want))
		var outs [][]float32
		ones := make([]int, T)
		for i := range ones {
			ones[i] = 1
		}
		for _, split := range [][]int{{T}, ones, {1, 16}} {
			st, err := dev.NewTensors((s.K-1)*s.C(), s.Nv*s.Dk*s.Dv)
			if err != nil {
				t.Fatal(err)
			}
			var got []float32
			t0 := 0
			for _, n := range split {
				got = append(got, dnRun(t, dev, s, w, st, in.rows(s, t0, t0+n), n)...)
				endPass(t, dev)
				t0 += n
			}
			check(t, fmt.Sprintf("%s split %v: Y", name, split), got, want, scale, tol.Mixer)
			win := get(t, dev, st.Tensor(0))
			check(t, fmt.Sprintf("%s split %v: conv window", name, split), win, ref.window, same(len(win), max(maxAbs64(ref.window), 1e-30)), tol.Mixer)
			S := get(t, dev, st.Tensor(1))
			check(t, fmt.Sprintf("%s split %v: recurrent state", name, split), S, ref.S, same(len(S), maxAbs64(ref.S)), tol.Mixer)
			endPass(t, dev)
			outs = append(outs, got)
		}
		// Chunked against token-by-token directly.
		within(t, name+": one chunk against token-by-token", outs[0], f64(outs[1]), scale, tol.Mixer)
	}
}
