package devicetest

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// Strict is a Device that runs nn.HostDevice's arithmetic (so its results
// are bit-identical to the host device's) while checking the contract from
// the graphs' side. A violation panics with what was wrong:
//
//   - Its tensors are its own Buffer type: a graph that reads or writes
//     them as host memory (nn.F32), or hands them to another device, or
//     another device's tensors to it, panics.
//   - Operations are queued and run only at Read, Route, Flush and
//     EndPass, in order: a graph that reads a result before a wait sees
//     stale data (and differs from the host device).
//   - Write copies src when it is called (the contract lets the caller
//     reuse it); the host slices an op takes (GatherRows' and
//     ScatterRows' rows, Combine's weights) must not change before the op
//     runs, Constant's vector and Indices' indices never.
//   - Expert copies the matrices' bytes when it is called; its Mats are
//     valid until the next EndPass only.
//   - EndPass fills every Temp with NaN and retires it (a later use
//     panics), Free retires an Alloc; Route leaves the logits NaN.
//   - Every spec is checked against its tensors' lengths, indices against
//     their ranges, matrices and states against the device that made them.
//   - Reset, Clone and Restore of its states need an empty queue (they are
//     for between passes); two goroutines in the device at once panic.
//
// Fail makes the next wait return an error (the contract's sticky error,
// cleared by EndPass), for tests of how graphs propagate device errors.
type Strict struct {
	host   nn.HostDevice
	queue  []func()
	temps  []*sbuf
	consts []heldConst
	pass   int
	err    error
	busy   atomic.Int32

	lazyExperts bool // a broken device for the suite's own tests: Expert keeps w's bytes

	// Ops, Waits and Passes count queued operations, waits and EndPasses;
	// Selections the SelectTops that read their vector.
	Ops, Waits, Passes, Selections int
}

// NewStrict returns a strict device over be's products (nil: CPU).
func NewStrict(be nn.Backend) *Strict { return &Strict{host: nn.HostDevice{Backend: be}} }

// Fail makes every wait return err until the next EndPass (which returns
// it too), as a device error would.
func (d *Strict) Fail(err error) { d.err = err }

// sbuf is Strict's Buffer.
type sbuf struct {
	dev  *Strict
	f    []float32
	what string // "temp", "alloc", "constant", "state"
	dead string // why it may no longer be used
}

func (b *sbuf) Len() int { return len(b.f) }

// smat is Strict's handle of a Mat.
type smat struct {
	dev    *Strict
	expert bool
	pass   int // an expert's pass
}

// sidx is Strict's handle of an Index.
type sidx struct{ dev *Strict }

type heldConst struct {
	v, copy []float32
}

func (d *Strict) enter() {
	if !d.busy.CompareAndSwap(0, 1) {
		panic("devicetest: Strict used from two goroutines at once")
	}
}

func (d *Strict) exit() { d.busy.Store(0) }

func (d *Strict) newBuf(n int, what string) nn.Tensor {
	if n < 0 {
		panic(fmt.Sprintf("devicetest: Strict: %s of %d floats", what, n))
	}
	b := &sbuf{dev: d, f: make([]float32, n), what: what}
	if what == "temp" {
		d.temps = append(d.temps, b)
	}
	return nn.Tensor{Buf: b, N: n}
}

// h checks t (a tensor of d, live, in range, at least need floats) and
// returns its host view.
func (d *Strict) h(op string, t nn.Tensor, need int) nn.Tensor {
	if t.Buf == nil {
		if need > 0 {
			panic(fmt.Sprintf("devicetest: Strict.%s: an empty tensor where %d floats are needed", op, need))
		}
		return nn.Tensor{}
	}
	b, ok := t.Buf.(*sbuf)
	if !ok {
		panic(fmt.Sprintf("devicetest: Strict.%s: a %T tensor (another device's) used with the strict device", op, t.Buf))
	}
	if b.dev != d {
		panic(fmt.Sprintf("devicetest: Strict.%s: a tensor of another Strict device", op))
	}
	if b.dead != "" {
		panic(fmt.Sprintf("devicetest: Strict.%s: a %s used after %s", op, b.what, b.dead))
	}
	if t.Off < 0 || t.N < 0 || t.Off+t.N > len(b.f) {
		panic(fmt.Sprintf("devicetest: Strict.%s: tensor [%d, %d) of a buffer of %d floats", op, t.Off, t.Off+t.N, len(b.f)))
	}
	if need > t.N {
		panic(fmt.Sprintf("devicetest: Strict.%s: a tensor of %d floats where %d are needed", op, t.N, need))
	}
	h := nn.HostTensor(b.f)
	h.Off, h.N = t.Off, t.N
	return h
}

