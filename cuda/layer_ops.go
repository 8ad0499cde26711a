package cuda

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The Layer's ops. MatMul, Copy, GatherRows and ScatterRows run on the
// device; every other op is computed on the host (hostOp) until its kernel
// replaces it: the stream is waited for, the tensors it touches are
// downloaded, nn.HostDevice's op (or, for attention, the same arithmetic
// over the device cache's layout) runs on the copies, and its outputs are
// uploaded. That path is exact (the reference's bits) and slow.

// host is the reference the host path computes with: CPU arithmetic, so the
// results are nn.HostDevice's over the CPU backend bit for bit.
var host = nn.HostDevice{}

// hostOp runs fn over host copies of ts and uploads ts[:nout] afterwards.
// Each buffer's span covering its tensors is downloaded once, so views that
// share storage on the device share it on the host too. Lock held, no
// error pending.
func (l *Layer) hostOp(op string, ts []nn.Tensor, nout int, fn func(h []nn.Tensor)) {
	type span struct {
		lo, hi int
		host   []float32
	}
	spans := map[*devBuf]*span{}
	for _, t := range ts {
		if t.Buf == nil {
			continue
		}
		addr(t, t.N)
		b := buf(t)
		if sp, ok := spans[b]; ok {
			sp.lo, sp.hi = min(sp.lo, t.Off), max(sp.hi, t.Off+t.N)
		} else {
			spans[b] = &span{lo: t.Off, hi: t.Off + t.N}
		}
	}
	if !l.wait(op) {
		return
	}
	for b, sp := range spans {
		sp.host = make([]float32, sp.hi-sp.lo)
		if err := l.download(f32b(sp.host), b.p+4*uint64(sp.lo)); err != nil {
			l.fail(op, err)
			return
		}
	}
	h := make([]nn.Tensor, len(ts))
	for i, t := range ts {
		if t.Buf == nil {
			continue
		}
		sp := spans[buf(t)]
		h[i] = nn.HostTensor(sp.host[t.Off-sp.lo : t.Off-sp.lo+t.N])
	}
	fn(h)
	for i, t := range ts[:nout] {
		if t.Buf == nil || t.N == 0 {
			continue
		}
		if err := l.upload(addr(t, t.N), f32b(nn.F32(h[i])), false); err != nil {
			l.fail(op, err)
			return
		}
	}
	l.b.stats.HostOps++
}

// MatMul implements nn.Device on the gemv kernels. A Mat that is not
// resident (no device copy: a weight a Binding could not upload) is copied
// into the pass's arena first.
func (l *Layer) MatMul(w nn.Mat, y, x nn.Tensor, n int) {
	if n <= 0 {
		return
	}
	ok := l.lock()
	defer l.unlock()
	m := w.W
	yp, xp := addr(y, n*m.Rows), addr(x, n*m.Cols)
	if !ok {
		return
	}
	d, isDev := w.Dev.(*devMat)
	if !isDev {
		if err := checkMatrix(m); err != nil {
			panic("cuda: MatMul: " + err.Error())
		}
		b, off, err := l.temp.take(l, matBytes(m))
		if err != nil {
			l.fail("MatMul", err)
			return
		}
		if d, err = l.placeMat(m, b.p+uint64(off), false); err != nil {
			l.fail("MatMul", err)
			return
		}
	}
	if xp%16 != 0 { // the 4- and 8-bit kernels load x in 16-byte pieces
		b, off, err := l.temp.take(l, 4*int64(n*m.Cols))
		if err != nil {
			l.fail("MatMul", err)
			return
		}
		if err := l.b.dev.dtod(b.p+uint64(off), xp, 4*n*m.Cols); err != nil {
			l.fail("MatMul", err)
			return
		}
		xp = b.p + uint64(off)
	}
	if err := l.matMul(d, m, yp, xp, n); err != nil {
		l.fail("MatMul", err)
	}
}

// matMul queues y = W·x for n rows of x, choosing the kernel by n: the
// gemv kernels for every n today (one pass over the weights per vector).
// A batched kernel (gemm, on the tensor cores) goes here for n above its
// break-even, keeping gemv for decode.
func (l *Layer) matMul(d *devMat, m mlxq.Matrix, yp, xp devptr, n int) error {
	return l.b.gemv(d.kernel, d.w, d.s, d.b, xp, yp, m, n)
}

// RMSNorm implements nn.Device (host path).
func (l *Layer) RMSNorm(y, x, w nn.Tensor, s nn.NormSpec) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("RMSNorm", []nn.Tensor{y, x, w}, 1, func(h []nn.Tensor) { host.RMSNorm(h[0], h[1], h[2], s) })
}

// RoPE implements nn.Device (host path).
func (l *Layer) RoPE(x nn.Tensor, r *nn.RoPE, s nn.RoPESpec) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("RoPE", []nn.Tensor{x}, 1, func(h []nn.Tensor) { host.RoPE(h[0], r, s) })
}

