package cuda

import (
	"fmt"
	"slices"
	"strings"

	"github.com/qpack-go/qpack/runtime/nn"
)

// The residual norm fused into the products that read it
// (gemv_q4_set_norm, gemv_q8_set_norm: kernels/20_gemv.cu), and the
// DeltaNet's gated output norm into its output projection
// (gemv_q4_set_gnorm, gemv_q8_set_gnorm: a decode step's deltanet_out is
// deferred the same way, by DeltaNet). A decode
// step's layer starts with the residual add and norm of what the layer
// before added (nn.AddRMSNorm) and the products of that norm (the
// attention's q, k, v or the DeltaNet's input projections: nn.MatMuls),
// and its MoE starts the same way (the post-mixer norm, then the router and
// the shared expert's gate); each add and norm was a launch of its own
// (add_rms_norm_rows, two a layer at ~2 us of kernel and a launch's gap
// each). The Layer defers a one-row AddRMSNorm: the next op of the Layer
// either is a 4- or 8-bit gemv product of its output, which then runs as
// the fused kernel (the norm's bits, then the products' bits: every group
// forms the norm in its staged x), or finds the norm pending and queues
// add_rms_norm_rows first (lock). Flush leaves it pending, so a layer's
// closing norm fuses into the next layer's first products. The fused
// launch is held back in turn until the next op: when that is the MoE's
// routing on the device (RouteExperts) of the launch's first product (the
// router's logits, one token), the launch's last group makes the choice
// too (route_topk's arithmetic), and the layer saves that launch as well;
// any other op queues the fused launch first.
// Each fusion is switched by QPACK_CUDA_FUSE (fuseSet; A/B runs).

// fuseEnv picks the decode fusions (parseFuse): "all", "none", or names
// joined by '+' ("rope+kv"); unset, fuseDefault.
const fuseEnv = "QPACK_CUDA_FUSE"

// fuseSet is the set of decode fusions a Layer makes.
type fuseSet uint8

const (
	fuseNorm   fuseSet = 1 << iota // a one-row AddRMSNorm into the gemv products that read it
	fuseRoute                      // with fuseNorm: the router's choice by that launch's last group
	fuseGNorm                      // the DeltaNet's gated output norm into its output projection
	fuseQKNorm                     // the DeltaNet's q/k norms inside the one-token recurrence
	fuseRoPE                       // an attention q or k norm with its RoPE (rms_norm_rope)
	fuseKV                         // the keys and values into the cache in one launch
	fuseSigMul                     // the attention output gate into the output projection
	fuseAll    = fuseNorm | fuseRoute | fuseGNorm | fuseQKNorm | fuseRoPE | fuseKV | fuseSigMul
	// fuseDefault: the three that add no work to a launch's groups
	// (qknorm, rope, kv: 12 launches a decode token fewer at the 35B's
	// dims). On the H200 (fourteenth session, bench/gpu/results/session14-h200,
	// 35b dims, 8 layers) decode ran 1,448 tok/s with no fusion, 1,426
	// with qknorm+rope+kv, 1,411 with those and norm+route, 1,312 with
	// those and gnorm, and 1,200 with all (32,768 logits; at 248,320:
	// 1,250, 1,220, 1,144, 1,145, 1,013): within the spread for these
	// three, so none was the default. On H100s in the twenty-first session
	// (bench/gpu/results/session21-h100) qknorm+rope+kv won every one of
	// eight interleaved rounds, +0.8% and +1.8% over none on two machines,
	// and with two layers a graph (record.go) +3.5%. In norm, route, gnorm
	// and sigmul every group of a wide product forms the whole norm (or
	// gate) of its input again; a launch boundary inside a graph costs
	// about 0.74 us there (BenchmarkPersistentPhasesGPU), less than what
	// such a fused kernel's longer critical path gives back. Every fusion
	// gives the unfused launches' bits (TestNormFuseGPU,
	// TestNormFuseModelsGPU).
	fuseDefault = fuseQKNorm | fuseRoPE | fuseKV
)

var fuseNames = []struct {
	name string
	f    fuseSet
}{{"norm", fuseNorm}, {"route", fuseRoute}, {"gnorm", fuseGNorm}, {"qknorm", fuseQKNorm}, {"rope", fuseRoPE}, {"kv", fuseKV}, {"sigmul", fuseSigMul}}