// m checks a Mat of d.
func (d *Strict) m(op string, w nn.Mat) {
	s, ok := w.Dev.(*smat)
	if !ok || s.dev != d {
		panic(fmt.Sprintf("devicetest: Strict.%s: a Mat not made by this device (Dev %T)", op, w.Dev))
	}
	if s.expert && s.pass != d.pass {
		panic(fmt.Sprintf("devicetest: Strict.%s: an expert's Mat used after the EndPass that ended it", op))
	}
}

func (d *Strict) push(f func()) {
	d.Ops++
	d.queue = append(d.queue, f)
}

// run runs the queue (a wait).
func (d *Strict) run() {
	q := d.queue
	d.queue = nil
	for _, f := range q {
		f()
	}
}

// held returns a check that s has not changed since the call.
func held[T comparable](op, what string, s []T) func() {
	c := slices.Clone(s)
	return func() {
		if !slices.Equal(c, s) {
			panic(fmt.Sprintf("devicetest: Strict.%s: the host slice %s changed between the call and the op's run", op, what))
		}
	}
}

func need(rows, stride, width int) int {
	if rows <= 0 {
		return 0
	}
	return (rows-1)*stride + width
}

func positive(op string, vals ...int) {
	for _, v := range vals {
		if v < 0 {
			panic(fmt.Sprintf("devicetest: Strict.%s: a negative extent %d", op, v))
		}
	}
}

// normWeightLen is the length of the weight a norm of kind s.Kind reads
// (none for NormUnit); op names the caller in the panic for an unknown kind.
func normWeightLen(op string, s nn.NormSpec) int {
	switch s.Kind {
	case nn.NormUnit:
		return 0
	case nn.NormWeight, nn.NormOffset:
		return s.Width
	}
	panic(fmt.Sprintf("devicetest: Strict.%s: unknown NormKind %d", op, s.Kind))
}

// Name implements nn.Device.
func (d *Strict) Name() string { return "strict " + d.host.Name() }

// Alloc implements nn.Device.
func (d *Strict) Alloc(n int) (nn.Tensor, error) {
	d.enter()
	defer d.exit()
	return d.newBuf(n, "alloc"), nil
}

// Free implements nn.Device.
func (d *Strict) Free(t nn.Tensor) {
	d.enter()
	defer d.exit()
	d.h("Free", t, 0)
	b := t.Buf.(*sbuf)
	if b.what != "alloc" || t.Off != 0 || t.N != len(b.f) {
		panic(fmt.Sprintf("devicetest: Strict.Free of a %s view [%d, %d) (want a whole Alloc)", b.what, t.Off, t.Off+t.N))
	}
	b.dead = "Free" // ops queued before hold their own views
}

// Temp implements nn.Device.
func (d *Strict) Temp(n int) nn.Tensor {
	d.enter()
	defer d.exit()
	return d.newBuf(n, "temp")
}

// EndPass implements nn.Device.
func (d *Strict) EndPass() error {
	d.enter()
	defer d.exit()
	d.run()
	d.Waits++
	d.Passes++
	for _, b := range d.temps {
		for i := range b.f {
			b.f[i] = float32(math.NaN())
		}
		b.dead = "the EndPass that released it"
	}
	d.temps = nil
	for _, c := range d.consts {
		if !slices.Equal(c.v, c.copy) {
			panic("devicetest: Strict: a vector given to Constant changed")
		}
	}
	d.pass++
	err := d.err
	d.err = nil
	return err
}

