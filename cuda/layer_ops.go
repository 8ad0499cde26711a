package cuda

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The Layer's ops. With the layer kernels (Layer.kernels, set for every
// backend compiled from Source) each op queues its kernel (the launchers of
// layer_kernels.go) on device addresses; host slices an op takes (rows,
// weights) are uploaded into the pass's arena through staging first. The
// host path (kernels off: the fake device's tests, or an op the kernels
// refuse nothing of today) waits for the stream, downloads the tensors the
// op touches, runs nn.HostDevice's op (for attention, the same arithmetic
// over the device cache's layout) on the copies and uploads its outputs:
// exact (the reference's bits) and slow.

// hostRef is the reference the host path computes with: CPU arithmetic, so the
// results are nn.HostDevice's over the CPU backend bit for bit.
var hostRef = nn.HostDevice{}

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
	if l.pfWant != nil {
		l.learnNext(w)
	}
	if n <= 0 || l.matMulFused(w, y, x, n) {
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
// batched tensor-core kernels (gemm.go) where useGemm says they pay (a
// prefill chunk, an expert many tokens chose), the gemv kernels otherwise
// (decode: one pass over the weights per vector).
func (l *Layer) matMul(d *devMat, m mlxq.Matrix, yp, xp devptr, n int) error {
	if useGemm(m, n) {
		return l.b.gemm(d.w, d.s, d.b, xp, yp, m, n)
	}
	return l.b.gemv(d.kernel, d.w, d.s, d.b, xp, yp, m, n)
}

// RMSNorm implements nn.Device.
func (l *Layer) RMSNorm(y, x, w nn.Tensor, s nn.NormSpec) {
	if l.deferRowsNorm(y, x, w, s) {
		return // queued by the next op: with the RoPE of the same rows, or alone (layer_normfuse.go)
	}
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		xs, ys := s.XStride, s.YStride
		if xs == 0 {
			xs = s.Width
		}
		if ys == 0 {
			ys = s.Width
		}
		xp, yp := addr(x, int(span(s.Rows, xs, s.Width))), addr(y, int(span(s.Rows, ys, s.Width)))
		var wp devptr
		if s.Kind != nn.NormUnit {
			wp = addr(w, s.Width)
		}
		if l.kernel("RMSNorm", l.b.kRMSNorm(yp, xp, wp, s)) {
			return
		}
	}
	l.hostOp("RMSNorm", []nn.Tensor{y, x, w}, 1, func(h []nn.Tensor) { hostRef.RMSNorm(h[0], h[1], h[2], s) })
}

// RoPE implements nn.Device.
func (l *Layer) RoPE(x nn.Tensor, r *nn.RoPE, s nn.RoPESpec) {
	if l.ropeFused(x, r, s) {
		return
	}
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		hd := r.Half + len(r.InvFreq)
		if r.Interleaved {
			hd = 2 * len(r.InvFreq)
		}
		xp := addr(x, int(span(s.Rows, s.Stride, hd)))
		f, err := l.invFreq(r)
		if err != nil {
			l.fail("RoPE", err)
			return
		}
		if l.kernel("RoPE", l.b.kRoPE(xp, f, len(r.InvFreq), r.Half, r.Interleaved, s)) {
			return
		}
	}
	l.hostOp("RoPE", []nn.Tensor{x}, 1, func(h []nn.Tensor) { hostRef.RoPE(h[0], r, s) })
}

func vdim(d nn.AttnDims) int {
	if d.VDim > 0 {
		return d.VDim
	}
	return d.HeadDim
}