// parseFuse reads QPACK_CUDA_FUSE's value.
func parseFuse(v string) (fuseSet, error) {
	switch v {
	case "":
		return fuseDefault, nil
	case "all":
		return fuseAll, nil
	case "none":
		return 0, nil
	}
	var f fuseSet
	for _, n := range strings.Split(v, "+") {
		i := slices.IndexFunc(fuseNames, func(e struct {
			name string
			f    fuseSet
		}) bool {
			return e.name == n
		})
		if i < 0 {
			return 0, fmt.Errorf("cuda: %s=%q: no fusion %q (all, none, or names joined by '+': norm, route, gnorm, qknorm, rope, kv, sigmul)", fuseEnv, v, n)
		}
		f |= fuseNames[i].f
	}
	return f, nil
}

// fuses reports whether the backend makes fusion f.
func (b *Backend) fuses(f fuseSet) bool { return b.fuse&f == f }

// sizeQGemvSetNorm is the size of QGemvSetNorm (kernels/20_gemv.cu).
const sizeQGemvSetNorm = 264

// normGated is QP_NORM_GATED: a fused launch's DeltaNet gated norm;
// normSigMul QP_NORM_SIGMUL: its attention output gate.
const (
	normGated  = 16
	normSigMul = 17
)

// xsCols is QP_XS_COLS: the longest vector the matvecs stage (the fused
// kernels' norm lives in the staged copy, so they take no longer one).
const xsCols = 8192

// pendKind is what a pendingNorm holds.
type pendKind int

const (
	pendNone   pendKind = iota
	pendAdd             // AddRMSNorm of one row: x += r, y = the norm
	pendRows            // an RMSNorm of s.Rows rows of x in place, awaiting their RoPE (w its weight)
	pendGated           // a DeltaNet's deltanet_out (one token): x = y its heads of dv, r the gate z, w the norm's weight
	pendSigMul          // an attention's output gate: SigmoidMul of rows of dv at x = y by the logits at r, rows gs apart
)

// pendingNorm is a deferred op (its kind) that the next op may fuse: out
// and outGroups are a gated norm's deltanet_out launch; rBytes the extent r
// covers (for pendSigMul; else the width's).
type pendingNorm struct {
	kind       pendKind
	x, r, y, w devptr
	s          nn.NormSpec
	dv, gs     int
	out        params
	outGroups  int
	rBytes     uint64
}

// heads reports whether p's vector is heads of dv (pendGated, pendSigMul).
func (p *pendingNorm) heads() bool { return p.kind == pendGated || p.kind == pendSigMul }

// deferNorm keeps AddRMSNorm(x, r, y, w, s) pending when it may fuse into
// the products that follow (one row, a width the kernels stage, the
// add_rms_norm_rows kernel's shape); it reports whether it did (else the
// caller queues the op as before).
func (l *Layer) deferNorm(x, r, y, w nn.Tensor, s nn.NormSpec) bool {
	if !l.b.fuses(fuseNorm) || s.Rows != 1 || s.Width < 1 || s.Width > xsCols || s.Kind < nn.NormWeight || s.Kind > nn.NormUnit {
		return false
	}
	ok := l.lock() // queues an earlier pending norm
	defer l.unlock()
	if !ok {
		return true // the error is kept; the op would be skipped
	}
	if !l.kernels {
		return false
	}
	p := pendingNorm{kind: pendAdd, x: addr(x, s.Width), r: addr(r, s.Width), y: addr(y, s.Width), s: s}
	if s.Kind != nn.NormUnit {
		p.w = addr(w, s.Width)
	}
	l.pend = p
	return true
}

// pendingSet is a fused launch (layer_normfuse.go) held back for one op.
type pendingSet struct {
	on   bool
	k    setKey
	s    gemvSet
	norm pendingNorm
	done devptr
}

// routeArgs is the choice a fused launch makes (QGemvSetNorm's sel, wts,
// rk, rnorm); k 0: none.
type routeArgs struct {
	sel, wts devptr
	k        int
	norm     bool
}

// lockKeep takes the backend's lock as lock does, but leaves a pending
// norm or launch pending (for the ops that may fuse it).
func (l *Layer) lockKeep() bool {
	l.b.mu.Lock()
	if l.closed || l.b.closed {
		l.closed = true
		l.fail("", errClosed)
	}
	return l.err == nil
}

