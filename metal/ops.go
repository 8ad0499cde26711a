package metal

import (
	"fmt"
	"math"

	"github.com/qpack-go/qpack/runtime"
)

// Ops is the decode path beyond runtime.Backend, as the Metal kernels
// implement it: the parts of a layer that the runtime's graph now computes
// on the CPU (per-head norms, RoPE, attention over the cache, the Gated
// DeltaNet conv and recurrence, the gates, residual adds). A graph that
// finds its backend implements Ops can keep a whole layer on the GPU.
// *Backend implements it.
//
// All arrays are row-major float32. Unlike the runtime.Backend methods,
// these report bad shapes and device failures as errors (nothing is
// computed then). Outputs may alias inputs where a method says so.
type Ops interface {
	runtime.Backend

	// RMSNormRows normalizes rows rows of dim values: row r of x starts at
	// r·xStride, of y at r·yStride (strides ≥ dim; e.g. the per-head q norm
	// inside q_proj's output, where heads are 2·head_dim apart). y may be x.
	RMSNormRows(y, x, w []float32, rows, dim, xStride, yStride int, eps float32) error
	// GatedRMSNorm writes rmsnorm(x)·w·silu(z) for each row of len(w)
	// values (the Gated DeltaNet output norm). y may be x.
	GatedRMSNorm(y, x, z, w []float32, eps float32) error
	// L2NormRows writes x/sqrt(Σx²+eps)·scale for each row of dim values
	// (the Gated DeltaNet q and k). y may be x.
	L2NormRows(y, x []float32, dim int, eps, scale float32) error
	// RoPE rotates, in place, the first 2·len(cos)/tokens dims of each of
	// heads heads of each token (NeoX half rotation): head h of token t
	// starts at t·rowStride + h·headStride; cos and sin are [tokens][half]
	// (see RopeTable).
	RoPE(x []float32, tokens, heads, rowStride, headStride int, cos, sin []float32) error
	// Attention is causal attention of d.Tokens queries over d.Keys cached
	// keys with grouped KV heads: q [Tokens][Heads·QHeadStride], k and v
	// [Keys][KVHeads·HeadDim], o [Tokens][Heads·HeadDim]. Softmax in
	// float32.
	Attention(o, q, k, v []float32, d AttentionDims) error
	// SigmoidMul writes x·sigmoid(g) over rows rows of dim values with the
	// given strides (the attention output gate). y may be x.
	SigmoidMul(y, x, g []float32, rows, dim, xStride, gStride, yStride int) error
	// GDNGates writes beta = sigmoid(b) and g = negA·softplus(a + dtBias)
	// for [tokens][len(negA)] values of b and a.
	GDNGates(beta, g, b, a, negA, dtBias []float32) error
	// GatedDeltaStep runs the gated delta rule for d.Tokens tokens in
	// order, updating the state S [ValueHeads][KeyDim][ValueDim]: per value
	// head h (key head h/(ValueHeads/KeyHeads)) S = exp(g)·S; m = Sᵀk;
	// δ = β(v − m); S += k⊗δ; o = Sᵀq. q, k [Tokens][KeyHeads·KeyDim]
	// (normalized, q scaled); v, o [Tokens][ValueHeads·ValueDim]; beta, g
	// [Tokens][ValueHeads].
	GatedDeltaStep(S, o, q, k, v, beta, g []float32, d DeltaDims) error
	// ConvStep runs the depthwise causal conv1d with state for
	// len(u)/channels tokens, then SiLU: out[t][c] = silu(Σ_j w[c][j]·u'[j])
	// over the window of the last kernel inputs; window [kernel-1][channels]
	// holds the previous inputs, oldest first, and is updated.
	ConvStep(out, window, u, w []float32, channels, kernel int) error
	// Add writes a + b (the residual add). y may be a or b.
	Add(y, a, b []float32) error
	// ScaleAdd does y += alpha·x.
	ScaleAdd(y, x []float32, alpha float32) error
	// SigmoidScaleAdd does y[r] += sigmoid(s[r])·x[r] for the len(s) rows
	// of len(x)/len(s) values (the shared-expert gate).
	SigmoidScaleAdd(y, x, s []float32) error
}