// Flush implements nn.Device.
func (d *Strict) Flush() error {
	d.enter()
	defer d.exit()
	d.run()
	d.Waits++
	return d.err
}

// Write implements nn.Device.
func (d *Strict) Write(dst nn.Tensor, src []float32) {
	d.enter()
	defer d.exit()
	D := d.h("Write", dst, len(src))
	c := slices.Clone(src)
	d.push(func() { d.host.Write(D, c) })
}

// Read implements nn.Device: dst must hold src.
func (d *Strict) Read(dst []float32, src nn.Tensor) error {
	d.enter()
	defer d.exit()
	S := d.h("Read", src, 0)
	if len(dst) < src.N {
		panic(fmt.Sprintf("devicetest: Strict.Read of %d floats into %d", src.N, len(dst)))
	}
	d.run()
	d.Waits++
	if d.err != nil {
		return d.err
	}
	return d.host.Read(dst, S)
}

// SelectTop implements nn.TopSelector with nn.SelectTopRef: a wait, as
// Read.
func (d *Strict) SelectTop(c *nn.TopLogits, x nn.Tensor, n, k int) (bool, error) {
	d.enter()
	defer d.exit()
	c.Reset()
	X := d.h("SelectTop", x, n)
	d.run()
	d.Waits++
	if d.err != nil {
		return false, d.err
	}
	v := make([]float32, n)
	if err := d.host.Read(v, X); err != nil {
		return false, err
	}
	d.Selections++
	return nn.SelectTopRef(c, v, k, 0), nil
}

// SelectsTop implements nn.TopSelector: always.
func (d *Strict) SelectsTop(n, k int) bool { return true }

// Copy implements nn.Device.
func (d *Strict) Copy(dst, src nn.Tensor) {
	d.enter()
	defer d.exit()
	S := d.h("Copy", src, 0)
	D := d.h("Copy", dst, src.N)
	d.push(func() { d.host.Copy(D, S) })
}

// Resident implements nn.Device.
func (d *Strict) Resident(m mlxq.Matrix) (nn.Mat, error) {
	d.enter()
	defer d.exit()
	return nn.Mat{W: m, Dev: &smat{dev: d}}, nil
}

// Constant implements nn.Device: the vector is copied (and checked
// unchanged at every EndPass).
func (d *Strict) Constant(v []float32) (nn.Tensor, error) {
	d.enter()
	defer d.exit()
	t := d.newBuf(len(v), "constant")
	copy(t.Buf.(*sbuf).f, v)
	d.consts = append(d.consts, heldConst{v: v, copy: slices.Clone(v)})
	return t, nil
}

// Indices implements nn.Device.
func (d *Strict) Indices(ix []int32) (nn.Index, error) {
	d.enter()
	defer d.exit()
	return nn.Index{Host: slices.Clone(ix), Dev: &sidx{dev: d}}, nil
}

// Expert implements nn.Device: the matrices' bytes are copied now, so the
// source may reuse them at once.
func (d *Strict) Expert(_ nn.ExpertSource, w *nn.ExpertWeights) (nn.ExpertMats, error) {
	d.enter()
	defer d.exit()
	cp := func(m mlxq.Matrix) nn.Mat {
		if !d.lazyExperts {
			m.Weight, m.Scales, m.Biases = slices.Clone(m.Weight), slices.Clone(m.Scales), slices.Clone(m.Biases)
		}
		return nn.Mat{W: m, Dev: &smat{dev: d, expert: true, pass: d.pass}}
	}
	return nn.ExpertMats{Gate: cp(w.Gate), Up: cp(w.Up), Down: cp(w.Down)}, nil
}

// CachedExpert implements nn.Device: Strict keeps no cache.
func (d *Strict) CachedExpert(nn.ExpertSource, int, int) (nn.ExpertMats, bool) {
	return nn.ExpertMats{}, false
}

