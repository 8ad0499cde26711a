package gemma4

import (
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
)

// NewLayerStates implements runtime.Graph: a KV cache per layer, a ring of
// the last sliding_window positions on the sliding layers.
func (m *graph) NewLayerStates() []runtime.LayerState {
	out := make([]runtime.LayerState, len(m.layers))
	for l, ly := range m.layers {
		w := ly.kv * ly.hd
		out[l] = nn.NewKVCache(w, w, ly.window)
	}
	return out
}

// Forward implements runtime.Graph.
func (m *graph) Forward(env runtime.Env, st []runtime.LayerState, pos int, tokens []int, opt *runtime.ForwardOptions) ([]float32, error) {
	c := m.cfg
	T, H, E := len(tokens), c.Hidden, c.Experts
	be := env.Backend
	x := make([]float32, T*H)
	for t, tok := range tokens {
		row := x[t*H : (t+1)*H]
		m.embed.Row(row, tok)
		nn.Scale(row, m.embedScale)
	}
	xn := make([]float32, T*H)
	mix := make([]float32, T*H)
	h1 := make([]float32, T*H)
	h2 := make([]float32, T*H)
	xe := make([]float32, T*H)
	R := make([]float32, T*E)
	spec := nn.NewSpeculation(env.Experts, opt.Speculate, E)
	moe := &nn.MoE{Backend: be, Experts: env.Experts, Act: nn.GELUTanhGate}
	for l, ly := range m.layers {
		if spec != nil {
			// The router sees the residual after attention; the one
			// entering the layer is the best early view of it.
			m.routerLogits(be, ly, x, xn, R, T)
			spec.Guess(l, R, T, E)
		}
		be.RMSNorm(xn, x, ly.inNorm, m.eps)
		m.attention(be, st[l].(*nn.KVCache), pos, ly, xn, mix, T)
		be.RMSNorm(xe, mix, ly.postAttnNorm, m.eps)
		nn.AddTo(x, xe)

		// Route on the post-attention residual, then read the experts
		// while the dense MLP computes.
		m.routerLogits(be, ly, x, xn, R, T)
		r := nn.NewRouting(T, c.TopK)
		nn.RouteSoftmaxTopK(r, R, T, E, true)
		for s, e := range r.Sel {
			r.Wts[s] *= ly.expertScale[e]
		}
		dense := func() {
			be.RMSNorm(xn, x, ly.preFF, m.eps)
			ly.mlp.Forward(be, xn, mix, T)
			be.RMSNorm(h1, mix, ly.postFF1, m.eps)
		}
		be.RMSNorm(xe, x, ly.preFF2, m.eps)
		if err := moe.Run(l, xe, T, H, r, dense, h2); err != nil {
			return nil, err
		}
		be.RMSNorm(mix, h2, ly.postFF2, m.eps)
		nn.AddTo(h1, mix)
		be.RMSNorm(h2, h1, ly.postFF, m.eps)
		nn.AddTo(x, h2)
		nn.Scale(x, ly.scalar)
		if opt.LayerHook != nil {
			opt.LayerHook(l, x)
		}
	}
	if opt.NoLogits {
		return nil, nil
	}
	rows, n := x, T
	if !opt.AllLogits {
		rows, n = x[(T-1)*H:], 1
	}
	normed := xn[:n*H]
	be.RMSNorm(normed, rows, m.norm, m.eps)
	logits := make([]float32, n*c.Vocab)
	be.MatMul(m.head, logits, normed, n)
	if m.softcap > 0 {
		nn.Softcap(logits, m.softcap)
	}
	return logits, nil
}

// routerLogits writes layer ly's router logits [T, E] for the residual x:
// proj(rmsnorm(x) · scale · hidden^-0.5), using buf [T, H].
func (m *graph) routerLogits(be runtime.Backend, ly *layer, x, buf, R []float32, T int) {
	H := m.cfg.Hidden
	for t := range T {
		nn.RMSNormUnit(buf[t*H:(t+1)*H], x[t*H:(t+1)*H], m.eps)
	}
	for t := range T {
		row := buf[t*H : (t+1)*H]
		for i := range row {
			row[i] *= ly.routerScale[i]
		}
	}
	be.MatMul(ly.router, R, buf, T)
}

// attention is one layer's attention over a chunk of T tokens at
// positions pos..: q/k norms with weights, a weightless v norm, RoPE on q
// and k, scale 1, causal over the cache (the last window positions on a
// sliding layer).
func (m *graph) attention(be runtime.Backend, kv *nn.KVCache, pos int, ly *layer, xn, out []float32, T int) {
	Nh, Nkv, hd := ly.heads, ly.kv, ly.hd
	qw, kvw := Nh*hd, Nkv*hd
	Q := make([]float32, T*qw)
	K := make([]float32, T*kvw)
	V := make([]float32, T*kvw)
	be.MatMul(ly.q, Q, xn, T)
	be.MatMul(ly.k, K, xn, T)
	if ly.kEqV {
		copy(V, K) // the raw keys, before k_norm and RoPE
	} else {
		be.MatMul(ly.v, V, xn, T)
	}
	for t := range T {
		p := pos + t
		for h := range Nh {
			q := Q[t*qw+h*hd : t*qw+(h+1)*hd]
			nn.RMSNorm(q, q, ly.qNorm, m.eps)
			ly.rope.Apply(q, p)
		}
		for g := range Nkv {
			k := K[t*kvw+g*hd : t*kvw+(g+1)*hd]
			nn.RMSNorm(k, k, ly.kNorm, m.eps)
			ly.rope.Apply(k, p)
			v := V[t*kvw+g*hd : t*kvw+(g+1)*hd]
			nn.RMSNormUnit(v, v, m.eps)
		}
	}
	O := make([]float32, T*Nh*hd)
	kv.Attend(O, Q, K, V, T, nn.AttnDims{Heads: Nh, KVHeads: Nkv, HeadDim: hd, QStride: hd, Scale: 1})
	be.MatMul(ly.o, out, O, T)
}
