package qwen3next

import (
	"math"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
)

// Forward implements runtime.Graph on env.Device: each layer is queued
// whole (its only wait is the router's top-k, which says which experts to
// read, unless the device routes on its own: nn.ExpertRouter), and flushed
// at its end.
func (m *graph) Forward(env runtime.Env, st []runtime.LayerState, pos int, tokens []int, opt *runtime.ForwardOptions) (logits []float32, err error) {
	c := m.cfg
	T := len(tokens)
	H := c.Hidden
	dev := env.Device
	b, _ := m.bound.For(dev)
	defer func() {
		if e := dev.EndPass(); err == nil && e != nil {
			logits, err = nil, e
		}
	}()
	emb := make([]float32, T*H)
	for t, tok := range tokens {
		m.embed.Row(emb[t*H:(t+1)*H], tok)
	}
	x := dev.Temp(T * H)
	dev.Write(x, emb)
	xn := dev.Temp(T * H)
	mix := dev.Temp(T * H)
	spec := nn.NewSpeculation(env.Experts, opt.Speculate, c.Experts)
	moe := &nn.MoE{Device: dev, Experts: env.Experts, Act: nn.SiLUGate}
	norm := func(y, x nn.Tensor, w []float32, rows int) {
		dev.RMSNorm(y, x, b.V(w), nn.NormSpec{Rows: rows, Width: H, Eps: m.eps})
	}
	// addNorm adds the mixer's or the MoE's output into the residual
	// stream and normalises the sum for what reads it next, as one op where
	// the device fuses them (nn.AddRMSNorm).
	addNorm := func(w []float32) {
		nn.AddRMSNorm(dev, x, mix, xn, b.V(w), nn.NormSpec{Rows: T, Width: H, Eps: m.eps})
	}
	var hook []float32
	if len(m.layers) > 0 {
		norm(xn, x, m.layers[0].inNorm, T)
	}
	last := len(m.layers) - 1
	for l, ly := range m.layers {
		// xn is input_layernorm(x) here.
		if spec != nil && ly.moe != nil && !nn.RoutesOnDevice(dev, env.Experts, l, c.Experts) {
			if err := m.speculate(b, spec, l, ly, x, T); err != nil {
				return nil, err
			}
		}
		if ly.attn != nil {
			kv, ok := st[l].(nn.KVState)
			if !ok {
				return nil, errState(l, st[l])
			}
			m.attention(b, kv, pos, ly.attn, xn, mix, T)
		} else {
			ts, ok := st[l].(nn.TensorState)
			if !ok {
				return nil, errState(l, st[l])
			}
			m.deltaNet(b, ts, ly.lin, xn, mix, T)
		}
		addNorm(ly.postNorm)
		if ly.moe != nil {
			if err := m.moe(b, moe, l, ly.moe, xn, mix, T); err != nil {
				return nil, err
			}
		} else {
			ly.mlp.Forward(b, xn, mix, T)
		}
		switch {
		case l < last:
			addNorm(m.layers[l+1].inNorm)
		case opt.NoLogits:
			dev.Add(x, mix, T*H)
		default: // xn: the final norm of every row
			addNorm(m.norm)
		}
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
	normed, n := xn, T
	if len(m.layers) == 0 {
		norm(xn, x, m.norm, T)
	}
	if !opt.AllLogits {
		normed, n = xn.Slice((T-1)*H, T*H), 1
	}
	out := dev.Temp(n * c.Vocab)
	dev.MatMul(b.M(&m.head), out, normed, n)
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

// attention is the gated full-attention mixer over a chunk of T tokens at
// positions pos...
func (m *graph) attention(b *nn.Binding, kv nn.KVState, pos int, a *attention, xn, out nn.Tensor, T int) {
	c := m.cfg
	dev := b.Dev
	Nh, Nkv, hd := c.Heads, c.KVHeads, c.HeadDim
	qStep := hd // distance between heads in the q_proj output
	if c.AttnOutputGate {
		qStep = 2 * hd
	}
	qw, kvw := Nh*qStep, Nkv*hd
	Q := dev.Temp(T * qw)
	K := dev.Temp(T * kvw)
	V := dev.Temp(T * kvw)
	nn.MatMuls(dev, xn, T, nn.Product{W: b.M(&a.q), Y: Q}, nn.Product{W: b.M(&a.k), Y: K}, nn.Product{W: b.M(&a.v), Y: V})
	dev.RMSNorm(Q, Q, b.V(a.qNorm), nn.NormSpec{Rows: T * Nh, Width: hd, XStride: qStep, YStride: qStep, Eps: m.eps})
	dev.RoPE(Q, m.rope, nn.RoPESpec{Rows: T * Nh, PerPos: Nh, Stride: qStep, Pos0: pos})
	dev.RMSNorm(K, K, b.V(a.kNorm), nn.NormSpec{Rows: T * Nkv, Width: hd, Eps: m.eps})
	dev.RoPE(K, m.rope, nn.RoPESpec{Rows: T * Nkv, PerPos: Nkv, Stride: hd, Pos0: pos})
	O := dev.Temp(T * Nh * hd)
	dev.Attention(kv, O, Q, K, V, T, nn.AttnDims{Heads: Nh, KVHeads: Nkv, HeadDim: hd, QStride: qStep,
		Scale: float32(1 / math.Sqrt(float64(hd)))})
	if c.AttnOutputGate {
		dev.SigmoidMul(O, Q.Slice(hd, T*qw), T*Nh, hd, hd, qStep)
	}
	dev.MatMul(b.M(&a.o), out, O, T)
}

// moe is the sparse MoE block over a chunk of T tokens: softmax top-k
// routing, the routed experts through the dispatcher (the shared expert
// computes while they are read), then the sigmoid-gated shared expert.
func (m *graph) moe(b *nn.Binding, d *nn.MoE, l int, mb *moeBlock, xn, out nn.Tensor, T int) error {
	c := m.cfg
	dev := b.Dev
	E, H := c.Experts, c.Hidden
	R := dev.Temp(T * E)
	spec := nn.RoutedSpec{Src: d.Experts, Layer: l, Logits: R, X: xn, Out: out, T: T, E: E, H: H, K: c.TopK,
		Norm: c.NormTopK, Act: d.Act}
	router := nn.Product{W: b.M(&mb.router), Y: R}
	if sm := mb.shared; sm != nil {
		sg := dev.Temp(T)
		nn.MatMuls(dev, xn, T, router, nn.Product{W: b.M(&mb.sharedGate), Y: sg})
		spec.Shared = &nn.ExpertMats{Gate: b.M(&sm.Gate), Up: b.M(&sm.Up), Down: b.M(&sm.Down)}
		spec.SharedGate = sg
	} else {
		dev.MatMul(router.W, R, xn, T)
	}
	return d.Routed(spec, nil)
}

// speculate guesses layer l's experts from x, the residual stream entering
// the layer [T, Hidden]: the router on post_attention_layernorm(x) (the
// router proper sees that norm of x plus the mixer's output; on the
// synthetic models this guesses a little better than the input_layernorm
// the mixer sees). It reads x and writes only its own scratch, and waits
// for the device (the guess is made on the host).
func (m *graph) speculate(b *nn.Binding, sp *nn.Speculation, l int, ly *layer, x nn.Tensor, T int) error {
	dev := b.Dev
	E, H := m.cfg.Experts, m.cfg.Hidden
	xn := dev.Temp(T * H)
	dev.RMSNorm(xn, x, b.V(ly.postNorm), nn.NormSpec{Rows: T, Width: H, Eps: m.eps})
	R := dev.Temp(T * E)
	dev.MatMul(b.M(&ly.moe.router), R, xn, T)
	sp.R = nn.Grow(sp.R, T*E)
	if err := dev.Read(sp.R, R); err != nil {
		return err
	}
	sp.Guess(l, sp.R, T, E)
	return nil
}