// AttentionDims describes an Attention call.
type AttentionDims struct {
	Tokens, Heads, KVHeads, HeadDim int
	// Keys is the number of keys in k and v, the queries' own included:
	// query t sees the first Keys-(Tokens-1-t).
	Keys int
	// QHeadStride is the distance between heads in q: HeadDim, or
	// 2·HeadDim when q_proj interleaves the output gate.
	QHeadStride int
	Scale       float32 // usually HeadDim^-1/2
}

// DeltaDims describes a GatedDeltaStep call.
type DeltaDims struct {
	Tokens, ValueHeads, KeyHeads, KeyDim, ValueDim int
}

// RopeTable returns the cosines and sines [tokens][rotary/2] of positions
// pos0, pos0+1, ... for a rotary embedding over rotary dims with base
// theta, computed as transformers does (inverse frequencies and angles in
// float32, the trigonometry in float64).
func RopeTable(pos0, tokens, rotary int, theta float64) (cos, sin []float32) {
	half := rotary / 2
	inv := make([]float32, half)
	for i := range inv {
		inv[i] = float32(1 / math.Pow(theta, float64(float32(2*i)/float32(rotary))))
	}
	cos = make([]float32, tokens*half)
	sin = make([]float32, tokens*half)
	for t := range tokens {
		p := float32(pos0 + t)
		for i, f := range inv {
			ang := float64(p * f)
			cos[t*half+i] = float32(math.Cos(ang))
			sin[t*half+i] = float32(math.Sin(ang))
		}
	}
	return cos, sin
}

const maxDim = 1<<31 - 1

// dims checks that every named value is in [1, 2^31).
func dims(op string, kv ...any) error {
	for i := 0; i+1 < len(kv); i += 2 {
		v := kv[i+1].(int)
		if v < 1 || v > maxDim {
			return fmt.Errorf("metal: %s: %s = %d out of range", op, kv[i], v)
		}
	}
	return nil
}

// extent checks that a (strided) array holds what the op reads or writes.
func extent(op, name string, got, want int) error {
	if got < want {
		return fmt.Errorf("metal: %s: %s has %d values, need %d", op, name, got, want)
	}
	return nil
}

// strided is the number of values rows rows of dim values stride apart span.
func strided(rows, dim, stride int) int { return (rows-1)*stride + dim }

func (b *Backend) locked(f func() error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return f()
}

// RMSNormRows implements Ops.
func (b *Backend) RMSNormRows(y, x, w []float32, rows, dim, xStride, yStride int, eps float32) error {
	const op = "RMSNormRows"
	if err := dims(op, "rows", rows, "dim", dim, "xStride", xStride, "yStride", yStride); err != nil {
		return err
	}
	if xStride < dim || yStride < dim {
		return fmt.Errorf("metal: %s: strides %d, %d below dim %d", op, xStride, yStride, dim)
	}
	nx, ny := strided(rows, dim, xStride), strided(rows, dim, yStride)
	if err := firstErr(extent(op, "w", len(w), dim), extent(op, "x", len(x), nx), extent(op, "y", len(y), ny)); err != nil {
		return err
	}
	return b.locked(func() error {
		return b.rowNorm("rms_norm", y[:ny], x[:nx], nil, w[:dim], rows, dim, xStride, yStride, 0, eps, 1)
	})
}

// GatedRMSNorm implements Ops.
func (b *Backend) GatedRMSNorm(y, x, z, w []float32, eps float32) error {
	const op = "GatedRMSNorm"
	dim := len(w)
	if dim == 0 || len(x)%dim != 0 || len(x) == 0 {
		return fmt.Errorf("metal: %s: %d values is not whole rows of %d", op, len(x), dim)
	}
	rows := len(x) / dim
	if err := firstErr(dims(op, "rows", rows, "dim", dim), extent(op, "z", len(z), len(x)), extent(op, "y", len(y), len(x))); err != nil {
		return err
	}
	return b.locked(func() error {
		return b.rowNorm("gated_rms_norm", y[:len(x)], x, z[:len(x)], w, rows, dim, dim, dim, dim, eps, 1)
	})
}