func vdim(d nn.AttnDims) int {
	if d.VDim > 0 {
		return d.VDim
	}
	return d.HeadDim
}

// Attention implements nn.Device: the cache makes room (a full cache grows
// by reallocation), the attention runs (host path: the cache's rows
// downloaded), and then the chunk's keys and values are copied into their
// rows on the device.
func (l *Layer) Attention(kvs nn.KVState, O, Q, K, V nn.Tensor, T int, d nn.AttnDims) {
	kv := l.kvOf(kvs)
	ok := l.lock()
	defer l.unlock()
	defer func() { kv.n += T }()
	if T <= 0 {
		return
	}
	vd := vdim(d)
	addr(O, T*d.Heads*vd)
	addr(Q, (T-1)*d.Heads*d.QStride+(d.Heads-1)*d.QStride+d.HeadDim)
	kp, vp := addr(K, T*kv.kw), addr(V, T*kv.vw)
	if !ok {
		return
	}
	if err := kv.reserve(kv.n + T); err != nil {
		l.fail("Attention", err)
		return
	}
	l.attendHost(kv, O, Q, K, V, T, d)
	if l.err != nil {
		return
	}
	if err := kv.store(kp, vp, T); err != nil {
		l.fail("Attention", err)
	}
}

// attendHost is the host path of Attention: nn.KVCache's arithmetic over
// the device cache's rows (position j at row j, or j % W on a ring).
func (l *Layer) attendHost(kv *kvState, O, Q, K, V nn.Tensor, T int, d nn.AttnDims) {
	if !l.wait("Attention") {
		return
	}
	used := kv.used()
	kc, vc := make([]float32, used*kv.kw), make([]float32, used*kv.vw)
	if err := l.download(f32b(kc), kv.k); err != nil {
		l.fail("Attention", err)
		return
	}
	if err := l.download(f32b(vc), kv.v); err != nil {
		l.fail("Attention", err)
		return
	}
	pos, W := kv.n, kv.window
	l.hostOp("Attention", []nn.Tensor{O, Q, K, V}, 1, func(h []nn.Tensor) {
		hostAttend(nn.F32(h[0]), nn.F32(h[1]), nn.F32(h[2]), nn.F32(h[3]), kc, vc, pos, T, W, kv.kw, kv.vw, d)
	})
}

// hostAttend is KVCache.Attend's arithmetic (same operations in the same
// order) with the cache's rows in kc, vc (full: row j; ring of W: row j %
// W) for positions below pos and the chunk's in K, V; O accumulates (it
// is zero on entry, as a Temp).
func hostAttend(O, Q, K, V, kc, vc []float32, pos, T, W, kw, vw int, d nn.AttnDims) {
	Nh, hd, vd := d.Heads, d.HeadDim, vdim(d)
	qw := Nh * d.QStride
	group := Nh / d.KVHeads
	row := func(j int) ([]float32, []float32) {
		if j >= pos {
			i := j - pos
			return K[i*kw : (i+1)*kw], V[i*vw : (i+1)*vw]
		}
		if W > 0 {
			j %= W
		}
		return kc[j*kw : (j+1)*kw], vc[j*vw : (j+1)*vw]
	}
	scores := make([]float32, pos+T)
	for t := range T {
		p := pos + t
		lo := 0
		if W > 0 {
			lo = max(0, p-W+1)
		}
		n := p - lo + 1
		for h := range Nh {
			g := h / group
			q := Q[t*qw+h*d.QStride : t*qw+h*d.QStride+hd]
			s := scores[:n]
			for j := range n {
				k, _ := row(lo + j)
				s[j] = nn.Dot(q, k[g*hd:(g+1)*hd]) * d.Scale
			}
			nn.Softmax(s)
			o := O[(t*Nh+h)*vd : (t*Nh+h+1)*vd]
			for j, pr := range s {
				_, v := row(lo + j)
				nn.Axpy(o, pr, v[g*vd:(g+1)*vd])
			}
		}
	}
}

// DeltaNet implements nn.Device (host path).
func (l *Layer) DeltaNet(st nn.TensorState, a *nn.DeltaNetArgs) {
	ts := l.tensorsOf(st)
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	args := []nn.Tensor{a.Y, ts.t[0], ts.t[1], a.Mixed, a.Z, a.B, a.A, a.Conv, a.NegA, a.DtBias, a.Norm}
	l.hostOp("DeltaNet", args, 3, func(h []nn.Tensor) {
		c := *a
		c.Y, c.Mixed, c.Z, c.B, c.A, c.Conv, c.NegA, c.DtBias, c.Norm = h[0], h[3], h[4], h[5], h[6], h[7], h[8], h[9], h[10]
		nn.DeltaNetHost(nn.F32(h[1]), nn.F32(h[2]), &c)
	})
}

