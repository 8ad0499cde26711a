package runtime

import (
	"fmt"
	"math"
	goruntime "runtime"
	"sync"
)

// State is the decode state of one sequence: the position, a KV cache for
// each full-attention layer, and the conv window and recurrent state of each
// Gated DeltaNet layer. A State belongs to the Model that made it.
type State struct {
	m    *Model
	pos  int
	k, v [][]float32 // per layer: [pos][KVHeads·HeadDim]
	conv [][]float32 // per layer: the last K-1 conv inputs, oldest first, [K-1][C]
	rec  [][]float32 // per layer: [Nv][dk][dv]
}

// NewState returns an empty decode state (position 0).
func (m *Model) NewState() *State {
	c := m.Config
	s := &State{m: m, k: make([][]float32, c.Layers), v: make([][]float32, c.Layers),
		conv: make([][]float32, c.Layers), rec: make([][]float32, c.Layers)}
	for l, ly := range m.layers {
		if ly.lin != nil {
			s.conv[l] = make([]float32, (c.ConvKernel-1)*c.ConvDim())
			s.rec[l] = make([]float32, c.LinValueHeads*c.LinKeyHeadDim*c.LinValHeadDim)
		}
	}
	return s
}

// Pos is the number of tokens the state has seen.
func (s *State) Pos() int { return s.pos }

// Reset empties the state (position 0), keeping its buffers.
func (s *State) Reset() {
	s.pos = 0
	for l := range s.k {
		s.k[l], s.v[l] = s.k[l][:0], s.v[l][:0]
		clear(s.conv[l])
		clear(s.rec[l])
	}
}

// ForwardOptions selects what Forward returns.
type ForwardOptions struct {
	// AllLogits returns logits for every token of the chunk; otherwise only
	// for the last one.
	AllLogits bool
	// NoLogits skips the final norm and lm_head (a prefill chunk whose
	// logits are not needed). It overrides AllLogits.
	NoLogits bool
	// Speculate, if > 0 and the expert source is an ExpertSpeculator,
	// guesses each sparse layer's experts before its attention or DeltaNet
	// mixer runs: layer l's router applied to the residual stream entering
	// the layer, normed with the layer's post_attention_layernorm (the
	// router proper sees that norm of the residual after the mixer's
	// output is added), picks the top Speculate experts per token, and
	// Speculate(l, guess) lets the source start reading them while the
	// mixer computes. The guess is only a hint: the results are the same,
	// bit for bit, with or without it.
	Speculate int
	// LayerHook, if set, is called after each decoder layer with that
	// layer's output hidden states [T, Hidden] (before the final norm). The
	// slice is reused: copy what you keep.
	LayerHook func(layer int, hidden []float32)
}

// Forward runs a chunk of tokens through the model, continuing from st, and
// returns float32 logits [rows, Vocab] (rows = len(tokens) with AllLogits,
// else 1; none with NoLogits). Matrix products run over the whole chunk; the
// conv and the DeltaNet recurrence are sequential inside it; each routed
// expert a chunk needs is fetched once. If Forward returns an error after
// the token check, st is left inconsistent and must be Reset.
func (m *Model) Forward(st *State, tokens []int, opt *ForwardOptions) ([]float32, error) {
	if opt == nil {
		opt = &ForwardOptions{}
	}
	if st == nil || st.m != m {
		return nil, fmt.Errorf("forward: state does not belong to this model")
	}
	T := len(tokens)
	if T == 0 {
		return nil, fmt.Errorf("forward: no tokens")
	}
	c := m.Config
	for i, tok := range tokens {
		if tok < 0 || tok >= c.Vocab {
			return nil, fmt.Errorf("forward: token %d at index %d out of range [0, %d)", tok, i, c.Vocab)
		}
	}
	H := c.Hidden
	be := m.Backend
	x := make([]float32, T*H)
	for t, tok := range tokens {
		m.embed.Row(x[t*H:(t+1)*H], tok)
	}
	xn := make([]float32, T*H)
	mix := make([]float32, T*H)
	var spec *speculation
	if sp, ok := m.Experts.(speculator); ok && opt.Speculate > 0 {
		spec = &speculation{src: sp, n: min(opt.Speculate, c.Experts)}
	}
	for l, ly := range m.layers {
		be.RMSNorm(xn, x, ly.inNorm, m.eps)
		if spec != nil && ly.moe != nil {
			m.speculate(spec, l, ly, x, T)
		}
		if ly.attn != nil {
			m.attention(st, l, ly.attn, xn, mix, T)
		} else {
			m.deltaNet(st, l, ly.lin, xn, mix, T)
		}
		addTo(x, mix)
		be.RMSNorm(xn, x, ly.postNorm, m.eps)
		if ly.moe != nil {
			if err := m.moe(l, ly.moe, xn, mix, T); err != nil {
				return nil, err
			}
		} else {
			m.mlp(ly.mlp, xn, mix, T, c.Intermediate)
		}
		addTo(x, mix)
		if opt.LayerHook != nil {
			opt.LayerHook(l, x)
		}
	}
	st.pos += T
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

func addTo(x, y []float32) {
	for i, v := range y {
		x[i] += v
	}
}

// attention is the gated full-attention mixer over a chunk of T tokens.
func (m *Model) attention(st *State, l int, a *attention, xn, out []float32, T int) {
	c := m.Config
	be := m.Backend
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
		pos := st.pos + t
		for h := range Nh {
			q := Q[t*qw+h*qStep : t*qw+h*qStep+hd]
			rmsNorm(q, q, a.qNorm, m.eps)
			m.rope.apply(q, pos)
		}
		for g := range Nkv {
			k := K[t*kvw+g*hd : t*kvw+(g+1)*hd]
			rmsNorm(k, k, a.kNorm, m.eps)
			m.rope.apply(k, pos)
		}
	}
	st.k[l] = append(st.k[l], K...)
	st.v[l] = append(st.v[l], V...)
	kc, vc := st.k[l], st.v[l]

	O := make([]float32, T*Nh*hd)
	scores := make([]float32, st.pos+T)
	scale := float32(1 / math.Sqrt(float64(hd)))
	group := Nh / Nkv
	for t := range T {
		n := st.pos + t + 1 // keys visible to this token (causal)
		for h := range Nh {
			g := h / group
			q := Q[t*qw+h*qStep : t*qw+h*qStep+hd]
			s := scores[:n]
			for j := range n {
				s[j] = dot(q, kc[j*kvw+g*hd:j*kvw+(g+1)*hd]) * scale
			}
			softmax(s)
			o := O[(t*Nh+h)*hd : (t*Nh+h+1)*hd]
			for j, p := range s {
				axpy(o, p, vc[j*kvw+g*hd:j*kvw+(g+1)*hd])
			}
			if c.AttnOutputGate {
				gate := Q[t*qw+h*qStep+hd : t*qw+(h+1)*qStep]
				for i := range o {
					o[i] *= sigmoid(gate[i])
				}
			}
		}
	}
	be.MatMul(a.o, out, O, T)
}

