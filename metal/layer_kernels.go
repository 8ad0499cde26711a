package metal

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/runtime/nn"
)

// Encoders of the shared kernel bodies (internal/gpukernels) for the layer
// device: each takes tensors of the Device, checks what the kernel needs,
// writes the parameter block by field name (the layout parsed from the
// source) and encodes the kernel. Each returns false, encoding nothing,
// when the call is outside the kernel's limits; the op then runs on the
// CPU. The caller holds d.mu.

// attnBusyGroups is the number of attention groups below which a long
// context is split over several groups per head (gpukernels.AttnSplits):
// Apple GPUs have 8 to 80 cores.
const attnBusyGroups = 64

// Limits of the bodies (their QK_* constants; TestSharedLimits checks them
// against the source).
const (
	qkAttnMaxD  = 512  // QK_ATTN_MAXD
	qkConvMaxK  = 16   // QK_CONV_MAXK
	qkDNMaxD    = 256  // QK_DN_MAXD
	qkRouteMaxE = 4096 // QK_ROUTE_MAXE
	qkRouteMaxK = 64   // QK_ROUTE_MAXK
)

var errRouteNaN = errorString("metal: route_topk: router logits with a NaN (no expert selected)")

type errorString string

func (e errorString) Error() string { return string(e) }

// fits reports whether every extent is in [0, 2^31).
func fits(vals ...int64) bool {
	for _, v := range vals {
		if v < 0 || v >= 1<<31 {
			return false
		}
	}
	return true
}

func span64(rows, stride, width int) int64 {
	if rows <= 0 || width <= 0 {
		return 0
	}
	return int64(rows-1)*int64(stride) + int64(width)
}

// null is an unused pointer field.
func null(field string) ptrArg { return ptrArg{field: field} }

// ints copies v into pass memory as int32 (a device index vector).
func (d *Device) ints(v []int) (nn.Tensor, bool) {
	c, off, err := d.take(4 * max(len(v), 1))
	if err != nil {
		d.fail(err)
		return nn.Tensor{}, false
	}
	t := nn.Tensor{Buf: c, Off: off / 4, N: max(len(v), 1)}
	iv := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(host(t)))), t.N)
	for i, x := range v {
		iv[i] = int32(x)
	}
	return t, true
}

// floats copies v into pass memory.
func (d *Device) floats(v []float32) (nn.Tensor, bool) {
	c, off, err := d.take(4 * max(len(v), 1))
	if err != nil {
		d.fail(err)
		return nn.Tensor{}, false
	}
	t := nn.Tensor{Buf: c, Off: off / 4, N: max(len(v), 1)}
	copy(host(t), v)
	return t, true
}

// normWeight is the w field of a norm kernel's launch: none for NormUnit.
func normWeight(op string, w nn.Tensor, s nn.NormSpec) ptrArg {
	if s.Kind == nn.NormUnit {
		return null("w")
	}
	need(op+" w", w, s.Width)
	return ptrIn("w", w)
}

// kNorm encodes rms_norm_rows (every NormKind; y may be x).
func (d *Device) kNorm(y, x, w nn.Tensor, s nn.NormSpec, xs, ys int) bool {
	if !d.has("rms_norm_rows") || !fits(int64(s.Rows), int64(xs), int64(ys), span64(s.Rows, xs, s.Width), span64(s.Rows, ys, s.Width)) ||
		s.Kind < nn.NormWeight || s.Kind > nn.NormUnit {
		return false
	}
	wp := normWeight("RMSNorm", w, s)
	p := d.b.params("rms_norm_rows").u32("rows", s.Rows).u32("width", s.Width).u32("xstride", xs).
		u32("ystride", ys).f32("eps", s.Eps).u32("kind", int(s.Kind))
	d.entry("rms_norm_rows", s.Rows, 1, p, ptrIn("x", x), wp, ptrOut("y", y))
	return true
}

