package qwen3next

import (
	"math"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
)

// Forward implements runtime.Graph. The conv and the DeltaNet recurrence
// are sequential inside the chunk; everything else runs over it at once.
func (m *graph) Forward(env runtime.Env, st []runtime.LayerState, pos int, tokens []int, opt *runtime.ForwardOptions) ([]float32, error) {
	c := m.cfg
	T := len(tokens)
	H := c.Hidden
	be := env.Backend
	x := make([]float32, T*H)
	for t, tok := range tokens {
		m.embed.Row(x[t*H:(t+1)*H], tok)
	}
	xn := make([]float32, T*H)
	mix := make([]float32, T*H)
	spec := nn.NewSpeculation(env.Experts, opt.Speculate, c.Experts)
	moe := &nn.MoE{Backend: be, Experts: env.Experts, Act: nn.SiLUGate}
	for l, ly := range m.layers {
		be.RMSNorm(xn, x, ly.inNorm, m.eps)
		if spec != nil && ly.moe != nil {
			m.speculate(be, spec, l, ly, x, T)
		}
		if ly.attn != nil {
			m.attention(be, st[l].(*nn.KVCache), pos, ly.attn, xn, mix, T)
		} else {
			m.deltaNet(be, st[l].(*deltaState), ly.lin, xn, mix, T)
		}
		nn.AddTo(x, mix)
		be.RMSNorm(xn, x, ly.postNorm, m.eps)
		if ly.moe != nil {
			if err := m.moe(be, moe, l, ly.moe, xn, mix, T); err != nil {
				return nil, err
			}
		} else {
			ly.mlp.Forward(be, xn, mix, T)
		}
		nn.AddTo(x, mix)
		if opt.LayerHook != nil {
			opt.LayerHook(l, x)
		}
	}
	if opt.NoLogits {
		return nil, nil
	}
	rows := x
	n := T
	if !opt.AllLogits {
		rows, n = x[(T-1)*H:], 1
	}
	normed := xn[:n*H]
	be.RMSNorm(normed, rows, m.norm, m.eps)
	logits := make([]float32, n*c.Vocab)
	be.MatMul(m.head, logits, normed, n)
	return logits, nil
}

// attention is the gated full-attention mixer over a chunk of T tokens at
// positions pos...
func (m *graph) attention(be runtime.Backend, kv *nn.KVCache, pos int, a *attention, xn, out []float32, T int) {
	c := m.cfg
	Nh, Nkv, hd := c.Heads, c.KVHeads, c.HeadDim
	qStep := hd // distance between heads in the q_proj output
	if c.AttnOutputGate {
		qStep = 2 * hd
	}
	qw, kvw := Nh*qStep, Nkv*hd
	Q := make([]float32, T*qw)
	K := make([]float32, T*kvw)
	V := make([]float32, T*kvw)
	be.MatMul(a.q, Q, xn, T)
	be.MatMul(a.k, K, xn, T)
	be.MatMul(a.v, V, xn, T)
	for t := range T {
		p := pos + t
		for h := range Nh {
			q := Q[t*qw+h*qStep : t*qw+h*qStep+hd]
			nn.RMSNorm(q, q, a.qNorm, m.eps)
			m.rope.Apply(q, p)
		}
		for g := range Nkv {
			k := K[t*kvw+g*hd : t*kvw+(g+1)*hd]
			nn.RMSNorm(k, k, a.kNorm, m.eps)
			m.rope.Apply(k, p)
		}
	}
	O := make([]float32, T*Nh*hd)
	kv.Attend(O, Q, K, V, T, nn.AttnDims{Heads: Nh, KVHeads: Nkv, HeadDim: hd, QStride: qStep,
		Scale: float32(1 / math.Sqrt(float64(hd)))})
	if c.AttnOutputGate {
		for t := range T {
			for h := range Nh {
				o := O[(t*Nh+h)*hd : (t*Nh+h+1)*hd]
				gate := Q[t*qw+h*qStep+hd : t*qw+(h+1)*qStep]
				for i := range o {
					o[i] *= nn.Sigmoid(gate[i])
				}
			}
		}
	}
	be.MatMul(a.o, out, O, T)
}

// moe is the sparse MoE block over a chunk of T tokens: softmax top-k
// routing, the routed experts through the dispatcher (the shared expert
// computes while they are read), then the sigmoid-gated shared expert.
func (m *graph) moe(be runtime.Backend, d *nn.MoE, l int, b *moeBlock, xn, out []float32, T int) error {
	c := m.cfg
	E, H := c.Experts, c.Hidden
	R := make([]float32, T*E)
	be.MatMul(b.router, R, xn, T)
	r := nn.NewRouting(T, c.TopK)
	nn.RouteSoftmaxTopK(r, R, T, E, c.NormTopK)
	var sh, sg []float32
	var overlap func()
	if b.shared != nil {
		overlap = func() {
			sh = make([]float32, T*H)
			b.shared.Forward(be, xn, sh, T)
			sg = make([]float32, T)
			be.MatMul(b.sharedGate, sg, xn, T)
		}
	}
	if err := d.Run(l, xn, T, H, r, overlap, out); err != nil {
		return err
	}
	if sh != nil {
		for t := range T {
			nn.Axpy(out[t*H:(t+1)*H], nn.Sigmoid(sg[t]), sh[t*H:(t+1)*H])
		}
	}
	return nil
}

// speculate guesses layer l's experts from x, the residual stream entering
// the layer [T, Hidden]: the router on post_attention_layernorm(x) (the
// router proper sees that norm of x plus the mixer's output; on the
// synthetic models this guesses a little better than the input_layernorm
// the mixer sees). It reads x and writes only the speculation's buffers.
func (m *graph) speculate(be runtime.Backend, sp *nn.Speculation, l int, ly *layer, x []float32, T int) {
	E := m.cfg.Experts
	sp.XN = nn.Grow(sp.XN, T*m.cfg.Hidden)
	be.RMSNorm(sp.XN, x, ly.postNorm, m.eps)
	sp.R = nn.Grow(sp.R, T*E)
	be.MatMul(ly.moe.router, sp.R, sp.XN, T)
	sp.Guess(l, sp.R, T, E)
}