// L2NormRows implements Ops.
func (b *Backend) L2NormRows(y, x []float32, dim int, eps, scale float32) error {
	const op = "L2NormRows"
	if dim < 1 || len(x) == 0 || len(x)%dim != 0 {
		return fmt.Errorf("metal: %s: %d values is not whole rows of %d", op, len(x), dim)
	}
	rows := len(x) / dim
	if err := firstErr(dims(op, "rows", rows, "dim", dim), extent(op, "y", len(y), len(x))); err != nil {
		return err
	}
	return b.locked(func() error {
		return b.rowNorm("l2_norm", y[:len(x)], x, nil, nil, rows, dim, dim, dim, 0, eps, scale)
	})
}

// RoPE implements Ops.
func (b *Backend) RoPE(x []float32, tokens, heads, rowStride, headStride int, cos, sin []float32) error {
	const op = "RoPE"
	if err := dims(op, "tokens", tokens, "heads", heads, "rowStride", rowStride, "headStride", headStride); err != nil {
		return err
	}
	if len(cos) == 0 || len(cos)%tokens != 0 || len(sin) != len(cos) {
		return fmt.Errorf("metal: %s: cos/sin have %d/%d values for %d tokens", op, len(cos), len(sin), tokens)
	}
	half := len(cos) / tokens
	if 2*half > headStride {
		return fmt.Errorf("metal: %s: %d rotary dims exceed the head stride %d", op, 2*half, headStride)
	}
	n := (tokens-1)*rowStride + (heads-1)*headStride + 2*half
	if err := extent(op, "x", len(x), n); err != nil {
		return err
	}
	return b.locked(func() error {
		p := b.params("rope_neox").u32("tokens", tokens).u32("heads", heads).u32("row_stride", rowStride).
			u32("head_stride", headStride).u32("half_dim", half)
		return b.exec("rope_neox", [3]int{ceilDiv(half, elemThreads), heads, tokens}, [3]int{elemThreads, 1, 1}, p,
			outF("x_off", x[:n]), inF("cos_off", cos), inF("sin_off", sin))
	})
}

// Attention implements Ops.
func (b *Backend) Attention(o, q, k, v []float32, d AttentionDims) error {
	const op = "Attention"
	if err := dims(op, "Tokens", d.Tokens, "Heads", d.Heads, "KVHeads", d.KVHeads, "HeadDim", d.HeadDim,
		"Keys", d.Keys, "QHeadStride", d.QHeadStride); err != nil {
		return err
	}
	switch {
	case d.Heads%d.KVHeads != 0:
		return fmt.Errorf("metal: %s: %d heads is not a multiple of %d KV heads", op, d.Heads, d.KVHeads)
	case d.HeadDim > maxHeadDim:
		return fmt.Errorf("metal: %s: head dim %d above %d", op, d.HeadDim, maxHeadDim)
	case d.QHeadStride < d.HeadDim:
		return fmt.Errorf("metal: %s: q head stride %d below head dim %d", op, d.QHeadStride, d.HeadDim)
	case d.Keys < d.Tokens:
		return fmt.Errorf("metal: %s: %d keys for %d queries", op, d.Keys, d.Tokens)
	}
	qTok, kvStride, oTok := d.Heads*d.QHeadStride, d.KVHeads*d.HeadDim, d.Heads*d.HeadDim
	nq, nkv, no := d.Tokens*qTok, d.Keys*kvStride, d.Tokens*oTok
	scr := int64(d.Tokens) * int64(d.Heads) * int64(d.Keys) * 4
	if scr > 1<<34 {
		return fmt.Errorf("metal: %s: %d bytes of scores", op, scr)
	}
	if err := firstErr(extent(op, "q", len(q), nq), extent(op, "k", len(k), nkv), extent(op, "v", len(v), nkv),
		extent(op, "o", len(o), no)); err != nil {
		return err
	}
	return b.locked(func() error {
		p := b.params("attn_decode").u32("tokens", d.Tokens).u32("heads", d.Heads).u32("kv_heads", d.KVHeads).
			u32("head_dim", d.HeadDim).u32("keys", d.Keys).u32("q_stride", d.QHeadStride).u32("q_tok_stride", qTok).
			u32("kv_stride", kvStride).u32("o_tok_stride", oTok).f32("scale", d.Scale)
		oa := outF("o_off", o[:no])
		oa.private = overlaps(oa.data, f32bytes(q[:nq])) || overlaps(oa.data, f32bytes(k[:nkv])) || overlaps(oa.data, f32bytes(v[:nkv]))
		return b.exec("attn_decode", [3]int{d.Heads, d.Tokens, 1}, [3]int{tgThreads, 1, 1}, p,
			inF("q_off", q[:nq]), inF("k_off", k[:nkv]), inF("v_off", v[:nkv]), oa, scratch("s_off", int(scr)))
	})
}