// kAddNorm encodes add_rms_norm_rows: x += r over s.Rows contiguous rows,
// then y (rows at ys) = the norm of the sum (every NormKind; y overlaps
// neither x nor r).
func (d *Device) kAddNorm(x, r, y, w nn.Tensor, s nn.NormSpec, ys int) bool {
	if !d.has("add_rms_norm_rows") || !fits(int64(s.Rows), int64(ys), int64(s.Rows)*int64(s.Width), span64(s.Rows, ys, s.Width)) ||
		s.Kind < nn.NormWeight || s.Kind > nn.NormUnit {
		return false
	}
	wp := normWeight("AddRMSNorm", w, s)
	p := d.b.params("add_rms_norm_rows").u32("rows", s.Rows).u32("width", s.Width).u32("ystride", ys).
		f32("eps", s.Eps).u32("kind", int(s.Kind))
	d.entry("add_rms_norm_rows", s.Rows, 1, p, ptrOut("x", x), ptrIn("res", r), wp, ptrOut("y", y))
	return true
}

// ropeFreqs returns r's inverse frequencies on the device, copied once per
// RoPE (the graphs keep theirs for their lifetime).
func (d *Device) ropeFreqs(r *nn.RoPE) (nn.Tensor, bool) {
	if d.freqs == nil {
		d.freqs = map[*nn.RoPE]nn.Tensor{}
	}
	if t, ok := d.freqs[r]; ok && t.N == len(r.InvFreq) {
		return t, true
	}
	m, err := d.alloc(len(r.InvFreq))
	if err != nil {
		d.fail(err)
		return nn.Tensor{}, false
	}
	copy(m.f, r.InvFreq)
	t := nn.Tensor{Buf: m, N: len(r.InvFreq)}
	d.freqs[r] = t
	return t, true
}

// kRoPE encodes rope.
func (d *Device) kRoPE(x nn.Tensor, r *nn.RoPE, s nn.RoPESpec) bool {
	pairs := len(r.InvFreq)
	if pairs == 0 {
		return true
	}
	if !d.has("rope") {
		return false
	}
	hd := 2 * pairs
	if !r.Interleaved {
		hd = r.Half + pairs
		if r.Half < pairs {
			return false
		}
	}
	if s.PerPos < 1 || s.Stride < 1 || s.Pos0 < 0 {
		return false
	}
	last := int64(s.Pos0) + int64((s.Rows-1)/s.PerPos)
	if !fits(int64(s.Rows), int64(s.Stride), int64(r.Half), int64(s.Rows)*int64(pairs), span64(s.Rows, s.Stride, hd)) || last >= 1<<24 {
		return false
	}
	need("RoPE x", x, int(span64(s.Rows, s.Stride, hd)))
	f, ok := d.ropeFreqs(r)
	if !ok {
		return true // failed: the error is kept
	}
	inter := 0
	if r.Interleaved {
		inter = 1
	}
	p := d.b.params("rope").u32("rows", s.Rows).u32("pairs", pairs).u32("half_", r.Half).u32("stride", s.Stride).
		u32("perpos", s.PerPos).u32("pos0", s.Pos0).u32("interleaved", inter)
	d.entry("rope", ceilDiv(s.Rows*pairs, tgThreads), 1, p, ptrOut("x", x), ptrIn("invfreq", f))
	return true
}