// Attention implements nn.Device: the cache makes room (a full cache grows
// by reallocation), the attention kernel runs over the cache and the chunk
// (the host path downloads the cache's rows), and then the chunk's keys and
// values are copied into their rows on the device.
func (l *Layer) Attention(kvs nn.KVState, O, Q, K, V nn.Tensor, T int, d nn.AttnDims) {
	kv := l.kvOf(kvs)
	ok := l.lock()
	defer l.unlock()
	defer func() { kv.n += T }()
	if T <= 0 {
		return
	}
	vd := vdim(d)
	op := addr(O, T*d.Heads*vd)
	qp := addr(Q, (T-1)*d.Heads*d.QStride+(d.Heads-1)*d.QStride+d.HeadDim)
	kp, vp := addr(K, T*kv.kw), addr(V, T*kv.vw)
	if !ok {
		return
	}
	if err := kv.reserve(kv.n + T); err != nil {
		l.fail("Attention", err)
		return
	}
	nsplit := l.b.attnSplitsFor(T, d, vd, gpukernels.AttnKeys(kv.n, T, kv.window))
	var part devptr
	if l.kernels && nsplit > 1 {
		var err error
		if part, err = l.scratch(4 * attnPartFloats(T, d.Heads, vd, nsplit)); err != nil {
			l.fail("Attention", err)
			return
		}
	}
	if !l.kernels || !l.kernel("Attention", l.b.kAttention(op, qp, kp, vp, kv.k, kv.v, part, kv.n, T, kv.window, kv.kw, kv.vw, nsplit, d)) {
		l.attendHost(kv, O, Q, K, V, T, d)
	}
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
		nn.AttendRows(nn.F32(h[0]), nn.F32(h[1]), nn.F32(h[2]), nn.F32(h[3]), kc, vc, pos, T, W, kv.kw, kv.vw, d)
	})
}

// DeltaNet implements nn.Device.
func (l *Layer) DeltaNet(st nn.TensorState, a *nn.DeltaNetArgs) {
	ts := l.tensorsOf(st)
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		C, T := a.ConvDim(), a.T
		if T <= 0 {
			return
		}
		scratch, err := l.scratch(4 * int64(T*C))
		if err != nil {
			l.fail("DeltaNet", err)
			return
		}
		p := &deltaNetPtrs{T: T, Nk: a.Nk, Nv: a.Nv, Dk: a.Dk, Dv: a.Dv, K: a.K, Eps: a.Eps,
			Window: addr(ts.t[0], (a.K-1)*C), State: addr(ts.t[1], a.Nv*a.Dk*a.Dv), Scratch: scratch,
			Y: addr(a.Y, T*a.Nv*a.Dv), Mixed: addr(a.Mixed, T*C), Z: addr(a.Z, T*a.Nv*a.Dv),
			B: addr(a.B, T*a.Nv), A: addr(a.A, T*a.Nv), Conv: addr(a.Conv, C*a.K),
			NegA: addr(a.NegA, a.Nv), DtBias: addr(a.DtBias, a.Nv), Norm: addr(a.Norm, a.Dv)}
		// One token's gated output norm may fuse into the output
		// projection that follows (layer_normfuse.go).
		W := a.Nv * a.Dv
		p.DeferOut = l.b.fuses(fuseGNorm) && T == 1 && W <= xsCols && a.Dv <= tgThreads
		p.InlineQKNorm = l.b.fuses(fuseQKNorm)
		if l.kernel("DeltaNet", l.b.kDeltaNet(p)) {
			if p.Out != nil {
				l.pend = pendingNorm{kind: pendGated, x: p.Y, r: p.Z, y: p.Y, w: p.Norm, dv: a.Dv,
					s: nn.NormSpec{Rows: 1, Width: W, Eps: a.Eps}, out: p.Out, outGroups: a.Nv}
			}
			return
		}
	}
	args := []nn.Tensor{a.Y, ts.t[0], ts.t[1], a.Mixed, a.Z, a.B, a.A, a.Conv, a.NegA, a.DtBias, a.Norm}
	l.hostOp("DeltaNet", args, 3, func(h []nn.Tensor) {
		c := *a
		c.Y, c.Mixed, c.Z, c.B, c.A, c.Conv, c.NegA, c.DtBias, c.Norm = h[0], h[3], h[4], h[5], h[6], h[7], h[8], h[9], h[10]
		nn.DeltaNetHost(nn.F32(h[1]), nn.F32(h[2]), &c)
	})
}

// Gather implements nn.Device (the host path uses Index.Host).
func (l *Layer) Gather(dst, src nn.Tensor, ix nn.Index, rows, srcStride int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if ip, isDev := ix.Dev.(devptr); l.kernels && isDev {
		n, top := len(ix.Host), int32(-1)
		for _, j := range ix.Host {
			if j < 0 || int(j) >= srcStride {
				panic(fmt.Sprintf("cuda: Gather: index %d outside a row of %d", j, srcStride))
			}
			top = max(top, j)
		}
		l.fail("Gather", l.b.kGather(addr(dst, rows*n), addr(src, int(span(rows, srcStride, int(top)+1))), ip, n, rows, srcStride))
		return
	}
	l.hostOp("Gather", []nn.Tensor{dst, src}, 1, func(h []nn.Tensor) { hostRef.Gather(h[0], h[1], ix, rows, srcStride) })
}

