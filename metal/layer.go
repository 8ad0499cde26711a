package metal

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// Device is the Backend's whole-layer device (nn.Device): the graphs run
// every layer on it when the model's backend is a *Backend
// (LayerDevice).
//
// Memory: Apple GPUs share memory with the CPU, so every tensor is host
// memory from the backend's allocator (page-aligned, wrapped by a
// shared-storage MTLBuffer): Alloc'd tensors, KV caches and recurrent
// states one region each, Temps and the pass's expert copies in a per-pass
// arena, reused after EndPass. Dense weights and constants already in Alloc
// memory (runtime.Load puts them there) are used in place; others are
// copied into Alloc memory once.
//
// Work: ops that have a Metal kernel are encoded into the pending list and
// submitted as one command buffer at Flush (the end of a layer), Read,
// Route or EndPass; the waits happen at Read, Route and EndPass. An op
// without a kernel (see hostOps) waits for everything queued, then runs on
// the CPU over the same shared memory with package nn's arithmetic: it is
// correct, at the price of a wait. Errors are kept and returned by the
// next wait, as the nn.Device contract says; after one, ops are skipped
// until EndPass.
//
// A Device runs one forward pass at a time (its Temps are the pass's).
type Device struct {
	b  *Backend
	mu sync.Mutex

	pending []*launch      // encoded, not submitted
	waits   []func() error // submitted, not waited
	err     error

	arena   arena
	owned   map[*region]bool       // regions of Alloc'd tensors, states and copies
	garbage []*region              // freed while work may be in flight: released at the next sync
	freqs   map[*nn.RoPE]nn.Tensor // the RoPEs' inverse frequencies on the device
	// unusable kernels (the device cannot launch them with QP_TG threads):
	// their ops run on the CPU.
	unusable map[string]bool
	stats    LayerStats
}

// LayerStats counts what a Device did.
type LayerStats struct {
	Launches int64 // kernels encoded
	Submits  int64 // command buffers submitted
	HostOps  int64 // ops computed on the CPU (no kernel for them)
	Syncs    int64 // waits for the GPU
}

var (
	_ nn.Device  = (*Device)(nil)
	_ nn.Layered = (*Backend)(nil)
)

// LayerDevice implements nn.Layered: the backend's Device, created on first
// use; nil if the GPU's buffers have no GPU addresses (before macOS 13),
// which the layer kernels need.
func (b *Backend) LayerDevice() nn.Device {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.layer == nil {
		if b.closed || !b.dev.addressable() {
			return nil
		}
		b.layer = &Device{b: b, arena: arena{min: b.minArena}, owned: map[*region]bool{}, unusable: b.dev.unusable()}
	}
	return b.layer
}

// Name implements nn.Device.
func (d *Device) Name() string { return "metal (" + d.b.Name() + ")" }

// LayerStats returns the device's counters so far.
func (d *Device) LayerStats() LayerStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// mbuf is the storage of a Device tensor: floats f starting at byte base of
// region r.
type mbuf struct {
	r    *region
	base uint64
	f    []float32
}

func (m *mbuf) Len() int { return len(m.f) }

// buf returns t's storage; a tensor of another device is a programming
// error.
func buf(t nn.Tensor) *mbuf {
	m, ok := t.Buf.(*mbuf)
	if !ok {
		panic(fmt.Sprintf("metal: a %T tensor used with the Metal device", t.Buf))
	}
	return m
}

// host is the floats of t (shared memory: valid on the CPU once the GPU
// work writing them has completed).
func host(t nn.Tensor) []float32 {
	if t.Buf == nil {
		return nil
	}
	m := buf(t)
	return m.f[t.Off : t.Off+t.N : t.Off+t.N]
}

// hostT is t as a host-device tensor over the same memory.
func hostT(t nn.Tensor) nn.Tensor {
	if t.Buf == nil {
		return nn.Tensor{}
	}
	return nn.HostTensor(host(t))
}

// addr is the GPU address of element i of t.
func addr(t nn.Tensor, i int) (*region, uint64) {
	m := buf(t)
	return m.r, m.r.gpu + m.base + 4*uint64(t.Off+i)
}