// MatMul implements nn.Device.
func (d *Strict) MatMul(w nn.Mat, y, x nn.Tensor, n int) {
	d.enter()
	defer d.exit()
	d.m("MatMul", w)
	positive("MatMul", n)
	Y := d.h("MatMul", y, n*w.W.Rows)
	X := d.h("MatMul", x, n*w.W.Cols)
	W := w.W
	d.push(func() { d.host.MatMul(nn.Mat{W: W}, Y, X, n) })
}

// RMSNorm implements nn.Device.
func (d *Strict) RMSNorm(y, x, w nn.Tensor, s nn.NormSpec) {
	d.enter()
	defer d.exit()
	positive("RMSNorm", s.Rows, s.Width, s.XStride, s.YStride)
	xs, ys := s.XStride, s.YStride
	if xs == 0 {
		xs = s.Width
	}
	if ys == 0 {
		ys = s.Width
	}
	if xs < s.Width || ys < s.Width {
		panic(fmt.Sprintf("devicetest: Strict.RMSNorm: strides %d, %d below the width %d", xs, ys, s.Width))
	}
	X := d.h("RMSNorm", x, need(s.Rows, xs, s.Width))
	Y := d.h("RMSNorm", y, need(s.Rows, ys, s.Width))
	W := d.h("RMSNorm", w, normWeightLen("RMSNorm", s))
	d.push(func() { d.host.RMSNorm(Y, X, W, s) })
}

// RoPE implements nn.Device.
func (d *Strict) RoPE(x nn.Tensor, r *nn.RoPE, s nn.RoPESpec) {
	d.enter()
	defer d.exit()
	positive("RoPE", s.Rows, s.Stride, s.Pos0)
	if s.PerPos <= 0 {
		panic(fmt.Sprintf("devicetest: Strict.RoPE: PerPos %d", s.PerPos))
	}
	hd := 2 * r.Half
	if r.Interleaved {
		hd = 2 * len(r.InvFreq)
	} else if len(r.InvFreq) > r.Half {
		panic(fmt.Sprintf("devicetest: Strict.RoPE: %d pairs with Half %d", len(r.InvFreq), r.Half))
	}
	if s.Stride < hd {
		panic(fmt.Sprintf("devicetest: Strict.RoPE: stride %d below the rotated width %d", s.Stride, hd))
	}
	X := d.h("RoPE", x, need(s.Rows, s.Stride, hd))
	d.push(func() { d.host.RoPE(X, r, s) })
}

// skv is Strict's KV cache: the host cache, and the length the queued ops
// will have given it.
type skv struct {
	dev            *Strict
	c              *nn.KVCache
	n              int
	kw, vw, window int
}

func (k *skv) Len() int { return k.n }

func (k *skv) idle(op string) {
	if len(k.dev.queue) > 0 {
		panic(fmt.Sprintf("devicetest: Strict: KV %s with %d ops queued (states change between passes)", op, len(k.dev.queue)))
	}
}

func (k *skv) Reset() {
	k.idle("Reset")
	k.c.Reset()
	k.n = 0
}

func (k *skv) Clone() nn.LayerState {
	k.idle("Clone")
	c := *k
	c.c = k.c.Clone().(*nn.KVCache)
	return &c
}

func (k *skv) Restore(from nn.LayerState) bool {
	k.idle("Restore")
	f, ok := from.(*skv)
	if !ok || f.kw != k.kw || f.vw != k.vw || f.window != k.window {
		return false
	}
	if !k.c.Restore(f.c) {
		return false
	}
	k.n = f.n
	return true
}

func (k *skv) Bytes() int64 { return k.c.Bytes() }

// NewKV implements nn.Device.
func (d *Strict) NewKV(kWidth, vWidth, window int) (nn.KVState, error) {
	d.enter()
	defer d.exit()
	positive("NewKV", kWidth, vWidth, window)
	return &skv{dev: d, c: nn.NewKVCache(kWidth, vWidth, window), kw: kWidth, vw: vWidth, window: window}, nil
}