// GatherRows implements nn.Device: the gather_rows kernel over the rows
// staged to the device, or on the host path one device copy per run of
// consecutive rows.
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
	if l.kernels {
		ip, err := l.indexList(rows)
		if err != nil {
			l.fail("GatherRows", err)
			return
		}
		if l.kernel("GatherRows", l.b.kGatherRows(dp, sp, ip, len(rows), src.N/width, width)) {
			return
		}
	}
	l.copyRuns("GatherRows", rows, func(i, r, run int) error {
		return l.b.dev.dtod(dp+4*uint64(i*width), sp+4*uint64(r*width), 4*run*width)
	})
}

// ScatterRows implements nn.Device, as GatherRows.
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
	if l.kernels {
		ip, err := l.indexList(rows)
		if err != nil {
			l.fail("ScatterRows", err)
			return
		}
		if l.kernel("ScatterRows", l.b.kScatterRows(dp, sp, ip, len(rows), dst.N/width, width)) {
			return
		}
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

// GLU implements nn.Device.
func (l *Layer) GLU(act nn.Activation, y, gate, up nn.Tensor, n int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		if l.kernel("GLU", l.b.kGLU(act, addr(y, n), addr(gate, n), addr(up, n), n)) {
			return
		}
	}
	l.hostOp("GLU", []nn.Tensor{y, gate, up}, 1, func(h []nn.Tensor) { hostRef.GLU(act, h[0], h[1], h[2], n) })
}

// SigmoidMul implements nn.Device.
func (l *Layer) SigmoidMul(o, g nn.Tensor, rows, width, oStride, gStride int) {
	if l.deferSigmoidMul(o, g, rows, width, oStride, gStride) {
		return // queued by the next op: with the product that reads o, or alone (layer_normfuse.go)
	}
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		l.fail("SigmoidMul", l.b.kSigmoidMul(addr(o, int(span(rows, oStride, width))), addr(g, int(span(rows, gStride, width))),
			rows, width, oStride, gStride))
		return
	}
	l.hostOp("SigmoidMul", []nn.Tensor{o, g}, 1, func(h []nn.Tensor) { hostRef.SigmoidMul(h[0], h[1], rows, width, oStride, gStride) })
}

// Add implements nn.Device.
func (l *Layer) Add(x, y nn.Tensor, n int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		if l.kernel("Add", l.b.kAdd(addr(x, n), addr(y, n), n)) {
			return
		}
	}
	l.hostOp("Add", []nn.Tensor{x, y}, 1, func(h []nn.Tensor) { hostRef.Add(h[0], h[1], n) })
}

// AddGated implements nn.Device.
func (l *Layer) AddGated(out, x, g nn.Tensor, rows, width int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		if l.kernel("AddGated", l.b.kAddGated(addr(out, rows*width), addr(x, rows*width), addr(g, rows), rows, width)) {
			return
		}
	}
	l.hostOp("AddGated", []nn.Tensor{out, x, g}, 1, func(h []nn.Tensor) { hostRef.AddGated(h[0], h[1], h[2], rows, width) })
}

// Scale implements nn.Device.
func (l *Layer) Scale(x nn.Tensor, a float32, n int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		if l.kernel("Scale", l.b.kScale(addr(x, n), a, n)) {
			return
		}
	}
	l.hostOp("Scale", []nn.Tensor{x}, 1, func(h []nn.Tensor) { hostRef.Scale(h[0], a, n) })
}

// Softcap implements nn.Device.
func (l *Layer) Softcap(x nn.Tensor, cap float32, n int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		if l.kernel("Softcap", l.b.kSoftcap(addr(x, n), cap, n)) {
			return
		}
	}
	l.hostOp("Softcap", []nn.Tensor{x}, 1, func(h []nn.Tensor) { hostRef.Softcap(h[0], cap, n) })
}

// Route implements nn.Device: a wait.
func (l *Layer) Route(r nn.Routing, logits nn.Tensor, T, E int, norm bool) error {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return l.err
	}
	if l.kernels && l.routeKernel(r, logits, T, E, norm) {
		return l.err
	}
	l.hostOp("Route", []nn.Tensor{logits}, 0, func(h []nn.Tensor) {
		nn.RouteSoftmaxTopK(r, nn.F32(h[0])[:T*E], T, E, norm)
	})
	return l.err
}

