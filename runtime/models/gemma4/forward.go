package gemma4

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
)

// NewLayerStates implements runtime.Graph: a KV cache per layer, a ring of
// the last sliding_window positions on the sliding layers.
func (m *graph) NewLayerStates(dev nn.Device) ([]runtime.LayerState, error) {
	out := make([]runtime.LayerState, len(m.layers))
	for l, ly := range m.layers {
		w := ly.kv * ly.hd
		kv, err := dev.NewKV(w, w, ly.window)
		if err != nil {
			return nil, fmt.Errorf("layer %d state on %s: %w", l, dev.Name(), err)
		}
		out[l] = kv
	}
	return out, nil
}

// Forward implements runtime.Graph on env.Device: each layer is queued
// whole (its one wait is the router's top-k) and flushed at its end.
func (m *graph) Forward(env runtime.Env, st []runtime.LayerState, pos int, tokens []int, opt *runtime.ForwardOptions) (logits []float32, err error) {
	c := m.cfg
	T, H, E := len(tokens), c.Hidden, c.Experts
	dev := env.Device
	b, _ := m.bound.For(dev)
	defer func() {
		if e := dev.EndPass(); err == nil && e != nil {
			logits, err = nil, e
		}
	}()
	emb := make([]float32, T*H)
	for t, tok := range tokens {
		row := emb[t*H : (t+1)*H]
		m.embed.Row(row, tok)
		nn.Scale(row, m.embedScale)
	}
	x := dev.Temp(T * H)
	dev.Write(x, emb)
	xn := dev.Temp(T * H)
	mix := dev.Temp(T * H)
	h1 := dev.Temp(T * H)
	h2 := dev.Temp(T * H)
	xe := dev.Temp(T * H)
	R := dev.Temp(T * E)
	norm := func(y, x nn.Tensor, w []float32, rows int) {
		dev.RMSNorm(y, x, b.V(w), nn.NormSpec{Rows: rows, Width: H, Eps: m.eps})
	}
	spec := nn.NewSpeculation(env.Experts, opt.Speculate, E)
	moe := &nn.MoE{Device: dev, Experts: env.Experts, Act: nn.GELUTanhGate}
	var hook []float32
	for l, ly := range m.layers {
		kv, ok := st[l].(nn.KVState)
		if !ok {
			return nil, fmt.Errorf("layer %d: state %T is not a KV cache (a state of another model or device)", l, st[l])
		}
		if spec != nil && !nn.RoutesOnDevice(dev, env.Experts, l, E) {
			// The router sees the residual after attention; the one
			// entering the layer is the best early view of it.
			m.routerLogits(b, ly, x, xn, R, T)
			spec.R = nn.Grow(spec.R, T*E)
			if err := dev.Read(spec.R, R); err != nil {
				return nil, err
			}
			spec.Guess(l, spec.R, T, E)
		}
		norm(xn, x, ly.inNorm, T)
		m.attention(b, kv, pos, ly, xn, mix, T)
		norm(xe, mix, ly.postAttnNorm, T)
		// Route on the post-attention residual (its norm fused with the
		// residual add where the device can: routerLogits' norm), then
		// read the experts while the dense MLP computes.
		nn.AddRMSNorm(dev, x, xe, xn, b.V(ly.routerScale), nn.NormSpec{Rows: T, Width: H, Eps: m.eps})
		dev.MatMul(b.M(&ly.router), R, xn, T)
		dense := func() {
			norm(xn, x, ly.preFF, T)
			ly.mlp.Forward(b, xn, mix, T)
			norm(h1, mix, ly.postFF1, T)
		}
		norm(xe, x, ly.preFF2, T)
		spec := nn.RoutedSpec{Src: env.Experts, Layer: l, Logits: R, X: xe, Out: h2, T: T, E: E, H: H, K: c.TopK,
			Norm: true, Scale: ly.expertScale, ScaleDev: b.V(ly.expertScale), Act: moe.Act}
		if err := moe.Routed(spec, dense); err != nil {
			return nil, err
		}
		norm(mix, h2, ly.postFF2, T)
		nn.AddRMSNorm(dev, h1, mix, h2, b.V(ly.postFF), nn.NormSpec{Rows: T, Width: H, Eps: m.eps})
		dev.Add(x, h2, T*H)
		dev.Scale(x, ly.scalar, T*H)
		if err := b.Err(); err != nil {
			return nil, err
		}
		if err := dev.Flush(); err != nil {
			return nil, err
		}
		if opt.LayerHook != nil {
			hook = nn.Grow(hook, T*H)
			if err := dev.Read(hook, x); err != nil {
				return nil, err
			}
			opt.LayerHook(l, hook)
		}
	}
	if opt.NoLogits {
		return nil, nil
	}
	rows, n := x, T
	if !opt.AllLogits {
		rows, n = x.Slice((T-1)*H, T*H), 1
	}
	normed := xn.Slice(0, n*H)
	norm(normed, rows, m.norm, n)
	out := dev.Temp(n * c.Vocab)
	dev.MatMul(b.M(&m.head), out, normed, n)
	if m.softcap > 0 {
		dev.Softcap(out, m.softcap, n*c.Vocab)
	}
	// The final logits: the device may select their top instead of
	// bringing them all back (ForwardOptions.Top).
	if done, err := opt.SelectTop(dev, out, c.Vocab); done || err != nil {
		return nil, err
	}
	logits = opt.LogitsBuffer(n * c.Vocab)
	if err := dev.Read(logits, out); err != nil {
		return nil, err
	}
	return logits, nil
}