// kAttention encodes attention over the cache (positions < pos) and the
// chunk, then the copies of the chunk's keys and values into the cache.
func (d *Device) kAttention(c *kvState, O, Q, K, V nn.Tensor, T int, dm nn.AttnDims) bool {
	vd := dm.VDim
	if vd == 0 {
		vd = dm.HeadDim
	}
	pos, W := c.n, c.window
	if !d.has("attention") || !d.has("copy_f32") || dm.Heads < 1 || dm.KVHeads < 1 || dm.Heads%dm.KVHeads != 0 || dm.HeadDim < 1 || dm.HeadDim > qkAttnMaxD ||
		vd > qkAttnMaxD || dm.QStride < dm.HeadDim || dm.KVHeads*dm.HeadDim > c.kW || dm.KVHeads*vd > c.vW {
		return false
	}
	cacheRows := pos
	if W > 0 {
		cacheRows = min(pos, W)
	}
	if !fits(int64(pos)+int64(T), int64(T)*int64(dm.Heads)*int64(dm.QStride), int64(T)*int64(dm.Heads)*int64(vd),
		int64(T)*int64(c.kW), int64(T)*int64(c.vW), int64(pos+T)*int64(c.kW), int64(pos+T)*int64(c.vW),
		int64(cacheRows)*int64(c.kW)) {
		return false
	}
	if W == 0 && pos+T > c.rows {
		// Growing copies the rows on the CPU: wait for the work using them.
		if !d.sync() {
			return true
		}
		if err := c.grow(pos + T); err != nil {
			d.fail(err)
			return true
		}
	}
	// A long context with few groups: the keys in runs, merged after
	// (gpukernels.AttnSplits).
	// A few tokens (decode) whose heads attention_gqa takes: a group per
	// token, KV head and run, its query heads scored together
	// (gpukernels/32_attention_gqa.qk).
	maxKeys := gpukernels.AttnKeys(pos, T, W)
	kernel, groups := "attention", T*dm.Heads
	if gpukernels.AttnGQA(T, dm.Heads, dm.KVHeads, dm.HeadDim, vd) && d.has("attention_gqa") {
		kernel, groups = "attention_gqa", T*dm.KVHeads
	}
	nsplit := 1
	if d.has("attention_merge") {
		if kernel == "attention_gqa" {
			nsplit = gpukernels.AttnGQASplits(T, dm.KVHeads, maxKeys, attnBusyGroups)
		} else {
			nsplit = gpukernels.AttnSplits(T, dm.Heads, maxKeys, attnBusyGroups)
		}
	}
	p := d.b.params("attention").u32("T", T).u32("heads", dm.Heads).u32("kvheads", dm.KVHeads).u32("hd", dm.HeadDim).
		u32("vd", vd).u32("qstride", dm.QStride).u32("kwidth", c.kW).u32("vwidth", c.vW).u32("pos", pos).
		u32("window", W).f32("scale", dm.Scale)
	if nsplit == 1 && gpukernels.AttnTiled(T, dm.HeadDim, vd) && d.has("attention_tile") {
		// A chunk: each block of keys and values shared by 16 query rows
		// of a KV head (gpukernels/31_attention_tile.qk).
		d.entry("attention_tile", gpukernels.AttnTileGroups(T, dm.Heads, dm.KVHeads), 1, p, ptrOut("o", O), ptrIn("q", Q), ptrIn("k", K), ptrIn("v", V),
			ptrIn("kc", c.k), ptrIn("vc", c.v), null("part"))
	} else if nsplit == 1 {
		d.entry(kernel, groups, 1, p, ptrOut("o", O), ptrIn("q", Q), ptrIn("k", K), ptrIn("v", V),
			ptrIn("kc", c.k), ptrIn("vc", c.v), null("part"))
	} else {
		n := T * dm.Heads * nsplit * (vd + 2)
		buf, off, err := d.take(4 * n)
		if err != nil {
			d.fail(err)
			return true
		}
		part := nn.Tensor{Buf: buf, Off: off / 4, N: n}
		p.u32("nsplit", nsplit).u32("keys", ceilDiv(maxKeys, nsplit))
		d.entry(kernel, groups*nsplit, 1, p, ptrOut("o", O), ptrIn("q", Q), ptrIn("k", K), ptrIn("v", V),
			ptrIn("kc", c.k), ptrIn("vc", c.v), ptrOut("part", part))
		pm := d.b.params("attention_merge").u32("rows", T*dm.Heads).u32("vd", vd).u32("nsplit", nsplit)
		d.entry("attention_merge", T*dm.Heads, 1, pm, ptrOut("o", O), ptrIn("part", part))
	}
	// The chunk's rows into the cache, after the kernel read it.
	store := func(slot, from, n int) {
		d.copyKernel(c.k.Slice(slot*c.kW, (slot+n)*c.kW), K.Slice(from*c.kW, (from+n)*c.kW))
		d.copyKernel(c.v.Slice(slot*c.vW, (slot+n)*c.vW), V.Slice(from*c.vW, (from+n)*c.vW))
	}
	if W == 0 {
		store(pos, 0, T)
	} else {
		i0 := max(0, T-W)
		m := T - i0
		s0 := (pos + i0) % W
		first := min(m, W-s0)
		store(s0, i0, first)
		if m > first {
			store(0, i0+first, m-first)
		}
	}
	c.n += T
	return true
}