// Gather implements nn.Device (host path, over Index.Host).
func (l *Layer) Gather(dst, src nn.Tensor, ix nn.Index, rows, srcStride int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("Gather", []nn.Tensor{dst, src}, 1, func(h []nn.Tensor) { host.Gather(h[0], h[1], ix, rows, srcStride) })
}

// GatherRows implements nn.Device: one device copy per run of consecutive
// rows.
func (l *Layer) GatherRows(dst, src nn.Tensor, rows []int, width int) {
	ok := l.lock()
	defer l.unlock()
	dp := addr(dst, len(rows)*width)
	sp := addr(src, 0)
	for _, r := range rows {
		if r < 0 || (r+1)*width > src.N {
			panic(fmt.Sprintf("cuda: GatherRows: row %d of a tensor of %d floats (width %d)", r, src.N, width))
		}
	}
	if !ok {
		return
	}
	l.copyRuns("GatherRows", rows, func(i, r, run int) error {
		return l.b.dev.dtod(dp+4*uint64(i*width), sp+4*uint64(r*width), 4*run*width)
	})
}

// ScatterRows implements nn.Device: one device copy per run of consecutive
// rows.
func (l *Layer) ScatterRows(dst, src nn.Tensor, rows []int, width int) {
	ok := l.lock()
	defer l.unlock()
	sp := addr(src, len(rows)*width)
	dp := addr(dst, 0)
	for _, r := range rows {
		if r < 0 || (r+1)*width > dst.N {
			panic(fmt.Sprintf("cuda: ScatterRows: row %d of a tensor of %d floats (width %d)", r, dst.N, width))
		}
	}
	if !ok {
		return
	}
	l.copyRuns("ScatterRows", rows, func(i, r, run int) error {
		return l.b.dev.dtod(dp+4*uint64(r*width), sp+4*uint64(i*width), 4*run*width)
	})
}

// copyRuns calls cp(i, rows[i], run) for each run of rows[i..i+run] that
// are consecutive (rows[i]+1 == rows[i+1], ...).
func (l *Layer) copyRuns(op string, rows []int, cp func(i, r, run int) error) {
	for i := 0; i < len(rows); {
		run := 1
		for i+run < len(rows) && rows[i+run] == rows[i]+run {
			run++
		}
		if err := cp(i, rows[i], run); err != nil {
			l.fail(op, err)
			return
		}
		i += run
	}
}

// GLU implements nn.Device (host path).
func (l *Layer) GLU(act nn.Activation, y, gate, up nn.Tensor, n int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("GLU", []nn.Tensor{y, gate, up}, 1, func(h []nn.Tensor) { host.GLU(act, h[0], h[1], h[2], n) })
}

// SigmoidMul implements nn.Device (host path).
func (l *Layer) SigmoidMul(o, g nn.Tensor, rows, width, oStride, gStride int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("SigmoidMul", []nn.Tensor{o, g}, 1, func(h []nn.Tensor) { host.SigmoidMul(h[0], h[1], rows, width, oStride, gStride) })
}

// Add implements nn.Device (host path).
func (l *Layer) Add(x, y nn.Tensor, n int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("Add", []nn.Tensor{x, y}, 1, func(h []nn.Tensor) { host.Add(h[0], h[1], n) })
}

// AddGated implements nn.Device (host path).
func (l *Layer) AddGated(out, x, g nn.Tensor, rows, width int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("AddGated", []nn.Tensor{out, x, g}, 1, func(h []nn.Tensor) { host.AddGated(h[0], h[1], h[2], rows, width) })
}

// Scale implements nn.Device (host path).
func (l *Layer) Scale(x nn.Tensor, a float32, n int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("Scale", []nn.Tensor{x}, 1, func(h []nn.Tensor) { host.Scale(h[0], a, n) })
}

// Softcap implements nn.Device (host path).
func (l *Layer) Softcap(x nn.Tensor, cap float32, n int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("Softcap", []nn.Tensor{x}, 1, func(h []nn.Tensor) { host.Softcap(h[0], cap, n) })
}

// Route implements nn.Device (host path): a wait.
func (l *Layer) Route(r nn.Routing, logits nn.Tensor, T, E int, norm bool) error {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return l.err
	}
	l.hostOp("Route", []nn.Tensor{logits}, 0, func(h []nn.Tensor) {
		nn.RouteSoftmaxTopK(r, nn.F32(h[0])[:T*E], T, E, norm)
	})
	return l.err
}

// Combine implements nn.Device (host path).
func (l *Layer) Combine(out, res nn.Tensor, wts []float32, T, k, width int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	l.hostOp("Combine", []nn.Tensor{out, res}, 1, func(h []nn.Tensor) { host.Combine(h[0], h[1], wts, T, k, width) })
}