// SigmoidMul implements Ops.
func (b *Backend) SigmoidMul(y, x, g []float32, rows, dim, xStride, gStride, yStride int) error {
	const op = "SigmoidMul"
	if err := dims(op, "rows", rows, "dim", dim, "xStride", xStride, "gStride", gStride, "yStride", yStride); err != nil {
		return err
	}
	if xStride < dim || gStride < dim || yStride < dim {
		return fmt.Errorf("metal: %s: a stride is below dim %d", op, dim)
	}
	nx, ng, ny := strided(rows, dim, xStride), strided(rows, dim, gStride), strided(rows, dim, yStride)
	if err := firstErr(extent(op, "x", len(x), nx), extent(op, "g", len(g), ng), extent(op, "y", len(y), ny)); err != nil {
		return err
	}
	return b.locked(func() error {
		return b.elementwise("sigmoid_mul_rows", y[:ny], x[:nx], g[:ng], rows, dim, yStride, xStride, gStride, 0, 0)
	})
}

// GDNGates implements Ops.
func (b *Backend) GDNGates(beta, g, bb, a, negA, dtBias []float32) error {
	const op = "GDNGates"
	n := len(negA)
	if n == 0 || len(bb) == 0 || len(bb)%n != 0 {
		return fmt.Errorf("metal: %s: %d values of b is not whole rows of %d heads", op, len(bb), n)
	}
	tokens := len(bb) / n
	if err := firstErr(dims(op, "tokens", tokens, "heads", n), extent(op, "a", len(a), len(bb)), extent(op, "dtBias", len(dtBias), n),
		extent(op, "beta", len(beta), len(bb)), extent(op, "g", len(g), len(bb))); err != nil {
		return err
	}
	nb := len(bb)
	return b.locked(func() error {
		p := b.params("gdn_gates").u32("n", n).u32("tokens", tokens)
		return b.exec("gdn_gates", [3]int{ceilDiv(n, elemThreads), tokens, 1}, [3]int{elemThreads, 1, 1}, p,
			inF("b_off", bb), inF("a_off", a[:nb]), inF("nega_off", negA), inF("dtb_off", dtBias[:n]),
			outF("beta_off", beta[:nb]), outF("g_off", g[:nb]))
	})
}