// kDeltaNet encodes deltanet_conv, deltanet_qknorm and deltanet_rec.
func (d *Device) kDeltaNet(st *tensorState, a *nn.DeltaNetArgs) bool {
	if !d.has("deltanet_conv") || !d.has("deltanet_qknorm") || !d.has("deltanet_rec") || a.Nk < 1 || a.Nv < 1 || a.Nv%a.Nk != 0 || a.Dk < 1 || a.Dk > qkDNMaxD || a.Dv < 1 || a.Dv > qkDNMaxD ||
		a.K < 1 || a.K > qkConvMaxK {
		return false
	}
	C := a.ConvDim()
	if !fits(int64(C), int64(a.T)*int64(C), int64(C)*int64(a.K), int64(a.Nv)*int64(a.Dk)*int64(a.Dv),
		int64(a.T)*int64(a.Nv)*int64(a.Dv), int64(a.T)*2*int64(a.Nk)) {
		return false
	}
	need("DeltaNet window", st.t[0], (a.K-1)*C)
	need("DeltaNet state", st.t[1], a.Nv*a.Dk*a.Dv)
	need("DeltaNet Mixed", a.Mixed, a.T*C)
	need("DeltaNet Z", a.Z, a.T*a.Nv*a.Dv)
	need("DeltaNet Y", a.Y, a.T*a.Nv*a.Dv)
	need("DeltaNet B", a.B, a.T*a.Nv)
	need("DeltaNet A", a.A, a.T*a.Nv)
	need("DeltaNet Conv", a.Conv, C*a.K)
	c, off, err := d.take(4 * a.T * C)
	if err != nil {
		d.fail(err)
		return true
	}
	cv := nn.Tensor{Buf: c, Off: off / 4, N: a.T * C}
	win := ptrOut("window", st.t[0]) // (K = 1: never read, one float)
	p := d.b.params("deltanet_conv").u32("T", a.T).u32("C", C).u32("K", a.K)
	d.entry("deltanet_conv", ceilDiv(C, 32), 1, p, win, ptrIn("mixed", a.Mixed), ptrIn("conv", a.Conv), ptrOut("out", cv))
	qScale := float32(1 / math.Sqrt(float64(a.Dk))) // as nn.DeltaNetHost
	p = d.b.params("deltanet_qknorm").u32("T", a.T).u32("C", C).u32("nk", a.Nk).u32("dk", a.Dk).f32("qscale", qScale)
	d.entry("deltanet_qknorm", a.T*2*a.Nk, 1, p, ptrOut("x", cv))
	// Head dims up to 128 (the real models'): the state in registers
	// across the chunk (deltanet_rec_reg, the same bits).
	// A decode step's chunk (the CUDA backend's default, dnColsMaxT there)
	// splits a head's columns over groups, the norm and gate after it
	// (deltanet_rec_cols and deltanet_out, the same bits).
	rec, groups := "deltanet_rec", a.Nv
	if a.Dk <= 128 && a.Dv <= 128 && d.has("deltanet_rec_reg") {
		rec = "deltanet_rec_reg"
		if a.T <= 16 && d.has("deltanet_rec_cols") && d.has("deltanet_out") {
			rec, groups = "deltanet_rec_cols", a.Nv*ceilDiv(a.Dv, 32)
		}
	}
	args := func(kernel string) *paramBlock {
		return d.b.params(kernel).u32("T", a.T).u32("C", C).u32("nk", a.Nk).u32("nv", a.Nv).u32("dk", a.Dk).
			u32("dv", a.Dv).f32("eps", a.Eps)
	}
	ptrs := func() []ptrArg {
		return []ptrArg{ptrOut("state", st.t[1]), ptrOut("y", a.Y), ptrIn("cv", cv), ptrIn("z", a.Z),
			ptrIn("b", a.B), ptrIn("a", a.A), ptrIn("nega", a.NegA), ptrIn("dtbias", a.DtBias), ptrIn("norm", a.Norm)}
	}
	d.entry(rec, groups, 1, args(rec), ptrs()...)
	if rec == "deltanet_rec_cols" {
		d.entry("deltanet_out", a.T*a.Nv, 1, args("deltanet_out"), ptrs()...)
	}
	return true
}

