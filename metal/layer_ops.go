package metal

import (
	"fmt"
	"math"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The Device's operations, each encoded into the layer's command buffer:
// MatMul with the Metal-only GEMV kernels (gemv_q4, gemv_q8, gemv_qn,
// gemv_dense), Write and Copy with copy_f32, and every other op with the
// kernel bodies shared with CUDA (internal/gpukernels: rms_norm_rows, rope,
// attention, deltanet_conv / deltanet_qknorm / deltanet_rec, gather,
// gather_rows, scatter_rows, glu, sigmoid_mul, add, add_gated, scale,
// softcap, combine, route_topk). A call outside a kernel's limits (a head
// dim above 512, more than 4096 experts, a RoPE position past 2^24, ...)
// or with a matrix outside Alloc memory waits for the GPU and runs on the
// CPU over the same shared memory, with package nn's arithmetic (what
// HostDevice computes): correct, at the price of a wait.

// cpu is the host device the host ops run on (package nn's arithmetic).
var cpu nn.HostDevice

func need(op string, t nn.Tensor, n int) {
	if n > t.N {
		panic(fmt.Sprintf("metal: %s needs %d floats of a tensor of %d", op, n, t.N))
	}
}

func dim32(op string, v int) {
	if v < 0 || v >= 1<<31 {
		panic(fmt.Sprintf("metal: %s: extent %d out of range", op, v))
	}
}

// MatMul implements nn.Device with the GEMV kernels (n vectors per
// threadgroup column). A matrix not made resident is located in Alloc
// memory, or multiplied on the CPU.
func (d *Device) MatMul(w nn.Mat, y, x nn.Tensor, n int) {
	m := w.W
	if n < 1 {
		return
	}
	need("MatMul x", x, n*m.Cols)
	need("MatMul y", y, n*m.Rows)
	if err := checkMatrix(m); err != nil {
		panic("metal: MatMul: " + err.Error())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	x, y = x.Slice(0, n*m.Cols), y.Slice(0, n*m.Rows)
	if sameMem(x, y) {
		panic("metal: MatMul: y overlaps x")
	}
	rm, ok := w.Dev.(*resMat)
	if !ok {
		rm, ok = d.placeMat(m)
	}
	if !ok {
		if d.hostOp() {
			cpu.MatMul(w, hostT(y), hostT(x), n)
		}
		return
	}
	var kernel string
	switch m.Bits {
	case 0:
		kernel = "gemv_dense"
	case 4:
		kernel = "gemv_q4"
	case 8:
		kernel = "gemv_q8"
	default:
		kernel = "gemv_qn"
	}
	dim32("MatMul", n)
	p := d.b.params(kernel).u32("rows", m.Rows).u32("cols", m.Cols).u32("group", m.GroupSize).
		u32("stype", int(m.Type)).u32("bits", m.Bits)
	d.legacy(kernel, [3]int{ceilDiv(m.Rows, rowsPerTG), n, 1}, [3]int{tgThreads, 1, 1}, p,
		rm.w, rm.s, rm.b, bufT("x_off", x), bufT("y_off", y))
}

// RMSNorm implements nn.Device: the weighted kind with rms_norm, the others
// on the CPU.
func (d *Device) RMSNorm(y, x, w nn.Tensor, s nn.NormSpec) {
	if s.Rows < 1 || s.Width < 1 {
		return
	}
	xs, ys := s.XStride, s.YStride
	if xs == 0 {
		xs = s.Width
	}
	if ys == 0 {
		ys = s.Width
	}
	need("RMSNorm x", x, (s.Rows-1)*xs+s.Width)
	need("RMSNorm y", y, (s.Rows-1)*ys+s.Width)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.kNorm(y, x, w, s, xs, ys) && d.hostOp() {
		cpu.RMSNorm(hostT(y), hostT(x), hostT(w), s)
	}
}

var _ nn.ResidualNormer = (*Device)(nil)

// AddRMSNorm implements nn.ResidualNormer (add_rms_norm_rows: one kernel
// instead of add and rms_norm_rows, the same bits).
func (d *Device) AddRMSNorm(x, r, y, w nn.Tensor, s nn.NormSpec) {
	if s.Rows < 1 || s.Width < 1 {
		return
	}
	if s.XStride != 0 && s.XStride != s.Width {
		panic(fmt.Sprintf("metal: AddRMSNorm: x stride %d, want its rows contiguous (width %d)", s.XStride, s.Width))
	}
	ys := s.YStride
	if ys == 0 {
		ys = s.Width
	}
	n := s.Rows * s.Width
	need("AddRMSNorm x", x, n)
	need("AddRMSNorm r", r, n)
	need("AddRMSNorm y", y, (s.Rows-1)*ys+s.Width)
	done := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.kAddNorm(x, r, y, w, s, ys)
	}()
	if !done {
		d.Add(x, r, n)
		d.RMSNorm(y, x, w, s)
	}
}

// unary encodes scale or softcap.
func (d *Device) unary(kernel string, x nn.Tensor, c float32, n int) {
	p := d.b.params(kernel).u32("n", n).f32("c", c)
	d.entry(kernel, ceilDiv(n, tgThreads), 1, p, ptrOut("x", x))
}

// GLU implements nn.Device with glu (y may be gate or up).
func (d *Device) GLU(act nn.Activation, y, gate, up nn.Tensor, n int) {
	if n < 1 {
		return
	}
	need("GLU y", y, n)
	need("GLU gate", gate, n)
	need("GLU up", up, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.has("glu") || (act != nn.SiLUGate && act != nn.GELUTanhGate) || !fits(int64(n)) {
		if d.hostOp() {
			cpu.GLU(act, hostT(y), hostT(gate), hostT(up), n)
		}
		return
	}
	p := d.b.params("glu").u32("n", n).u32("act", int(act))
	d.entry("glu", ceilDiv(n, tgThreads), 1, p, ptrOut("y", y), ptrIn("a", gate), ptrIn("b", up))
}

// SigmoidMul implements nn.Device with sigmoid_mul.
func (d *Device) SigmoidMul(o, g nn.Tensor, rows, width, oStride, gStride int) {
	if rows < 1 || width < 1 {
		return
	}
	need("SigmoidMul o", o, int(span64(rows, oStride, width)))
	need("SigmoidMul g", g, int(span64(rows, gStride, width)))
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.has("sigmoid_mul") || oStride < 0 || gStride < 0 || !fits(int64(rows)*int64(width), span64(rows, oStride, width), span64(rows, gStride, width)) {
		if d.hostOp() {
			cpu.SigmoidMul(hostT(o), hostT(g), rows, width, oStride, gStride)
		}
		return
	}
	p := d.b.params("sigmoid_mul").u32("rows", rows).u32("width", width).u32("ostride", oStride).u32("gstride", gStride)
	d.entry("sigmoid_mul", ceilDiv(rows*width, tgThreads), 1, p, ptrOut("o", o), ptrIn("g", g))
}

// Add implements nn.Device with add.
func (d *Device) Add(x, y nn.Tensor, n int) {
	if n < 1 {
		return
	}
	need("Add x", x, n)
	need("Add y", y, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.has("add") || !fits(int64(n)) {
		if d.hostOp() {
			cpu.Add(hostT(x), hostT(y), n)
		}
		return
	}
	p := d.b.params("add").u32("n", n).u32("act", 0)
	d.entry("add", ceilDiv(n, tgThreads), 1, p, ptrOut("y", x), ptrIn("a", y), null("b"))
}

// AddGated implements nn.Device with add_gated.
func (d *Device) AddGated(out, x, g nn.Tensor, rows, width int) {
	if rows < 1 || width < 1 {
		return
	}
	need("AddGated out", out, rows*width)
	need("AddGated x", x, rows*width)
	need("AddGated g", g, rows)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.has("add_gated") || !fits(int64(rows)*int64(width)) {
		if d.hostOp() {
			cpu.AddGated(hostT(out), hostT(x), hostT(g), rows, width)
		}
		return
	}
	p := d.b.params("add_gated").u32("rows", rows).u32("width", width)
	d.entry("add_gated", ceilDiv(rows*width, tgThreads), 1, p, ptrOut("out", out), ptrIn("x", x), ptrIn("g", g))
}

// Scale implements nn.Device with scale.
func (d *Device) Scale(x nn.Tensor, a float32, n int) {
	if n < 1 {
		return
	}
	need("Scale", x, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.has("scale") || !fits(int64(n)) {
		if d.hostOp() {
			cpu.Scale(hostT(x), a, n)
		}
		return
	}
	d.unary("scale", x, a, n)
}

// Softcap implements nn.Device with softcap (a cap that is not a positive
// finite number: on the CPU).
func (d *Device) Softcap(x nn.Tensor, c float32, n int) {
	if n < 1 {
		return
	}
	need("Softcap", x, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.has("softcap") || !(c > 0) || math.IsInf(float64(c), 0) || !fits(int64(n)) {
		if d.hostOp() {
			cpu.Softcap(hostT(x), c, n)
		}
		return
	}
	d.unary("softcap", x, c, n)
}

// RoPE implements nn.Device with rope.
func (d *Device) RoPE(x nn.Tensor, r *nn.RoPE, s nn.RoPESpec) {
	if s.Rows < 1 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.kRoPE(x, r, s) && d.hostOp() {
		cpu.RoPE(hostT(x), r, s)
	}
}

// Gather implements nn.Device with gather (ix from Indices).
func (d *Device) Gather(dst, src nn.Tensor, ix nn.Index, rows, srcStride int) {
	n := len(ix.Host)
	if rows < 1 || n == 0 {
		return
	}
	need("Gather dst", dst, rows*n)
	top := 0
	for _, j := range ix.Host {
		if j < 0 || int(j) >= srcStride {
			panic(fmt.Sprintf("metal: Gather: index %d outside a row of %d", j, srcStride))
		}
		top = max(top, int(j)+1)
	}
	need("Gather src", src, int(span64(rows, srcStride, top)))
	d.mu.Lock()
	defer d.mu.Unlock()
	dix, ok := ix.Dev.(nn.Tensor)
	if !ok || !d.has("gather") || dix.N < n || !fits(int64(n)*int64(rows), int64(rows)*int64(srcStride)) {
		if d.hostOp() {
			cpu.Gather(hostT(dst), hostT(src), ix, rows, srcStride)
		}
		return
	}
	p := d.b.params("gather").u32("n", n).u32("rows", rows).u32("srcstride", srcStride)
	d.entry("gather", ceilDiv(n*rows, tgThreads), 1, p, ptrOut("dst", dst), ptrIn("src", src), ptrIn("ix", dix))
}

// rowsCopy encodes gather_rows or scatter_rows; far is the tensor the row
// numbers address.
func (d *Device) rowsCopy(kernel string, dst, src, far nn.Tensor, rows []int, width int) bool {
	n := len(rows)
	for _, r := range rows {
		if r < 0 || int64(r+1)*int64(width) > int64(far.N) {
			panic(fmt.Sprintf("metal: %s: row %d outside a tensor of %d rows of %d", kernel, r, far.N/max(width, 1), width))
		}
	}
	if !d.has(kernel) || !fits(int64(n)*int64(width), int64(far.N)) {
		return false
	}
	ix, ok := d.ints(rows)
	if !ok {
		return true
	}
	p := d.b.params(kernel).u32("n", n).u32("width", width)
	d.entry(kernel, ceilDiv(n*width, tgThreads), 1, p, ptrOut("dst", dst), ptrIn("src", src), ptrIn("rows", ix))
	return true
}

// GatherRows implements nn.Device with gather_rows.
func (d *Device) GatherRows(dst, src nn.Tensor, rows []int, width int) {
	if len(rows) == 0 || width < 1 {
		return
	}
	need("GatherRows dst", dst, len(rows)*width)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.rowsCopy("gather_rows", dst, src, src, rows, width) && d.hostOp() {
		cpu.GatherRows(hostT(dst), hostT(src), rows, width)
	}
}

// ScatterRows implements nn.Device with scatter_rows (the rows must be
// distinct, as the graphs' are).
func (d *Device) ScatterRows(dst, src nn.Tensor, rows []int, width int) {
	if len(rows) == 0 || width < 1 {
		return
	}
	need("ScatterRows src", src, len(rows)*width)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.rowsCopy("scatter_rows", dst, src, dst, rows, width) && d.hostOp() {
		cpu.ScatterRows(hostT(dst), hostT(src), rows, width)
	}
}

// Route implements nn.Device with route_topk: a wait, then the routing is
// read back.
func (d *Device) Route(r nn.Routing, logits nn.Tensor, T, E int, norm bool) error {
	need("Route", logits, T*E)
	d.mu.Lock()
	defer d.mu.Unlock()
	if T < 1 {
		return d.err
	}
	if !d.kRoute(r, logits, T, E, norm) && d.hostOp() {
		if err := cpu.Route(r, hostT(logits), T, E, norm); err != nil {
			d.fail(err)
		}
	}
	return d.err
}

// Combine implements nn.Device with combine (the weights are copied into
// pass memory).
func (d *Device) Combine(out, res nn.Tensor, wts []float32, T, k, width int) {
	if T < 1 || width < 1 {
		return
	}
	need("Combine out", out, T*width)
	need("Combine res", res, T*k*width)
	if len(wts) < T*k {
		panic(fmt.Sprintf("metal: Combine: %d weights for %d×%d", len(wts), T, k))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.has("combine") || k < 0 || !fits(int64(T)*int64(width), int64(T)*int64(k)*int64(width)) {
		if d.hostOp() {
			cpu.Combine(hostT(out), hostT(res), wts, T, k, width)
		}
		return
	}
	w, ok := d.floats(wts[:T*k])
	if !ok {
		return
	}
	p := d.b.params("combine").u32("T", T).u32("k", k).u32("width", width)
	d.entry("combine", ceilDiv(T*width, tgThreads), 1, p, ptrOut("out", out), ptrIn("res", res), ptrIn("wts", w))
}

// DeltaNet implements nn.Device (on the CPU, over the state's memory).
func (d *Device) DeltaNet(st nn.TensorState, a *nn.DeltaNetArgs) {
	ts, ok := st.(*tensorState)
	if !ok {
		panic(fmt.Sprintf("metal: a %T state used with the Metal device", st))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a.T < 1 || d.kDeltaNet(ts, a) || !d.hostOp() {
		return
	}
	h := *a
	for _, t := range []*nn.Tensor{&h.Y, &h.Mixed, &h.Z, &h.B, &h.A, &h.Conv, &h.NegA, &h.DtBias, &h.Norm} {
		*t = hostT(*t)
	}
	nn.DeltaNetHost(host(ts.t[0]), host(ts.t[1]), &h)
}

// Attention implements nn.Device (on the CPU, over the cache's memory).
func (d *Device) Attention(kv nn.KVState, O, Q, K, V nn.Tensor, T int, dims nn.AttnDims) {
	c, ok := kv.(*kvState)
	if !ok {
		panic(fmt.Sprintf("metal: a %T KV cache used with the Metal device", kv))
	}
	if T < 1 {
		return
	}
	vd := dims.VDim
	if vd == 0 {
		vd = dims.HeadDim
	}
	need("Attention O", O, T*dims.Heads*vd)
	need("Attention Q", Q, (T-1)*dims.Heads*dims.QStride+(dims.Heads-1)*dims.QStride+dims.HeadDim)
	need("Attention K", K, T*c.kW)
	need("Attention V", V, T*c.vW)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.kAttention(c, O, Q, K, V, T, dims) || !d.hostOp() {
		return
	}
	if err := c.attend(host(O), host(Q), host(K), host(V), T, dims); err != nil {
		d.fail(err)
	}
}

// SelectTop implements nn.TopSelector with the select kernels: a wait,
// then the candidates are read back (on the host, with nn.SelectTopRef,
// where a kernel is unusable).
func (d *Device) SelectTop(c *nn.TopLogits, x nn.Tensor, n, k int) (bool, error) {
	c.Reset()
	need("SelectTop", x, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil || !gpukernels.SelectFits(n, k) {
		return false, d.err
	}
	if ran, sel := d.kSelectTop(c, x, n, k); ran {
		return sel && d.err == nil, d.err
	}
	if !d.hostOp() {
		return false, d.err
	}
	return nn.SelectTopRef(c, host(x)[:n], k, 0), d.err
}

// SelectsTop implements nn.TopSelector: wherever the select kernels take
// the shape (not measured on a Mac: the logits are in shared memory there,
// so only the host's scan is saved).
func (d *Device) SelectsTop(n, k int) bool { return gpukernels.SelectFits(n, k) }

var _ nn.TopSelector = (*Device)(nil)
