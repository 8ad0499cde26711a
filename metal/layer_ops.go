package metal

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/nn"
)

// The Device's operations. Those with a Metal kernel are encoded into the
// layer's command buffer:
//
//	MatMul                  gemv_q4 / gemv_q8 / gemv_qn / gemv_dense
//	RMSNorm (NormWeight)    rms_norm (strided rows)
//	GLU (SiLU)              swiglu
//	SigmoidMul              sigmoid_mul
//	Add                     residual_add
//	AddGated                scale_add (per-row sigmoid gate)
//	Write, Copy             copy_f32
//
// hostOps are computed on the CPU, after a wait, over the same shared
// memory with package nn's arithmetic (HostDevice's), until the shared
// kernel bodies (internal/gpukernels) cover them.
var hostOps = []string{"RMSNorm (NormOffset, NormUnit)", "RoPE", "Attention", "DeltaNet", "Gather",
	"GatherRows", "ScatterRows", "GLU (GELU)", "Scale", "Softcap", "Route", "Combine"}

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
	if s.Kind != nn.NormWeight {
		if d.hostOp() {
			cpu.RMSNorm(hostT(y), hostT(x), hostT(w), s)
		}
		return
	}
	need("RMSNorm w", w, s.Width)
	for _, v := range []int{s.Rows, s.Width, xs, ys} {
		dim32("RMSNorm", v)
	}
	p := d.b.params("rms_norm").u32("rows", s.Rows).u32("dim", s.Width).u32("x_stride", xs).
		u32("y_stride", ys).u32("z_stride", 0).f32("eps", s.Eps).f32("scale", 1)
	d.legacy("rms_norm", [3]int{s.Rows, 1, 1}, [3]int{tgThreads, 1, 1}, p,
		bufT("x_off", x), bufT("w_off", w), bufArg{field: "z_off"}, bufT("y_off", y))
}

// elem encodes one of the Elem kernels (50_elementwise.metal) over rows
// of n values.
func (d *Device) elem(kernel string, y, a, b nn.Tensor, rows, n, yStride, aStride, bStride, mode int) {
	for _, v := range []int{rows, n, yStride, aStride, bStride} {
		dim32(kernel, v)
	}
	p := d.b.params(kernel).u32("n", n).u32("rows", rows).u32("a_stride", aStride).u32("b_stride", bStride).
		u32("y_stride", yStride).u32("mode", mode).f32("alpha", 0)
	d.legacy(kernel, [3]int{ceilDiv(n, elemThreads), rows, 1}, [3]int{elemThreads, 1, 1}, p,
		bufT("a_off", a), bufT("b_off", b), bufT("y_off", y))
}

// GLU implements nn.Device: SwiGLU with swiglu, GeGLU on the CPU.
func (d *Device) GLU(act nn.Activation, y, gate, up nn.Tensor, n int) {
	if n < 1 {
		return
	}
	need("GLU y", y, n)
	need("GLU gate", gate, n)
	need("GLU up", up, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	if act != nn.SiLUGate {
		if d.hostOp() {
			cpu.GLU(act, hostT(y), hostT(gate), hostT(up), n)
		}
		return
	}
	d.elem("swiglu", y, gate, up, 1, n, n, n, n, 0)
}

// SigmoidMul implements nn.Device with sigmoid_mul (in place on o).
func (d *Device) SigmoidMul(o, g nn.Tensor, rows, width, oStride, gStride int) {
	if rows < 1 || width < 1 {
		return
	}
	need("SigmoidMul o", o, (rows-1)*oStride+width)
	need("SigmoidMul g", g, (rows-1)*gStride+width)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.elem("sigmoid_mul_rows", o, o, g, rows, width, oStride, oStride, gStride, 0)
}

// Add implements nn.Device with residual_add.
func (d *Device) Add(x, y nn.Tensor, n int) {
	if n < 1 {
		return
	}
	need("Add x", x, n)
	need("Add y", y, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.elem("residual_add", x, x, y, 1, n, n, n, n, 0)
}

// AddGated implements nn.Device with scale_add (mode 1: the gate is one
// logit per row).
func (d *Device) AddGated(out, x, g nn.Tensor, rows, width int) {
	if rows < 1 || width < 1 {
		return
	}
	need("AddGated out", out, rows*width)
	need("AddGated x", x, rows*width)
	need("AddGated g", g, rows)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.elem("scale_add", out, x, g, rows, width, width, width, 1, 1)
}

// Scale implements nn.Device (on the CPU).
func (d *Device) Scale(x nn.Tensor, a float32, n int) {
	need("Scale", x, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	if n > 0 && d.hostOp() {
		cpu.Scale(hostT(x), a, n)
	}
}

// Softcap implements nn.Device (on the CPU).
func (d *Device) Softcap(x nn.Tensor, c float32, n int) {
	need("Softcap", x, n)
	d.mu.Lock()
	defer d.mu.Unlock()
	if n > 0 && d.hostOp() {
		cpu.Softcap(hostT(x), c, n)
	}
}

// RoPE implements nn.Device (on the CPU).
func (d *Device) RoPE(x nn.Tensor, r *nn.RoPE, s nn.RoPESpec) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.Rows > 0 && d.hostOp() {
		cpu.RoPE(hostT(x), r, s)
	}
}

// Gather implements nn.Device (on the CPU).
func (d *Device) Gather(dst, src nn.Tensor, ix nn.Index, rows, srcStride int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rows > 0 && d.hostOp() {
		cpu.Gather(hostT(dst), hostT(src), ix, rows, srcStride)
	}
}

// GatherRows implements nn.Device (on the CPU).
func (d *Device) GatherRows(dst, src nn.Tensor, rows []int, width int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(rows) > 0 && d.hostOp() {
		cpu.GatherRows(hostT(dst), hostT(src), rows, width)
	}
}

// ScatterRows implements nn.Device (on the CPU).
func (d *Device) ScatterRows(dst, src nn.Tensor, rows []int, width int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(rows) > 0 && d.hostOp() {
		cpu.ScatterRows(hostT(dst), hostT(src), rows, width)
	}
}

// Route implements nn.Device: a wait, then the routing on the CPU.
func (d *Device) Route(r nn.Routing, logits nn.Tensor, T, E int, norm bool) error {
	need("Route", logits, T*E)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hostOp() {
		if err := cpu.Route(r, hostT(logits), T, E, norm); err != nil {
			d.fail(err)
		}
	}
	return d.err
}

// Combine implements nn.Device (on the CPU).
func (d *Device) Combine(out, res nn.Tensor, wts []float32, T, k, width int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if T > 0 && d.hostOp() {
		cpu.Combine(hostT(out), hostT(res), wts, T, k, width)
	}
}

// DeltaNet implements nn.Device (on the CPU, over the state's memory).
func (d *Device) DeltaNet(st nn.TensorState, a *nn.DeltaNetArgs) {
	ts, ok := st.(*tensorState)
	if !ok {
		panic(fmt.Sprintf("metal: a %T state used with the Metal device", st))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a.T < 1 || !d.hostOp() {
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
	if !d.hostOp() {
		return
	}
	if err := c.attend(host(O), host(Q), host(K), host(V), T, dims); err != nil {
		d.fail(err)
	}
}