// arena is per-pass memory: chunks from the device, handed out in order and
// reused after EndPass.
type arena struct {
	min    int // smallest chunk in bytes
	chunks []*mbuf
	cur    int // chunk being filled
	used   int // bytes used of it
}

// take returns n bytes (64-byte aligned) from the arena.
func (d *Device) take(n int) (*mbuf, int, error) {
	a := &d.arena
	n = (n + 63) &^ 63
	for a.cur < len(a.chunks) {
		c := a.chunks[a.cur]
		if a.used+n <= len(c.r.mem) {
			off := a.used
			a.used += n
			return c, off, nil
		}
		a.cur++
		a.used = 0
	}
	r, err := d.b.dev.alloc(max(n, a.min, 64))
	if err != nil {
		return nil, 0, fmt.Errorf("metal: allocating %d bytes of pass memory: %w", max(n, a.min), err)
	}
	c := &mbuf{r: r, f: unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(r.mem))), len(r.mem)/4)}
	a.chunks = append(a.chunks, c)
	a.cur, a.used = len(a.chunks)-1, n
	return c, 0, nil
}

func (a *arena) reset() { a.cur, a.used = 0, 0 }

// fail keeps the first error until EndPass.
func (d *Device) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

// enqueue adds a launch to the pending command buffer (skipped after an
// error: the tensors are undefined then anyway).
func (d *Device) enqueue(l *launch) {
	if d.err != nil {
		return
	}
	d.pending = append(d.pending, l)
	d.stats.Launches++
	d.b.mu.Lock()
	d.b.stats.Launches++
	if d.b.counts == nil {
		d.b.counts = map[string]int64{}
	}
	d.b.counts[l.kernel]++
	d.b.mu.Unlock()
}

// submit commits the pending launches as one command buffer.
func (d *Device) submit() {
	if len(d.pending) == 0 {
		return
	}
	ls := d.pending
	d.pending = nil
	if d.err != nil {
		return
	}
	wait, err := d.b.dev.submit(ls)
	if err != nil {
		d.fail(fmt.Errorf("metal: submitting %d kernels: %w", len(ls), err))
		return
	}
	d.stats.Submits++
	d.waits = append(d.waits, wait)
}

// sync submits what is pending and waits for everything submitted; then no
// GPU work is in flight and the CPU may use any tensor. It reports whether
// the device is still without error.
func (d *Device) sync() bool {
	d.submit()
	if len(d.waits) > 0 {
		d.stats.Syncs++
	}
	for _, w := range d.waits {
		if err := w(); err != nil {
			d.fail(fmt.Errorf("metal: %w", err))
		}
	}
	d.waits = nil
	for _, r := range d.garbage {
		d.b.dev.free(r)
	}
	d.garbage = nil
	return d.err == nil
}

// idle reports whether no GPU work is queued or in flight.
func (d *Device) idle() bool { return len(d.pending) == 0 && len(d.waits) == 0 }

// hostOp waits for the GPU before an op computed on the CPU; false means
// skip it (a device error is pending).
func (d *Device) hostOp() bool {
	if !d.sync() {
		return false
	}
	d.stats.HostOps++
	return true
}

// has reports whether the device can run a layer kernel.
func (d *Device) has(kernel string) bool { return !d.unusable[kernel] }

// ptrArg is a QP_GLOBAL pointer field of a shared-dialect launch.
type ptrArg struct {
	field string
	r     *region
	gpu   uint64
	write bool
}

func ptrIn(field string, t nn.Tensor) ptrArg {
	r, a := addr(t, 0)
	return ptrArg{field: field, r: r, gpu: a}
}

func ptrOut(field string, t nn.Tensor) ptrArg {
	p := ptrIn(field, t)
	p.write = true
	return p
}