// parallelFor runs fn over [0, n) split into contiguous ranges, one per
// GOMAXPROCS goroutine, when n·workPerItem is large enough to pay for it.
func parallelFor(n, workPerItem int, fn func(lo, hi int)) {
	p := goruntime.GOMAXPROCS(0)
	if p > n {
		p = n
	}
	if p <= 1 || n*workPerItem < 1<<15 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range p {
		lo, hi := i*n/p, (i+1)*n/p
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy does y += a·x.
func axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// deltaNet is the Gated DeltaNet mixer over a chunk of T tokens.
func (m *Model) deltaNet(st *State, l int, d *deltaNet, xn, out []float32, T int) {
	c := m.Config
	be := m.Backend
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
	window := st.conv[l]
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
			cv[ch] = silu(acc)
		}
		if K > 1 {
			copy(window, window[C:])
			copy(window[(K-2)*C:], u)
		}
		q, k := cv[:Kd], cv[Kd:2*Kd]
		for h := range Nk {
			qh := q[h*dk : (h+1)*dk]
			l2Normalize(qh, 1e-6)
			for i := range qh {
				qh[i] *= qScale
			}
			l2Normalize(k[h*dk:(h+1)*dk], 1e-6)
		}
	}

	// The gated delta recurrence: value heads are independent, so they run
	// in parallel, each over the whole chunk in token order.
	S := st.rec[l]
	Y := make([]float32, T*Vd)
	ratio := Nv / Nk
	parallelFor(Nv, T*dk*dv, func(h0, h1 int) {
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
				beta := sigmoid(bb[t*Nv+h])
				decay := expf(d.negA[h] * softplus(aa[t*Nv+h]+d.dtBias[h]))
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
				rmsNorm(o, o, d.norm, m.eps)
				zh := z[t*Vd+h*dv : t*Vd+(h+1)*dv]
				for j := range o {
					o[j] *= silu(zh[j])
				}
			}
		}
	})
	be.MatMul(d.out, out, Y, T)
}