// routerLogits writes layer ly's router logits [T, E] for the residual x:
// proj(rmsnorm(x) · scale · hidden^-0.5), using buf [T, H]. The weightless
// norm times the scale is the weighted norm with the scale as its weight
// (the same products in the same order).
func (m *graph) routerLogits(b *nn.Binding, ly *layer, x, buf, R nn.Tensor, T int) {
	H := m.cfg.Hidden
	b.Dev.RMSNorm(buf, x, b.V(ly.routerScale), nn.NormSpec{Rows: T, Width: H, Eps: m.eps})
	b.Dev.MatMul(b.M(&ly.router), R, buf, T)
}

// attention is one layer's attention over a chunk of T tokens at
// positions pos..: q/k norms with weights, a weightless v norm, RoPE on q
// and k, scale 1, causal over the cache (the last window positions on a
// sliding layer).
func (m *graph) attention(b *nn.Binding, kv nn.KVState, pos int, ly *layer, xn, out nn.Tensor, T int) {
	dev := b.Dev
	Nh, Nkv, hd := ly.heads, ly.kv, ly.hd
	qw, kvw := Nh*hd, Nkv*hd
	Q := dev.Temp(T * qw)
	K := dev.Temp(T * kvw)
	V := dev.Temp(T * kvw)
	if ly.kEqV {
		nn.MatMuls(dev, xn, T, nn.Product{W: b.M(&ly.q), Y: Q}, nn.Product{W: b.M(&ly.k), Y: K})
		dev.Copy(V, K) // the raw keys, before k_norm and RoPE
	} else {
		nn.MatMuls(dev, xn, T, nn.Product{W: b.M(&ly.q), Y: Q}, nn.Product{W: b.M(&ly.k), Y: K}, nn.Product{W: b.M(&ly.v), Y: V})
	}
	dev.RMSNorm(Q, Q, b.V(ly.qNorm), nn.NormSpec{Rows: T * Nh, Width: hd, Eps: m.eps, XStride: hd, YStride: hd})
	dev.RoPE(Q, ly.rope, nn.RoPESpec{Rows: T * Nh, PerPos: Nh, Stride: hd, Pos0: pos})
	dev.RMSNorm(K, K, b.V(ly.kNorm), nn.NormSpec{Rows: T * Nkv, Width: hd, Eps: m.eps})
	dev.RoPE(K, ly.rope, nn.RoPESpec{Rows: T * Nkv, PerPos: Nkv, Stride: hd, Pos0: pos})
	dev.RMSNorm(V, V, nn.Tensor{}, nn.NormSpec{Rows: T * Nkv, Width: hd, Eps: m.eps, Kind: nn.NormUnit})
	O := dev.Temp(T * Nh * hd)
	dev.Attention(kv, O, Q, K, V, T, nn.AttnDims{Heads: Nh, KVHeads: Nkv, HeadDim: hd, QStride: hd, Scale: 1})
	dev.MatMul(b.M(&ly.o), out, O, T)
}