// entry encodes a kernel of the shared dialect over grid threadgroups of
// QP_TG threads.
func (d *Device) entry(kernel string, gx, gy int, p *paramBlock, ptrs ...ptrArg) {
	sig := d.b.lib.kernels[kernel]
	if sig == nil || !sig.Entry {
		panic("metal: no shared-dialect kernel " + kernel)
	}
	if gx < 1 || gy < 1 || gx >= 1<<31 || gy >= 1<<16 {
		panic(fmt.Sprintf("metal: kernel %s: bad grid %d x %d", kernel, gx, gy))
	}
	l := &launch{kernel: kernel, sig: sig, layout: p.layout, params: p.b,
		grid: [3]uint32{uint32(gx), uint32(gy), 1}, group: [3]uint32{tgThreads, 1, 1}}
	for _, a := range ptrs {
		p.ptr(a.field, a.gpu)
		if a.r == nil {
			continue // a null pointer
		}
		merged := false
		for i := range l.uses {
			if l.uses[i].r == a.r {
				l.uses[i].write = l.uses[i].write || a.write
				merged = true
			}
		}
		if !merged {
			l.uses = append(l.uses, use{r: a.r, write: a.write})
		}
	}
	d.enqueue(l)
}

// bufArg is a buffer of a Metal-only kernel (bound at offset 0, located by
// a byte offset field); r nil for an unused argument.
type bufArg struct {
	field string
	r     *region
	off   uint64
}

func bufT(field string, t nn.Tensor) bufArg {
	if t.Buf == nil {
		return bufArg{field: field}
	}
	m := buf(t)
	return bufArg{field: field, r: m.r, off: m.base + 4*uint64(t.Off)}
}

// legacy encodes a Metal-only kernel (buffers bound at offset 0).
func (d *Device) legacy(kernel string, grid, group [3]int, p *paramBlock, args ...bufArg) {
	sig := d.b.lib.kernels[kernel]
	if sig == nil || sig.Entry || sig.Buffers != len(args)+1 {
		panic("metal: no kernel " + kernel + " with these buffers")
	}
	l := &launch{kernel: kernel, sig: sig, layout: p.layout, params: p.b}
	for i := range 3 {
		if grid[i] < 1 || group[i] < 1 || grid[i] >= 1<<31 || group[i] > 1024 {
			panic(fmt.Sprintf("metal: kernel %s: bad geometry %v x %v", kernel, grid, group))
		}
		l.grid[i], l.group[i] = uint32(grid[i]), uint32(group[i])
	}
	var any *region
	for _, a := range args {
		if a.r != nil {
			any = a.r
		}
	}
	for _, a := range args {
		r := a.r
		if r == nil {
			r = any // never read
		}
		p.u64(a.field, a.off)
		l.bufs = append(l.bufs, r)
	}
	d.enqueue(l)
}

// Alloc implements nn.Device: n zeroed floats in a region of their own.
func (d *Device) Alloc(n int) (nn.Tensor, error) {
	if n <= 0 {
		return nn.Tensor{}, fmt.Errorf("metal: Alloc(%d) floats", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.alloc(n)
	if err != nil {
		return nn.Tensor{}, err
	}
	return nn.Tensor{Buf: m, N: n}, nil
}

func (d *Device) alloc(n int) (*mbuf, error) {
	if d.owned == nil {
		return nil, fmt.Errorf("metal: the backend is closed")
	}
	r, err := d.b.dev.alloc(4 * n)
	if err != nil {
		return nil, fmt.Errorf("metal: allocating %d floats: %w", n, err)
	}
	d.owned[r] = true
	return &mbuf{r: r, f: unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(r.mem))), n)}, nil
}

// Free implements nn.Device. The memory is released once no GPU work can
// use it (at the next wait).
func (d *Device) Free(t nn.Tensor) {
	if t.Buf == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.release(buf(t).r)
}

func (d *Device) release(r *region) {
	if !d.owned[r] {
		panic("metal: Free of a tensor that is not from Alloc")
	}
	delete(d.owned, r)
	if d.idle() {
		d.b.dev.free(r)
		return
	}
	d.garbage = append(d.garbage, r)
}

// Temp implements nn.Device: zeroed pass memory.
func (d *Device) Temp(n int) nn.Tensor {
	if n < 0 {
		panic(fmt.Sprintf("metal: Temp(%d)", n))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if n == 0 {
		n = 1
	}
	c, off, err := d.take(4 * n)
	if err != nil {
		panic(err) // out of memory: the contract gives Temp no error
	}
	// Memory handed out in this pass was not in use by any queued work.
	t := nn.Tensor{Buf: c, Off: off / 4, N: n}
	clear(host(t))
	return t
}

// EndPass implements nn.Device.
func (d *Device) EndPass() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sync()
	d.arena.reset()
	err := d.err
	d.err = nil
	return err
}