// flushPending queues what is pending: the norm as add_rms_norm_rows, a
// fused launch as it is; lock held.
func (l *Layer) flushPending() {
	if l.pset.on {
		ps := l.pset
		l.pset = pendingSet{}
		if l.err == nil {
			if err := l.b.gemvSetNorm(ps.k, ps.s, ps.norm, ps.done, routeArgs{}); err != nil {
				l.fail("MatMuls", err)
			}
		}
	}
	if l.pend.kind == pendNone {
		return
	}
	p := l.pend
	l.pend = pendingNorm{}
	if l.err != nil {
		return
	}
	switch p.kind {
	case pendRows:
		if !l.kernel("RMSNorm", l.b.kRMSNorm(p.x, p.x, p.w, p.s)) {
			l.fail("RMSNorm", fmt.Errorf("cuda: rms_norm_rows refused a deferred norm of %d rows of %d", p.s.Rows, p.s.Width))
		}
	case pendGated:
		l.fail("DeltaNet", l.b.launch("deltanet_out", [3]int{p.outGroups, 1, 1}, tgThreads, p.out, sizeDNRec))
	case pendSigMul:
		l.fail("SigmoidMul", l.b.kSigmoidMul(p.x, p.r, p.s.Width/p.dv, p.dv, p.dv, p.gs))
	case pendAdd:
		if !l.kernel("AddRMSNorm", l.b.kAddRMSNorm(p.x, p.r, p.y, p.w, p.s)) {
			// deferNorm took only shapes the kernel takes.
			l.fail("AddRMSNorm", fmt.Errorf("cuda: add_rms_norm_rows refused a deferred norm of width %d", p.s.Width))
		}
	}
}

// fusesNorm reports whether the set launch s of products of xp (n vectors
// of cols) may take the pending op: xp is its output, one vector, and no
// product's output overlaps the op's x, y or r; lock held.
func (l *Layer) fusesNorm(xp devptr, n, cols int, s *gemvSet) bool {
	p := &l.pend
	if p.kind == pendNone || p.kind == pendRows || n != 1 || xp != p.y || cols != p.s.Width {
		return false
	}
	w := 4 * uint64(cols)
	rw := max(p.rBytes, w)
	for i := range s.n {
		y, yn := s.y[i], 4*uint64(s.rows[i])
		if y < p.x+w && p.x < y+yn || y < p.y+w && p.y < y+yn || y < p.r+rw && p.r < y+yn {
			return false
		}
	}
	return true
}

// normDoneWord returns the device word the fused kernels count their
// groups in (zeroed once; each launch leaves it zero); lock held.
func (l *Layer) normDoneWord() (devptr, error) {
	if l.normDone != 0 {
		return l.normDone, nil
	}
	p, err := l.devAlloc(4, "the fused norm's group counter")
	if err != nil {
		return 0, err
	}
	if err := l.b.dev.memset(p, 4); err != nil {
		return 0, err
	}
	l.normDone = p
	return p, nil
}

// launchSet queues a gemv_*_set launch of s over xp, as the fused kernel
// with the pending norm when it reads that norm's output, else after
// queuing the pending norm; lock held.
func (l *Layer) launchSet(k setKey, s gemvSet, xp devptr, n int) error {
	if !l.fusesNorm(xp, n, k.cols, &s) {
		l.flushPending()
		if l.err != nil {
			return nil // kept; the launch would be skipped
		}
		return l.b.gemvSet(k, s, xp, n)
	}
	return l.holdFused(k, s)
}

// holdFused makes the set s with the pending op the held-back fused launch
// (fusesNorm said it may); lock held.
func (l *Layer) holdFused(k setKey, s gemvSet) error {
	done, err := l.normDoneWord()
	if err != nil {
		return err
	}
	l.pset = pendingSet{on: true, k: k, s: s, norm: l.pend, done: done}
	l.pend = pendingNorm{}
	return nil
}

// routeFused reports whether the pending fused launch computes the router
// logits lp (its first product, one token of E) and may make the choice
// of k experts; lock held.
func (l *Layer) routeFused(lp devptr, T, E, k int) bool {
	ps := &l.pset
	return ps.on && l.b.fuses(fuseRoute) && ps.norm.kind == pendAdd && T == 1 && ps.s.n >= 1 && ps.s.y[0] == lp && ps.s.rows[0] == E && E <= routeMaxE && k >= 1 && k <= min(E, routeMaxK)
}