// Combine implements nn.Device.
func (l *Layer) Combine(out, res nn.Tensor, wts []float32, T, k, width int) {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return
	}
	if l.kernels {
		if T <= 0 || width <= 0 {
			return
		}
		wp, err := l.scratch(4 * int64(T*k))
		if err == nil {
			err = l.upload(wp, f32b(wts[:T*k]), false)
		}
		if err != nil {
			l.fail("Combine", err)
			return
		}
		if l.kernel("Combine", l.b.kCombine(addr(out, T*width), addr(res, T*k*width), wp, T, k, width)) {
			return
		}
	}
	l.hostOp("Combine", []nn.Tensor{out, res}, 1, func(h []nn.Tensor) { hostRef.Combine(h[0], h[1], wts, T, k, width) })
}

// scratch returns n bytes of the pass's arena (not zeroed); lock held.
func (l *Layer) scratch(n int64) (devptr, error) {
	b, off, err := l.temp.take(l, n)
	if err != nil {
		return 0, err
	}
	return b.p + uint64(off), nil
}

// indexList uploads rows as int32 into the pass's arena (through staging,
// so the caller may reuse rows at once), or with mappedUploads leaves a
// short list in staging for its kernel to read there.
func (l *Layer) indexList(rows []int) (devptr, error) {
	ix := make([]int32, len(rows))
	for i, r := range rows {
		ix[i] = int32(r)
	}
	// Read in place by its kernel (mappedUploadsEnv): short lists only, as
	// each of the kernel's threads reads its row's index over the bus.
	if l.b.mappedUploads && len(rows) > 0 && len(rows) <= mappedRowsMax {
		h, d, err := l.stagedAt(4 * len(ix))
		if err != nil {
			return 0, err
		}
		copy(h, i32b(ix))
		return d, nil
	}
	p, err := l.scratch(4 * int64(len(ix)))
	if err != nil {
		return 0, err
	}
	return p, l.upload(p, i32b(ix), false)
}

// invFreq returns r's inverse frequencies on the device, uploaded on first
// use (a graph's RoPE does not change).
func (l *Layer) invFreq(r *nn.RoPE) (devptr, error) {
	if p, ok := l.ropes[r]; ok {
		return p, nil
	}
	p, err := l.devAlloc(4*int64(len(r.InvFreq)), "RoPE frequencies")
	if err != nil {
		return 0, err
	}
	if err := l.upload(p, f32b(r.InvFreq), false); err != nil {
		l.devFree(p)
		return 0, err
	}
	l.ropes[r] = p
	return p, nil
}

// routeKernel runs route_topk and brings the choice back (a wait); a NaN
// in the logits (sel -1) is an error, never a wrong expert. It reports
// false when the kernel refuses the shape (the host path routes).
func (l *Layer) routeKernel(r nn.Routing, logits nn.Tensor, T, E int, norm bool) bool {
	k := r.K
	if T <= 0 {
		return true
	}
	lp := addr(logits, T*E)
	sp, err := l.scratch(4 * int64(T*k))
	if err != nil {
		l.fail("Route", err)
		return true
	}
	wp, err := l.scratch(4 * int64(T*k))
	if err != nil {
		l.fail("Route", err)
		return true
	}
	if !l.kernel("Route", l.b.kRouteTopK(sp, wp, lp, T, E, k, norm)) {
		return false
	}
	if l.err != nil {
		return true
	}
	sel := make([]int32, T*k)
	if err := l.download(i32b(sel), sp); err != nil {
		l.fail("Route", err)
		return true
	}
	if err := l.download(f32b(r.Wts[:T*k]), wp); err != nil {
		l.fail("Route", err)
		return true
	}
	for i, e := range sel {
		if e < 0 || int(e) >= E {
			l.fail("Route", fmt.Errorf("cuda: token %d's router logits hold a NaN (expert %d of %d chosen)", i/k, e, E))
			return true
		}
		r.Sel[i] = int(e)
	}
	return true
}

// kernel takes a launcher's result: nil, or a device error (kept: the op is
// done either way), or the launcher refusing the shape before it queued
// anything (a head dim, a count past the kernel's limits): false, and the
// caller runs the op on the host path instead.
func (l *Layer) kernel(op string, err error) bool {
	if err == nil {
		return true
	}
	var dev *Error
	if errors.As(err, &dev) {
		l.fail(op, err)
		return true
	}
	if !l.refused[op] {
		l.refused[op] = true
		slog.Warn("cuda: a layer kernel refused a shape; the op runs on the host (slow)", "op", op, "why", err)
	}
	return false
}
