package nn

import "math"

// DeltaNetHost is the Gated DeltaNet conv and recurrence over a chunk
// (DeltaNetArgs documents it) on host tensors: conv is the window [K-1][C],
// rec the recurrent state [Nv][Dk][Dv], both updated.
func DeltaNetHost(window, S []float32, a *DeltaNetArgs) {
	T, Nk, Nv, dk, dv, K := a.T, a.Nk, a.Nv, a.Dk, a.Dv, a.K
	Kd, Vd := Nk*dk, Nv*dv
	C := a.ConvDim()
	mixed, z, bb, aa := F32(a.Mixed), F32(a.Z), F32(a.B), F32(a.A)
	conv, negA, dtBias, norm := F32(a.Conv), F32(a.NegA), F32(a.DtBias), F32(a.Norm)
	Y := F32(a.Y)

	// Causal conv + SiLU for every token of the chunk (sequential: each
	// token shifts the window), then the per-head normalisations.
	cvAll := make([]float32, T*C)
	qScale := float32(1 / math.Sqrt(float64(dk)))
	for t := range T {
		u := mixed[t*C : (t+1)*C]
		cv := cvAll[t*C : (t+1)*C]
		for ch := range C {
			w := conv[ch*K : (ch+1)*K]
			acc := w[K-1] * u[ch]
			for j := 0; j < K-1; j++ {
				acc += w[j] * window[j*C+ch]
			}
			cv[ch] = SiLU(acc)
		}
		if K > 1 {
			copy(window, window[C:])
			copy(window[(K-2)*C:], u)
		}
		q, k := cv[:Kd], cv[Kd:2*Kd]
		for h := range Nk {
			qh := q[h*dk : (h+1)*dk]
			L2Normalize(qh, 1e-6)
			for i := range qh {
				qh[i] *= qScale
			}
			L2Normalize(k[h*dk:(h+1)*dk], 1e-6)
		}
	}

	// The gated delta recurrence: value heads are independent, so they run
	// in parallel, each over the whole chunk in token order.
	clear(Y[:T*Vd])
	ratio := Nv / Nk
	ParallelFor(Nv, T*dk*dv, func(h0, h1 int) {
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
				beta := Sigmoid(bb[t*Nv+h])
				decay := Expf(negA[h] * Softplus(aa[t*Nv+h]+dtBias[h]))
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
				// Gated RMSNorm: rmsnorm(o)·w·silu(z).
				RMSNorm(o, o, norm, a.Eps)
				zh := z[t*Vd+h*dv : t*Vd+(h+1)*dv]
				for j := range o {
					o[j] *= SiLU(zh[j])
				}
			}
		}
	})
}