// matMulFused runs MatMul(w, y, x, n) as a fused set of one product when
// the pending norm may fuse into it, and reports whether it did (else the
// caller's lock queues the norm first).
func (l *Layer) matMulFused(w nn.Mat, y, x nn.Tensor, n int) bool {
	if n != 1 {
		return false
	}
	ok := l.lockKeep()
	defer l.unlock()
	if !ok || l.pend.kind == pendNone {
		return false
	}
	d, isDev := w.Dev.(*devMat)
	m := w.W
	if !isDev || (d.kernel != "gemv_q4" && d.kernel != "gemv_q8") || useGemm(m, n) {
		return false
	}
	var s gemvSet
	s.add(d, addr(y, m.Rows), m)
	xp := addr(x, m.Cols)
	if !l.fusesNorm(xp, n, m.Cols, &s) {
		return false
	}
	if err := l.holdFused(setKey{setKernel(d.kernel), m.Cols, m.GroupSize, int(m.Type)}, s); err != nil {
		l.fail("MatMul", err)
	}
	return true
}

// gemvSetNorm queues gemv_*_set_norm: the pending norm p, then the set s
// of products of its output (one vector), done the kernels' group counter;
// with r.k > 0 the choice of r.k experts from the first product's logits.
func (b *Backend) gemvSetNorm(k setKey, s gemvSet, p pendingNorm, done devptr, r routeArgs) error {
	q, blocks, err := b.gemvSetBlock(make(params, 0, sizeQGemvSet), k, s, p.x, 1) // the kernel reads x and r, never y
	if err != nil {
		return err
	}
	name, kind := k.kernel+"_norm", int(p.s.Kind)
	switch p.kind {
	case pendGated:
		name, kind = k.kernel+"_gnorm", normGated
	case pendSigMul:
		name, kind = k.kernel+"_sigmul", normSigMul
	}
	if p.s.Rows != 1 || p.s.Width != k.cols || k.cols > xsCols || p.heads() && (p.dv < 1 || k.cols%p.dv != 0 || r.k != 0) ||
		p.kind == pendGated && p.dv > tgThreads || p.kind == pendSigMul && p.gs < p.dv {
		return fmt.Errorf("cuda: kernel %s: a norm of %d rows of %d (heads of %d) for products of %d columns", name, p.s.Rows, p.s.Width, p.dv, k.cols)
	}
	if r.k != 0 && (r.k < 0 || r.k > min(s.rows[0], routeMaxK) || s.rows[0] > routeMaxE) {
		return fmt.Errorf("cuda: kernel %s: a choice of %d of %d experts", name, r.k, s.rows[0])
	}
	rn := 0
	if r.norm {
		rn = 1
	}
	q = q.ptr(p.r).ptr(p.w).ptr(p.y).ptr(done).f32(p.s.Eps).u32(kind).ptr(r.sel).ptr(r.wts).u32(r.k).u32(rn).u32(p.dv).u32(p.gs)
	return b.launch(name, [3]int{blocks, 1, 1}, tgThreads, q, sizeQGemvSetNorm)
}

// sizeNormRoPE is the size of NormRoPEParams (internal/gpukernels/20_rope.qk).
const sizeNormRoPE = 64

// normRoPEMaxWidth is QK_NR_MAXW: the longest row rms_norm_rope takes.
const normRoPEMaxWidth = 512

// deferRowsNorm keeps RMSNorm(y, x, w, s) pending when it is in place
// (y is x, the same strides) over rows rms_norm_rope takes, so that the
// RoPE of the same rows that follows (a head's q or k) fuses with it; it
// reports whether it did.
func (l *Layer) deferRowsNorm(y, x, w nn.Tensor, s nn.NormSpec) bool {
	xs, ys := s.XStride, s.YStride
	if xs == 0 {
		xs = s.Width
	}
	if ys == 0 {
		ys = s.Width
	}
	if !l.b.fuses(fuseRoPE) || s.Rows < 1 || s.Width < 1 || s.Width > normRoPEMaxWidth || xs != ys || xs < s.Width ||
		s.Kind < nn.NormWeight || s.Kind > nn.NormUnit {
		return false
	}
	ok := l.lock() // queues an earlier pending op
	defer l.unlock()
	if !ok {
		return true // the error is kept; the op would be skipped
	}
	n := int(span(s.Rows, xs, s.Width))
	xp, yp := addr(x, n), addr(y, n)
	if !l.kernels || xp != yp {
		return false
	}
	p := pendingNorm{kind: pendRows, x: xp, y: xp, s: s}
	p.s.XStride, p.s.YStride = xs, xs
	if s.Kind != nn.NormUnit {
		p.w = addr(w, s.Width)
	}
	l.pend = p
	return true
}