// GatedDeltaStep implements Ops.
func (b *Backend) GatedDeltaStep(S, o, q, k, v, beta, g []float32, d DeltaDims) error {
	const op = "GatedDeltaStep"
	if err := dims(op, "Tokens", d.Tokens, "ValueHeads", d.ValueHeads, "KeyHeads", d.KeyHeads,
		"KeyDim", d.KeyDim, "ValueDim", d.ValueDim); err != nil {
		return err
	}
	if d.ValueHeads%d.KeyHeads != 0 {
		return fmt.Errorf("metal: %s: %d value heads is not a multiple of %d key heads", op, d.ValueHeads, d.KeyHeads)
	}
	ns := d.ValueHeads * d.KeyDim * d.ValueDim
	nqk := d.Tokens * d.KeyHeads * d.KeyDim
	nv := d.Tokens * d.ValueHeads * d.ValueDim
	ng := d.Tokens * d.ValueHeads
	if err := firstErr(extent(op, "S", len(S), ns), extent(op, "q", len(q), nqk), extent(op, "k", len(k), nqk),
		extent(op, "v", len(v), nv), extent(op, "o", len(o), nv), extent(op, "beta", len(beta), ng),
		extent(op, "g", len(g), ng)); err != nil {
		return err
	}
	return b.locked(func() error {
		p := b.params("gated_delta_step").u32("nv", d.ValueHeads).u32("nk", d.KeyHeads).u32("dk", d.KeyDim).
			u32("dv", d.ValueDim).u32("tokens", d.Tokens)
		sa := outF("s_off", S[:ns])
		oa := outF("o_off", o[:nv])
		oa.private = overlaps(oa.data, sa.data) || overlaps(oa.data, f32bytes(v[:nv]))
		return b.exec("gated_delta_step", [3]int{ceilDiv(d.ValueDim, elemThreads), d.ValueHeads, 1}, [3]int{elemThreads, 1, 1}, p,
			sa, inF("q_off", q[:nqk]), inF("k_off", k[:nqk]), inF("v_off", v[:nv]),
			inF("beta_off", beta[:ng]), inF("g_off", g[:ng]), oa)
	})
}

// ConvStep implements Ops.
func (b *Backend) ConvStep(out, window, u, w []float32, channels, kernel int) error {
	const op = "ConvStep"
	if err := dims(op, "channels", channels, "kernel", kernel); err != nil {
		return err
	}
	if len(u) == 0 || len(u)%channels != 0 {
		return fmt.Errorf("metal: %s: %d inputs is not whole rows of %d channels", op, len(u), channels)
	}
	tokens := len(u) / channels
	nw := (kernel - 1) * channels
	if err := firstErr(dims(op, "tokens", tokens), extent(op, "window", len(window), nw), extent(op, "w", len(w), channels*kernel),
		extent(op, "out", len(out), len(u))); err != nil {
		return err
	}
	return b.locked(func() error {
		p := b.params("conv1d_step").u32("channels", channels).u32("kernel_size", kernel).u32("tokens", tokens)
		oa := outF("out_off", out[:len(u)])
		wa := outF("win_off", window[:nw])
		oa.private = overlaps(oa.data, f32bytes(u)) || overlaps(oa.data, wa.data)
		return b.exec("conv1d_step", [3]int{ceilDiv(channels, elemThreads), 1, 1}, [3]int{elemThreads, 1, 1}, p,
			inF("u_off", u), wa, inF("w_off", w[:channels*kernel]), oa)
	})
}

// Add implements Ops.
func (b *Backend) Add(y, a, bb []float32) error {
	n := len(a)
	if n == 0 || len(bb) < n || len(y) < n {
		return fmt.Errorf("metal: Add: len(y)=%d len(a)=%d len(b)=%d", len(y), n, len(bb))
	}
	return b.locked(func() error { return b.elementwise("residual_add", y[:n], a, bb[:n], 1, n, n, n, n, 0, 0) })
}

// ScaleAdd implements Ops.
func (b *Backend) ScaleAdd(y, x []float32, alpha float32) error {
	n := len(x)
	if n == 0 || len(y) < n {
		return fmt.Errorf("metal: ScaleAdd: len(y)=%d len(x)=%d", len(y), n)
	}
	return b.locked(func() error { return b.elementwise("scale_add", y[:n], x, nil, 1, n, n, n, 1, 0, alpha) })
}

// SigmoidScaleAdd implements Ops.
func (b *Backend) SigmoidScaleAdd(y, x, s []float32) error {
	const op = "SigmoidScaleAdd"
	rows := len(s)
	if rows == 0 || len(x) == 0 || len(x)%rows != 0 || len(y) < len(x) {
		return fmt.Errorf("metal: %s: len(y)=%d len(x)=%d for %d rows", op, len(y), len(x), rows)
	}
	n := len(x) / rows
	return b.locked(func() error { return b.elementwise("scale_add", y[:len(x)], x, s, rows, n, n, n, 1, 1, 0) })
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