// Flush implements nn.Device: the layer's work is submitted as one command
// buffer; nothing waits.
func (d *Device) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.submit()
	return d.err
}

// Write implements nn.Device. With nothing in flight the CPU copies at
// once; otherwise src is copied into pass memory and a kernel copies it in
// queue order.
func (d *Device) Write(dst nn.Tensor, src []float32) {
	if len(src) > dst.N {
		panic(fmt.Sprintf("metal: Write of %d floats into a tensor of %d", len(src), dst.N))
	}
	if len(src) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.idle() || !d.has("copy_f32") {
		if d.sync() {
			copy(host(dst), src)
		}
		return
	}
	c, off, err := d.take(4 * len(src))
	if err != nil {
		d.fail(err)
		return
	}
	st := nn.Tensor{Buf: c, Off: off / 4, N: len(src)}
	copy(host(st), src)
	d.copyKernel(dst, st)
}

// Read implements nn.Device.
func (d *Device) Read(dst []float32, src nn.Tensor) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sync() {
		copy(dst, host(src))
	}
	return d.err
}

// Copy implements nn.Device.
func (d *Device) Copy(dst, src nn.Tensor) {
	if src.N > dst.N {
		panic(fmt.Sprintf("metal: Copy of %d floats into a tensor of %d", src.N, dst.N))
	}
	if src.N == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if sameMem(dst, src) || !d.has("copy_f32") {
		if d.hostOp() {
			copy(host(dst)[:src.N], host(src))
		}
		return
	}
	d.copyKernel(dst, src)
}

// sameMem reports whether two tensors' ranges overlap.
func sameMem(a, b nn.Tensor) bool {
	ma, mb := buf(a), buf(b)
	if ma.r != mb.r {
		return false
	}
	a0 := ma.base + 4*uint64(a.Off)
	b0 := mb.base + 4*uint64(b.Off)
	return a0 < b0+4*uint64(b.N) && b0 < a0+4*uint64(a.N)
}

func (d *Device) copyKernel(dst, src nn.Tensor) {
	n := src.N
	if n >= 1<<31 {
		panic("metal: Copy of 2^31 floats or more")
	}
	p := d.b.params("copy_f32").u32("n", n)
	d.entry("copy_f32", ceilDiv(n, tgThreads), 1, p, ptrOut("dst", dst.Slice(0, n)), ptrIn("src", src))
}

// resMat is where a matrix's three arrays lie in device memory.
type resMat struct {
	w, s, b bufArg
}

// placeMat finds m's arrays in Alloc memory at the alignment the GEMV
// kernels need.
func (d *Device) placeMat(m mlxq.Matrix) (*resMat, bool) {
	walign := 2
	if m.Bits != 0 && m.Bits != 4 && m.Bits != 8 {
		walign = 1
	}
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	var rm resMat
	for _, a := range []struct {
		dst   *bufArg
		data  []byte
		align int
		name  string
	}{{&rm.w, m.Weight, walign, "w_off"}, {&rm.s, m.Scales, 2, "s_off"}, {&rm.b, m.Biases, 2, "b_off"}} {
		a.dst.field = a.name
		if len(a.data) == 0 {
			continue
		}
		r, off, ok := d.b.lookup(a.data)
		if !ok || off%uint64(a.align) != 0 {
			return nil, false
		}
		a.dst.r, a.dst.off = r, off
	}
	return &rm, true
}

// copyMat copies m's arrays into c at byte offset off (each 64-byte
// aligned) and returns the matrix over the copy; size is the bytes needed.
func copyMat(m mlxq.Matrix, c *mbuf, off int) (mlxq.Matrix, *resMat) {
	mem := c.r.mem
	cp := m
	rm := &resMat{w: bufArg{field: "w_off"}, s: bufArg{field: "s_off"}, b: bufArg{field: "b_off"}}
	for _, a := range []struct {
		data *[]byte
		dst  *bufArg
	}{{&cp.Weight, &rm.w}, {&cp.Scales, &rm.s}, {&cp.Biases, &rm.b}} {
		n := len(*a.data)
		if n == 0 {
			continue
		}
		copy(mem[off:off+n], *a.data)
		*a.data = mem[off : off+n : off+n]
		a.dst.r, a.dst.off = c.r, uint64(off)
		off += (n + 63) &^ 63
	}
	return cp, rm
}

