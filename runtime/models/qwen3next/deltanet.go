package qwen3next

import (
	"math"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
)

// deltaNet is the Gated DeltaNet mixer over a chunk of T tokens.
func (m *graph) deltaNet(be runtime.Backend, st *deltaState, d *deltaNet, xn, out []float32, T int) {
	c := m.cfg
	Kd, Vd, Nv, Nk := c.LinearKeyDim(), c.LinearValueDim(), c.LinValueHeads, c.LinKeyHeads
	dk, dv, K := c.LinKeyHeadDim, c.LinValHeadDim, c.ConvKernel
	C := c.ConvDim()
	mixed := make([]float32, T*C) // [q | k | v] per token, before the conv
	z := make([]float32, T*Vd)
	bb := make([]float32, T*Nv)
	aa := make([]float32, T*Nv)
	if d.fused {
		W := 2*Kd + 2*Vd
		P := make([]float32, T*W)
		be.MatMul(d.qkvz, P, xn, T)
		for t := range T {
			row := P[t*W : (t+1)*W]
			for i, dst := range d.perm {
				if int(dst) < C {
					mixed[t*C+int(dst)] = row[i]
				} else {
					z[t*Vd+int(dst)-C] = row[i]
				}
			}
		}
		BA := make([]float32, T*2*Nv)
		be.MatMul(d.ba, BA, xn, T)
		for t := range T {
			for i, dst := range d.permBA {
				if int(dst) < Nv {
					bb[t*Nv+int(dst)] = BA[t*2*Nv+i]
				} else {
					aa[t*Nv+int(dst)-Nv] = BA[t*2*Nv+i]
				}
			}
		}
	} else {
		be.MatMul(d.qkv, mixed, xn, T)
		be.MatMul(d.z, z, xn, T)
		be.MatMul(d.b, bb, xn, T)
		be.MatMul(d.a, aa, xn, T)
	}

	// Causal conv + SiLU for every token of the chunk (sequential: each
	// token shifts the window), then the per-head normalisations.
	window := st.conv
	cvAll := make([]float32, T*C)
	qScale := float32(1 / math.Sqrt(float64(dk)))
	for t := range T {
		u := mixed[t*C : (t+1)*C]
		cv := cvAll[t*C : (t+1)*C]
		for ch := range C {
			w := d.conv[ch*K : (ch+1)*K]
			acc := w[K-1] * u[ch]
			for j := 0; j < K-1; j++ {
				acc += w[j] * window[j*C+ch]
			}
			cv[ch] = nn.SiLU(acc)
		}
		if K > 1 {
			copy(window, window[C:])
			copy(window[(K-2)*C:], u)
		}
		q, k := cv[:Kd], cv[Kd:2*Kd]
		for h := range Nk {
			qh := q[h*dk : (h+1)*dk]
			nn.L2Normalize(qh, 1e-6)
			for i := range qh {
				qh[i] *= qScale
			}
			nn.L2Normalize(k[h*dk:(h+1)*dk], 1e-6)
		}
	}

	// The gated delta recurrence: value heads are independent, so they run
	// in parallel, each over the whole chunk in token order.
	S := st.rec
	Y := make([]float32, T*Vd)
	ratio := Nv / Nk
	nn.ParallelFor(Nv, T*dk*dv, func(h0, h1 int) {
		mem := make([]float32, dv)
		delta := make([]float32, dv)
		for h := h0; h < h1; h++ {
			kh := h / ratio
			Sh := S[h*dk*dv : (h+1)*dk*dv]
			for t := range T {
				cv := cvAll[t*C : (t+1)*C]
				kv := cv[Kd+kh*dk : Kd+(kh+1)*dk]
				qv := cv[kh*dk : (kh+1)*dk]
				vv := cv[2*Kd+h*dv : 2*Kd+(h+1)*dv]
				beta := nn.Sigmoid(bb[t*Nv+h])
				decay := nn.Expf(d.negA[h] * nn.Softplus(aa[t*Nv+h]+d.dtBias[h]))
				// S ← decay·S;  mem = Sᵀk
				clear(mem)
				for i := range dk {
					row := Sh[i*dv : (i+1)*dv]
					ki := kv[i]
					for j := range row {
						row[j] *= decay
						mem[j] += row[j] * ki
					}
				}
				for j := range delta {
					delta[j] = beta * (vv[j] - mem[j])
				}
				// S ← S + k ⊗ δ;  o = Sᵀq
				o := Y[t*Vd+h*dv : t*Vd+(h+1)*dv]
				for i := range dk {
					row := Sh[i*dv : (i+1)*dv]
					ki, qi := kv[i], qv[i]
					for j := range row {
						row[j] += ki * delta[j]
						o[j] += row[j] * qi
					}
				}
				// Gated RMSNorm: rmsnorm(o)·w·nn.SiLU(z).
				nn.RMSNorm(o, o, d.norm, m.eps)
				zh := z[t*Vd+h*dv : t*Vd+(h+1)*dv]
				for j := range o {
					o[j] *= nn.SiLU(zh[j])
				}
			}
		}
	})
	be.MatMul(d.out, out, Y, T)
}