// sts is Strict's TensorState.
type sts struct {
	dev *Strict
	t   []*sbuf
}

func (s *sts) Tensor(i int) nn.Tensor { return nn.Tensor{Buf: s.t[i], N: len(s.t[i].f)} }

func (s *sts) idle(op string) {
	if len(s.dev.queue) > 0 {
		panic(fmt.Sprintf("devicetest: Strict: TensorState %s with %d ops queued (states change between passes)", op, len(s.dev.queue)))
	}
}

func (s *sts) Reset() {
	s.idle("Reset")
	for _, b := range s.t {
		clear(b.f)
	}
}

func (s *sts) Clone() nn.LayerState {
	s.idle("Clone")
	c := &sts{dev: s.dev, t: make([]*sbuf, len(s.t))}
	for i, b := range s.t {
		c.t[i] = &sbuf{dev: s.dev, f: slices.Clone(b.f), what: "state"}
	}
	return c
}

func (s *sts) Restore(from nn.LayerState) bool {
	s.idle("Restore")
	f, ok := from.(*sts)
	if !ok || len(f.t) != len(s.t) {
		return false
	}
	for i := range s.t {
		if len(f.t[i].f) != len(s.t[i].f) {
			return false
		}
	}
	for i := range s.t {
		copy(s.t[i].f, f.t[i].f)
	}
	return true
}

func (s *sts) Bytes() int64 {
	var n int64
	for _, b := range s.t {
		n += 4 * int64(len(b.f))
	}
	return n
}

// NewTensors implements nn.Device.
func (d *Strict) NewTensors(sizes ...int) (nn.TensorState, error) {
	d.enter()
	defer d.exit()
	s := &sts{dev: d}
	for _, n := range sizes {
		positive("NewTensors", n)
		s.t = append(s.t, &sbuf{dev: d, f: make([]float32, n), what: "state"})
	}
	return s, nil
}

// Attention implements nn.Device.
func (d *Strict) Attention(kv nn.KVState, O, Q, K, V nn.Tensor, T int, a nn.AttnDims) {
	d.enter()
	defer d.exit()
	k, ok := kv.(*skv)
	if !ok || k.dev != d {
		panic(fmt.Sprintf("devicetest: Strict.Attention: a %T KV state not made by this device", kv))
	}
	positive("Attention", T, a.Heads, a.KVHeads, a.HeadDim, a.QStride, a.VDim)
	vd := a.VDim
	if vd == 0 {
		vd = a.HeadDim
	}
	if a.KVHeads == 0 || a.Heads%a.KVHeads != 0 || a.QStride < a.HeadDim ||
		k.kw < a.KVHeads*a.HeadDim || k.vw < a.KVHeads*vd {
		panic(fmt.Sprintf("devicetest: Strict.Attention: dims %+v on a cache of widths %d, %d", a, k.kw, k.vw))
	}
	hO := d.h("Attention", O, T*a.Heads*vd)
	hQ := d.h("Attention", Q, T*a.Heads*a.QStride)
	hK := d.h("Attention", K, T*k.kw)
	hV := d.h("Attention", V, T*k.vw)
	k.n += T
	c := k.c
	d.push(func() { d.host.Attention(c, hO, hQ, hK, hV, T, a) })
}