func matBytes(m mlxq.Matrix) int {
	return (len(m.Weight)+63)&^63 + (len(m.Scales)+63)&^63 + (len(m.Biases)+63)&^63
}

// Resident implements nn.Device: a matrix in Alloc memory is used in
// place; another is copied into Alloc memory once (kept until the backend
// closes).
func (d *Device) Resident(m mlxq.Matrix) (nn.Mat, error) {
	if err := checkMatrix(m); err != nil {
		return nn.Mat{}, fmt.Errorf("metal: Resident: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if rm, ok := d.placeMat(m); ok {
		return nn.Mat{W: m, Dev: rm}, nil
	}
	c, err := d.alloc((matBytes(m) + 3) / 4)
	if err != nil {
		return nn.Mat{}, err
	}
	cp, rm := copyMat(m, c, 0)
	return nn.Mat{W: cp, Dev: rm}, nil
}

// Constant implements nn.Device: v is used in place if it lies in Alloc
// memory, else copied once.
func (d *Device) Constant(v []float32) (nn.Tensor, error) {
	if len(v) == 0 {
		return nn.Tensor{}, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.b.mu.Lock()
	r, off, ok := d.b.lookup(f32bytes(v))
	d.b.mu.Unlock()
	if ok && off%4 == 0 {
		return nn.Tensor{Buf: &mbuf{r: r, base: off, f: v}, N: len(v)}, nil
	}
	m, err := d.alloc(len(v))
	if err != nil {
		return nn.Tensor{}, err
	}
	copy(m.f, v)
	return nn.Tensor{Buf: m, N: len(v)}, nil
}

// Indices implements nn.Device: a copy of ix in Alloc memory (Dev, an
// int32 vector in a float tensor's storage); ix itself is kept in Host.
func (d *Device) Indices(ix []int32) (nn.Index, error) {
	if len(ix) == 0 {
		return nn.Index{Host: ix}, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m, err := d.alloc(len(ix))
	if err != nil {
		return nn.Index{}, err
	}
	copy(unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(m.f))), len(ix)), ix)
	return nn.Index{Host: ix, Dev: nn.Tensor{Buf: m, N: len(ix)}}, nil
}

// Expert implements nn.Device: the expert's bytes are copied into pass
// memory (the source may reuse them once the work is queued; the GPU reads
// them later), valid until EndPass.
func (d *Device) Expert(_ nn.ExpertSource, w *nn.ExpertWeights) (nn.ExpertMats, error) {
	for _, m := range []mlxq.Matrix{w.Gate, w.Up, w.Down} {
		if err := checkMatrix(m); err != nil {
			return nn.ExpertMats{}, fmt.Errorf("metal: Expert: %w", err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c, off, err := d.take(matBytes(w.Gate) + matBytes(w.Up) + matBytes(w.Down))
	if err != nil {
		return nn.ExpertMats{}, err
	}
	var em nn.ExpertMats
	for _, x := range []struct {
		m   mlxq.Matrix
		dst *nn.Mat
	}{{w.Gate, &em.Gate}, {w.Up, &em.Up}, {w.Down, &em.Down}} {
		cp, rm := copyMat(x.m, c, off)
		*x.dst = nn.Mat{W: cp, Dev: rm}
		off += matBytes(x.m)
	}
	return em, nil
}

// CachedExpert implements nn.Device: the Device keeps no expert cache of
// its own (the runner's cache already lies in Alloc memory).
func (d *Device) CachedExpert(nn.ExpertSource, int, int) (nn.ExpertMats, bool) {
	return nn.ExpertMats{}, false
}

// close releases the pass memory (the backend is closing).
func (d *Device) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sync()
	for _, c := range d.arena.chunks {
		d.b.dev.free(c.r)
	}
	d.arena = arena{}
	for r := range d.owned {
		d.b.dev.free(r)
	}
	d.owned = nil
}