// moe is the sparse MoE block over a chunk of T tokens: routing for every
// token first, then each selected expert runs once over the tokens that
// chose it, then each token sums its experts in its own top-k order (so the
// result does not depend on how tokens were grouped).
func (m *Model) moe(l int, b *moeBlock, xn, out []float32, T int) error {
	c := m.Config
	be := m.Backend
	E, k, H, I := c.Experts, c.TopK, c.Hidden, c.MoEIntermediate
	R := make([]float32, T*E)
	be.MatMul(b.router, R, xn, T)
	sel := make([]int, T*k)
	wts := make([]float32, T*k)
	for t := range T {
		p := R[t*E : (t+1)*E]
		softmax(p)
		idx := sel[t*k : (t+1)*k]
		topK(idx, p)
		var sum float32
		for j, e := range idx {
			wts[t*k+j] = p[e]
			sum += p[e]
		}
		if c.NormTopK {
			for j := range idx {
				wts[t*k+j] /= sum
			}
		}
	}
	// Group the (token, slot) pairs by expert, experts ascending.
	count := make([]int, E+1)
	for _, e := range sel {
		count[e+1]++
	}
	for e := range E {
		count[e+1] += count[e]
	}
	slots := make([]int, T*k)
	fill := append([]int(nil), count[:E]...)
	for s, e := range sel {
		slots[fill[e]] = s
		fill[e]++
	}
	used := make([]int, 0, min(E, T*k))
	for e := range E {
		if count[e+1] > count[e] {
			used = append(used, e)
		}
	}
	// A source that can read ahead (an ExpertPrefetcher) learns the chunk's
	// experts now, ascending, and reads them while the shared expert
	// computes; Expert is then called for each in the same order.
	if p, ok := m.Experts.(prefetcher); ok {
		p.Prefetch(l, used)
	}
	var sh, sg []float32
	if b.shared != nil {
		sh = make([]float32, T*H)
		m.mlp(b.shared, xn, sh, T, c.SharedIntermediate)
		sg = make([]float32, T)
		be.MatMul(b.sharedGate, sg, xn, T)
	}
	res := make([]float32, T*k*H)
	var xe, g, u, a, y []float32
	for _, e := range used {
		group := slots[count[e]:count[e+1]]
		n := len(group)
		w, err := m.Experts.Expert(l, e)
		if err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
		xe = grow(xe, n*H)
		for i, s := range group {
			t := s / k
			copy(xe[i*H:(i+1)*H], xn[t*H:(t+1)*H])
		}
		g, u, a, y = grow(g, n*I), grow(u, n*I), grow(a, n*I), grow(y, n*H)
		be.MatMul(w.Gate, g, xe, n)
		be.MatMul(w.Up, u, xe, n)
		be.SwiGLU(a, g, u)
		be.MatMul(w.Down, y, a, n)
		m.Experts.Release(w)
		for i, s := range group {
			copy(res[s*H:(s+1)*H], y[i*H:(i+1)*H])
		}
	}
	// Each token: its routed experts in its own top-k order, then the
	// gated shared expert.
	clear(out[:T*H])
	for t := range T {
		o := out[t*H : (t+1)*H]
		for j := range k {
			s := t*k + j
			axpy(o, wts[s], res[s*H:(s+1)*H])
		}
		if sh != nil {
			axpy(o, sigmoid(sg[t]), sh[t*H:(t+1)*H])
		}
	}
	return nil
}

// speculator is the method set of an ExpertSpeculator.
type speculator interface {
	Speculate(layer int, experts []int)
}

// speculation is the state of ForwardOptions.Speculate in one pass.
type speculation struct {
	src   speculator
	n     int // experts guessed per token
	xn, r []float32
	idx   []int
	seen  []bool
	guess []int
}

// speculate guesses layer l's experts from x, the residual stream entering
// the layer [T, Hidden], and hands the guess to the source: the router on
// post_attention_layernorm(x) (the router proper sees that norm of x plus
// the mixer's output; on the synthetic models this guesses a little better
// than the input_layernorm the mixer sees), each token's top n by logit,
// taken rank by rank across the chunk's tokens so that the likeliest come
// first, each expert once. It reads x and writes only its own buffers.
func (m *Model) speculate(sp *speculation, l int, ly *layer, x []float32, T int) {
	b := ly.moe
	sp.xn = grow(sp.xn, T*m.Config.Hidden)
	m.Backend.RMSNorm(sp.xn, x, ly.postNorm, m.eps)
	E, n := m.Config.Experts, sp.n
	sp.r = grow(sp.r, T*E)
	m.Backend.MatMul(b.router, sp.r, sp.xn, T)
	if cap(sp.idx) < T*n {
		sp.idx = make([]int, T*n)
	}
	idx := sp.idx[:T*n]
	for t := range T {
		topK(idx[t*n:(t+1)*n], sp.r[t*E:(t+1)*E])
	}
	if len(sp.seen) < E {
		sp.seen = make([]bool, E)
	}
	clear(sp.seen)
	sp.guess = sp.guess[:0]
	for j := range n {
		for t := range T {
			if e := idx[t*n+j]; !sp.seen[e] {
				sp.seen[e] = true
				sp.guess = append(sp.guess, e)
			}
		}
	}
	sp.src.Speculate(l, sp.guess)
}

// prefetcher is the method set of an ExpertPrefetcher.
type prefetcher interface {
	Prefetch(layer int, experts []int)
}

// mlp is a dense SwiGLU MLP (the shared expert, or a layer without experts).
func (m *Model) mlp(d *denseMLP, xn, out []float32, T, inter int) {
	be := m.Backend
	g := make([]float32, T*inter)
	u := make([]float32, T*inter)
	be.MatMul(d.gate, g, xn, T)
	be.MatMul(d.up, u, xn, T)
	be.SwiGLU(g, g, u)
	be.MatMul(d.down, out, g, T)
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}