// DeltaNet implements nn.Device.
func (d *Strict) DeltaNet(st nn.TensorState, a *nn.DeltaNetArgs) {
	d.enter()
	defer d.exit()
	s, ok := st.(*sts)
	if !ok || s.dev != d || len(s.t) < 2 {
		panic(fmt.Sprintf("devicetest: Strict.DeltaNet: a %T state not made by this device (or not two tensors)", st))
	}
	positive("DeltaNet", a.T, a.Nk, a.Nv, a.Dk, a.Dv, a.K)
	if a.Nk == 0 || a.K == 0 || a.Nv%a.Nk != 0 {
		panic(fmt.Sprintf("devicetest: Strict.DeltaNet: heads Nk %d Nv %d, K %d", a.Nk, a.Nv, a.K))
	}
	C, Vd := a.ConvDim(), a.Nv*a.Dv
	win := d.h("DeltaNet", s.Tensor(0), (a.K-1)*C)
	rec := d.h("DeltaNet", s.Tensor(1), a.Nv*a.Dk*a.Dv)
	b := *a // the graph may reuse *a once the call returns
	b.Y = d.h("DeltaNet", a.Y, a.T*Vd)
	b.Mixed = d.h("DeltaNet", a.Mixed, a.T*C)
	b.Z = d.h("DeltaNet", a.Z, a.T*Vd)
	b.B = d.h("DeltaNet", a.B, a.T*a.Nv)
	b.A = d.h("DeltaNet", a.A, a.T*a.Nv)
	b.Conv = d.h("DeltaNet", a.Conv, C*a.K)
	b.NegA = d.h("DeltaNet", a.NegA, a.Nv)
	b.DtBias = d.h("DeltaNet", a.DtBias, a.Nv)
	b.Norm = d.h("DeltaNet", a.Norm, a.Dv)
	d.push(func() { nn.DeltaNetHost(nn.F32(win)[:(a.K-1)*C], nn.F32(rec)[:a.Nv*a.Dk*a.Dv], &b) })
}

// Gather implements nn.Device.
func (d *Strict) Gather(dst, src nn.Tensor, ix nn.Index, rows, srcStride int) {
	d.enter()
	defer d.exit()
	if s, ok := ix.Dev.(*sidx); !ok || s.dev != d {
		panic(fmt.Sprintf("devicetest: Strict.Gather: an Index not made by this device (Dev %T)", ix.Dev))
	}
	positive("Gather", rows, srcStride)
	hi := 0
	for _, j := range ix.Host {
		if j < 0 {
			panic(fmt.Sprintf("devicetest: Strict.Gather: index %d", j))
		}
		hi = max(hi, int(j)+1)
	}
	D := d.h("Gather", dst, rows*len(ix.Host))
	S := d.h("Gather", src, need(rows, srcStride, hi))
	d.push(func() { d.host.Gather(D, S, ix, rows, srcStride) })
}

func rowsNeed(op string, rows []int) int {
	hi := 0
	for _, r := range rows {
		if r < 0 {
			panic(fmt.Sprintf("devicetest: Strict.%s: row %d", op, r))
		}
		hi = max(hi, r+1)
	}
	return hi
}

// GatherRows implements nn.Device.
func (d *Strict) GatherRows(dst, src nn.Tensor, rows []int, width int) {
	d.enter()
	defer d.exit()
	positive("GatherRows", width)
	D := d.h("GatherRows", dst, len(rows)*width)
	S := d.h("GatherRows", src, rowsNeed("GatherRows", rows)*width)
	same := held("GatherRows", "rows", rows)
	d.push(func() { same(); d.host.GatherRows(D, S, rows, width) })
}

// ScatterRows implements nn.Device.
func (d *Strict) ScatterRows(dst, src nn.Tensor, rows []int, width int) {
	d.enter()
	defer d.exit()
	positive("ScatterRows", width)
	D := d.h("ScatterRows", dst, rowsNeed("ScatterRows", rows)*width)
	S := d.h("ScatterRows", src, len(rows)*width)
	same := held("ScatterRows", "rows", rows)
	d.push(func() { same(); d.host.ScatterRows(D, S, rows, width) })
}

// GLU implements nn.Device.
func (d *Strict) GLU(act nn.Activation, y, gate, up nn.Tensor, n int) {
	d.enter()
	defer d.exit()
	positive("GLU", n)
	if act != nn.SiLUGate && act != nn.GELUTanhGate {
		panic(fmt.Sprintf("devicetest: Strict.GLU: unknown activation %d", act))
	}
	Y, G, U := d.h("GLU", y, n), d.h("GLU", gate, n), d.h("GLU", up, n)
	d.push(func() { d.host.GLU(act, Y, G, U, n) })
}