// ropeFused runs RoPE(x, r, s) with the pending norm of the same rows as
// rms_norm_rope, and reports whether it did (else the caller's lock queues
// the norm first).
func (l *Layer) ropeFused(x nn.Tensor, r *nn.RoPE, s nn.RoPESpec) bool {
	ok := l.lockKeep()
	defer l.unlock()
	p := l.pend
	if !ok || p.kind != pendRows || !l.kernels || s.Rows != p.s.Rows || s.Stride != p.s.XStride {
		return false
	}
	pairs := len(r.InvFreq)
	hd := r.Half + pairs
	if r.Interleaved {
		hd = 2 * pairs
	}
	if hd > p.s.Width || !r.Interleaved && r.Half < pairs || addr(x, int(span(s.Rows, s.Stride, hd))) != p.x {
		return false
	}
	f, err := l.invFreq(r)
	if err != nil {
		l.fail("RoPE", err)
		return true
	}
	if err := l.b.kNormRoPE(p.x, p.w, f, p.s, pairs, r.Half, r.Interleaved, s); err != nil {
		if l.kernel("RoPE", err) {
			l.pend = pendingNorm{}
			return true // a device error, kept
		}
		return false // refused: the norm, then the RoPE, as before
	}
	l.pend = pendingNorm{}
	return true
}

// kNormRoPE queues rms_norm_rope: the norm n of rows of x in place (rows
// at n.XStride), then their rotation (kRoPE's parameters).
func (b *Backend) kNormRoPE(x, w, invFreq devptr, n nn.NormSpec, pairs, half int, interleaved bool, s nn.RoPESpec) error {
	if s.Rows == 0 {
		return nil
	}
	hd := 2 * pairs
	if !interleaved {
		hd = half + pairs
	}
	lastPos := int64(s.Pos0) + int64((s.Rows-1)/max(s.PerPos, 1))
	if n.Width < 1 || n.Width > normRoPEMaxWidth || hd > n.Width || pairs < 1 || s.PerPos < 1 || s.Pos0 < 0 ||
		n.XStride < n.Width || s.Stride != n.XStride || s.Rows != n.Rows || lastPos >= 1<<24 || (!interleaved && half < pairs) {
		return fmt.Errorf("cuda: kernel rms_norm_rope: norm %+v, rope %+v, %d pairs, half %d", n, s, pairs, half)
	}
	if err := checkExt("rms_norm_rope", int64(s.Rows), int64(s.Stride), span(s.Rows, s.Stride, n.Width), lastPos); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeNormRoPE)).ptr(x).ptr(w).ptr(invFreq).
		u32(s.Rows).u32(n.Width).u32(s.Stride).f32(n.Eps).u32(int(n.Kind)).
		u32(pairs).u32(half).u32(s.PerPos).u32(s.Pos0).u32(b2u(interleaved))
	return b.launch("rms_norm_rope", [3]int{s.Rows, 1, 1}, tgThreads, p, sizeNormRoPE)
}

// deferSigmoidMul keeps SigmoidMul(o, g, ...) pending when its rows are
// contiguous and fit the matvecs' staged vector, so that the output
// projection that reads o (an attention's, one token) may fuse it; it
// reports whether it did.
func (l *Layer) deferSigmoidMul(o, g nn.Tensor, rows, width, oStride, gStride int) bool {
	W := rows * width
	if !l.b.fuses(fuseSigMul) || rows < 1 || width < 1 || oStride != width || gStride < width || W > xsCols {
		return false
	}
	ok := l.lock() // queues an earlier pending op
	defer l.unlock()
	if !ok {
		return true // the error is kept; the op would be skipped
	}
	if !l.kernels {
		return false
	}
	gn := int(span(rows, gStride, width))
	op := addr(o, W)
	l.pend = pendingNorm{kind: pendSigMul, x: op, y: op, r: addr(g, gn), dv: width, gs: gStride,
		rBytes: 4 * uint64(gn), s: nn.NormSpec{Rows: 1, Width: W}}
	return true
}