// kRoute encodes route_topk into pass memory, waits, and copies the
// selection and weights into r. ok false: outside the kernel's limits.
func (d *Device) kRoute(r nn.Routing, logits nn.Tensor, T, E int, norm bool) (ok bool) {
	k := r.K
	if !d.has("route_topk") || E < 1 || E > qkRouteMaxE || k < 1 || k > min(E, qkRouteMaxK) || !fits(int64(T)*int64(E)) ||
		len(r.Sel) < T*k || len(r.Wts) < T*k {
		return false
	}
	sel, ok1 := d.ints(make([]int, T*k))
	wts, ok2 := d.floats(make([]float32, T*k))
	if !ok1 || !ok2 {
		return true
	}
	nrm := 0
	if norm {
		nrm = 1
	}
	p := d.b.params("route_topk").u32("T", T).u32("E", E).u32("k", k).u32("norm", nrm)
	d.entry("route_topk", T, 1, p, ptrIn("logits", logits), ptrOut("sel", sel), ptrOut("wts", wts))
	if !d.sync() {
		return true
	}
	iv := unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(host(sel)))), sel.N)
	for i := range T * k {
		s := int(iv[i])
		if s < 0 || s >= E {
			d.fail(errRouteNaN)
			return true
		}
		r.Sel[i] = s
	}
	copy(r.Wts[:T*k], host(wts))
	return true
}

// kSelectTop encodes the select kernels over x[:n] into pass memory,
// waits, and checks and copies the candidates into c
// (gpukernels.Selection). ok false: outside the kernels' limits or a
// kernel unusable (the caller selects on the host).
func (d *Device) kSelectTop(c *nn.TopLogits, x nn.Tensor, n, k int) (ok, sel bool) {
	if !d.has("select_chunk") || !d.has("select_merge") || !d.has("select_list") || !gpukernels.SelectFits(n, k) {
		return false, false
	}
	G, limit := gpukernels.SelectChunks(n), k+gpukernels.SelSlack
	part, ok1 := d.floats(make([]float32, G*k))
	th, ok2 := d.floats(make([]float32, 1))
	cnt, ok3 := d.ints(make([]int, G))
	ids, ok4 := d.ints(make([]int, G*limit))
	vals, ok5 := d.floats(make([]float32, G*limit))
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return true, false
	}
	d.entry("select_chunk", G, 1, d.b.params("select_chunk").u32("n", n).u32("k", k), ptrIn("x", x), ptrOut("part", part))
	d.entry("select_merge", 1, 1, d.b.params("select_merge").u32("m", G*k).u32("k", k), ptrIn("part", part), ptrOut("th", th))
	d.entry("select_list", G, 1, d.b.params("select_list").u32("n", n).u32("cap", limit),
		ptrIn("x", x), ptrIn("th", th), ptrOut("cnt", cnt), ptrOut("ids", ids), ptrOut("vals", vals))
	if !d.sync() {
		return true, false
	}
	i32 := func(t nn.Tensor) []int32 {
		return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(host(t)))), t.N)
	}
	s := gpukernels.Selection{N: n, K: k, Limit: limit, Th: host(th)[0], Count: i32(cnt), IDs: i32(ids), Vals: host(vals)}
	sel, err := s.Parse(c)
	if err != nil {
		d.fail(fmt.Errorf("metal: %w", err))
		return true, false
	}
	return true, sel
}