// SigmoidMul implements nn.Device.
func (d *Strict) SigmoidMul(o, g nn.Tensor, rows, width, oStride, gStride int) {
	d.enter()
	defer d.exit()
	positive("SigmoidMul", rows, width, oStride, gStride)
	O := d.h("SigmoidMul", o, need(rows, oStride, width))
	G := d.h("SigmoidMul", g, need(rows, gStride, width))
	d.push(func() { d.host.SigmoidMul(O, G, rows, width, oStride, gStride) })
}

// Add implements nn.Device.
func (d *Strict) Add(x, y nn.Tensor, n int) {
	d.enter()
	defer d.exit()
	positive("Add", n)
	X, Y := d.h("Add", x, n), d.h("Add", y, n)
	d.push(func() { d.host.Add(X, Y, n) })
}

// AddGated implements nn.Device.
func (d *Strict) AddGated(out, x, g nn.Tensor, rows, width int) {
	d.enter()
	defer d.exit()
	positive("AddGated", rows, width)
	O, X, G := d.h("AddGated", out, rows*width), d.h("AddGated", x, rows*width), d.h("AddGated", g, rows)
	d.push(func() { d.host.AddGated(O, X, G, rows, width) })
}

// Scale implements nn.Device.
func (d *Strict) Scale(x nn.Tensor, a float32, n int) {
	d.enter()
	defer d.exit()
	positive("Scale", n)
	X := d.h("Scale", x, n)
	d.push(func() { d.host.Scale(X, a, n) })
}

// Softcap implements nn.Device.
func (d *Strict) Softcap(x nn.Tensor, cap float32, n int) {
	d.enter()
	defer d.exit()
	positive("Softcap", n)
	if !(cap > 0) {
		panic(fmt.Sprintf("devicetest: Strict.Softcap: cap %g", cap))
	}
	X := d.h("Softcap", x, n)
	d.push(func() { d.host.Softcap(X, cap, n) })
}

// Route implements nn.Device: a wait; the logits are NaN afterwards.
func (d *Strict) Route(r nn.Routing, logits nn.Tensor, T, E int, norm bool) error {
	d.enter()
	defer d.exit()
	positive("Route", T, E)
	if r.K < 1 || r.K > E || len(r.Sel) < T*r.K || len(r.Wts) < T*r.K {
		panic(fmt.Sprintf("devicetest: Strict.Route: K %d of %d experts, %d/%d slots for %d tokens", r.K, E, len(r.Sel), len(r.Wts), T))
	}
	L := d.h("Route", logits, T*E)
	d.run()
	d.Waits++
	if d.err != nil {
		return d.err
	}
	err := d.host.Route(r, L, T, E, norm)
	for i := range T * E {
		nn.F32(L)[i] = float32(math.NaN())
	}
	return err
}

// Combine implements nn.Device.
func (d *Strict) Combine(out, res nn.Tensor, wts []float32, T, k, width int) {
	d.enter()
	defer d.exit()
	positive("Combine", T, k, width)
	if len(wts) < T*k {
		panic(fmt.Sprintf("devicetest: Strict.Combine: %d weights for %d×%d slots", len(wts), T, k))
	}
	O, R := d.h("Combine", out, T*width), d.h("Combine", res, T*k*width)
	same := held("Combine", "wts", wts[:T*k])
	w := wts
	d.push(func() { same(); d.host.Combine(O, R, w, T, k, width) })
}

var _ nn.Device = (*Strict)(nil)

// StrictBackend is a Backend whose layers run on a Strict device
// (nn.Layered), the products outside the device through Backend.
type StrictBackend struct {
	nn.Backend
	Dev *Strict
}

// NewStrictBackend returns a StrictBackend over be (nil: CPU).
func NewStrictBackend(be nn.Backend) *StrictBackend {
	if be == nil {
		be = nn.CPU{}
	}
	return &StrictBackend{Backend: be, Dev: NewStrict(be)}
}

// LayerDevice implements nn.Layered.
func (b *StrictBackend) LayerDevice() nn.Device { return b.Dev }
