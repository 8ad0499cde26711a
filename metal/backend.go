package metal

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"unsafe"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
)

// Geometry shared with the kernels (see kernels/00_common.metal).
const (
	tgThreads   = 256 // QP_TG: threads per threadgroup of the GEMVs and reductions
	simdWidth   = 32  // QP_SIMD
	rowsPerTG   = tgThreads / simdWidth
	maxHeadDim  = 512 // QP_MAX_HEAD_DIM
	elemThreads = 64  // threads per threadgroup of the element-wise kernels
	stageMin    = 1 << 20
	arenaMin    = 16 << 20 // bytes: the layer device's pass memory grows by this much
)

// Backend runs the runner's arithmetic on an Apple GPU. It implements
// runtime.Backend (MatMul, RMSNorm, SwiGLU) and Ops, the rest of the decode
// path. Every call is synchronous: arguments are placed, one command buffer
// is committed and waited for, results are in the output slices on return.
//
// Memory: slices that lie in memory from Alloc are used by the GPU in place
// (zero copy; Apple GPUs share memory with the CPU). Any other slice is
// copied into a staging buffer for the call (and copied back if written), so
// every Go slice works, at the cost of a copy. Backend implements
// runtime.Allocator, so runtime.Load puts the dense weights in one Alloc
// arena and the runner's expert cache reads experts straight into Alloc
// slots. Nothing is cached per address: each call looks its arguments up
// in the live Alloc regions and the GPU reads their current bytes, so a
// slot refilled with another expert needs no invalidation.
//
// A Backend is safe for concurrent use; calls are serialized.
type Backend struct {
	mu      sync.Mutex
	dev     device
	lib     *library
	regions []*region // from Alloc, sorted by address
	stage   *region
	stats   Stats
	counts  map[string]int64 // launches per kernel
	err     error
	closed  bool
	// minStage is the smallest staging buffer allocated (the shim tests
	// lower it: the shim copies whole buffers through a pipe).
	minStage int
	// minArena is the smallest chunk of the layer device's pass memory
	// (lowered by the shim tests for the same reason).
	minArena int
	layer    *Device // LayerDevice, once asked for
}

// Stats counts what a Backend did.
type Stats struct {
	Launches      int64 // kernels run
	StagedBytes   int64 // argument bytes copied to and from staging memory
	ZeroCopyBytes int64 // argument bytes the GPU used in place
	Fallbacks     int64 // runtime.Backend calls computed on the CPU after a device error
}

var (
	_ runtime.Backend   = (*Backend)(nil)
	_ runtime.Allocator = (*Backend)(nil)
	_ Ops               = (*Backend)(nil)
)

// New opens the system's default Metal device and compiles the kernels
// (Source) for it. Where there is no Metal (any OS but macOS, or a Mac
// without a usable GPU) it returns an error wrapping ErrUnsupported.
func New() (*Backend, error) {
	lib, err := kernelLibrary()
	if err != nil {
		return nil, err
	}
	dev, err := openSystemDevice(Source(), lib)
	if err != nil {
		return nil, err
	}
	return newBackend(dev, lib), nil
}

func newBackend(dev device, lib *library) *Backend {
	return &Backend{dev: dev, lib: lib, minStage: stageMin, minArena: arenaMin}
}

// Name describes the device, e.g. "Apple M2 Pro".
func (b *Backend) Name() string { return b.dev.deviceName() }

// Stats returns the counters so far.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// kernelLaunches returns how often each kernel ran.
func (b *Backend) kernelLaunches() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := make(map[string]int64, len(b.counts))
	for k, v := range b.counts {
		m[k] = v
	}
	return m
}

// Err returns the first device error a runtime.Backend call met (that call
// and any later failing one were computed on the CPU instead), or nil.
func (b *Backend) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Close releases the device and all memory from Alloc.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	layer := b.layer
	b.mu.Unlock()
	if layer != nil {
		layer.close() // waits for its GPU work
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.regions {
		b.dev.free(r)
	}
	b.regions = nil
	if b.stage != nil {
		b.dev.free(b.stage)
		b.stage = nil
	}
	return b.dev.close()
}

// Alloc returns n zeroed bytes of memory that the GPU uses in place (shared
// storage, page aligned): weights, expert buffers (pread straight into
// them), KV caches and recurrent states kept there are never copied. The
// memory is not managed by the Go garbage collector: release it with Free.
func (b *Backend) Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("metal: Alloc(%d): size must be positive", n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("metal: Alloc on a closed backend")
	}
	r, err := b.dev.alloc(n)
	if err != nil {
		return nil, fmt.Errorf("metal: allocating %d bytes: %w", n, err)
	}
	i := sort.Search(len(b.regions), func(i int) bool { return b.regions[i].addr() > r.addr() })
	b.regions = append(b.regions, nil)
	copy(b.regions[i+1:], b.regions[i:])
	b.regions[i] = r
	return r.mem[:n:n], nil
}

// AllocFloat32 is Alloc for n float32 values.
func (b *Backend) AllocFloat32(n int) ([]float32, error) {
	if n <= 0 || n > math.MaxInt/4 {
		return nil, fmt.Errorf("metal: AllocFloat32(%d): bad size", n)
	}
	m, err := b.Alloc(4 * n)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(m))), n), nil
}

// Free releases memory from Alloc or AllocFloat32 (pass the slice as
// returned, or any slice starting at the same address).
func (b *Backend) Free(buf []byte) error {
	if len(buf) == 0 {
		return fmt.Errorf("metal: Free of an empty slice")
	}
	return b.free(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
}

// FreeFloat32 releases memory from AllocFloat32.
func (b *Backend) FreeFloat32(buf []float32) error {
	if len(buf) == 0 {
		return fmt.Errorf("metal: FreeFloat32 of an empty slice")
	}
	return b.free(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
}

func (b *Backend) free(p uintptr) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range b.regions {
		if r.addr() == p {
			b.dev.free(r)
			b.regions = append(b.regions[:i], b.regions[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("metal: Free of memory that did not come from Alloc")
}

// lookup finds the registered region holding all of p and p's offset in it.
func (b *Backend) lookup(p []byte) (*region, uint64, bool) {
	if len(p) == 0 {
		return nil, 0, false
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	i := sort.Search(len(b.regions), func(i int) bool { return b.regions[i].addr() > a }) - 1
	if i < 0 {
		return nil, 0, false
	}
	r := b.regions[i]
	off := uint64(a - r.addr())
	if off+uint64(len(p)) > uint64(len(r.mem)) {
		return nil, 0, false
	}
	return r, off, true
}

// argKind says how a kernel uses an argument.
type argKind int

const (
	argIn      argKind = iota // read only
	argOut                    // written, and read (so copied in and back when staged)
	argScratch                // device-only scratch of size bytes: never copied
)

// arg is one array argument of a launch: where its bytes are on the host,
// and after placement the region and byte offset the kernel sees. field
// names the parameter-struct field that receives the offset.
type arg struct {
	field   string
	data    []byte
	size    int // bytes (argScratch)
	kind    argKind
	align   int
	private bool // never use in place (it aliases another argument)

	r      *region
	off    uint64
	staged bool
}

func in(field string, data []byte, align int) *arg {
	return &arg{field: field, data: data, kind: argIn, align: align}
}

func inF(field string, x []float32) *arg { return in(field, f32bytes(x), 4) }

func outF(field string, y []float32) *arg {
	return &arg{field: field, data: f32bytes(y), kind: argOut, align: 4}
}

func scratch(field string, size int) *arg {
	return &arg{field: field, size: size, kind: argScratch, align: 4}
}

func (a *arg) bytes() int {
	if a.kind == argScratch {
		return a.size
	}
	return len(a.data)
}

func f32bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

// overlaps reports whether two slices share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
	pb := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// place decides where each argument lives for the launch: in place if it is
// in Alloc memory at a usable alignment, else in the staging buffer (grown
// as needed), into which inputs are copied.
func (b *Backend) place(args []*arg) error {
	need := 0
	for _, a := range args {
		a.r, a.off, a.staged = nil, 0, false
		n := a.bytes()
		if n == 0 {
			continue
		}
		if a.kind != argScratch && !a.private {
			if r, off, ok := b.lookup(a.data); ok && off%uint64(a.align) == 0 {
				a.r, a.off = r, off
				b.stats.ZeroCopyBytes += int64(n)
				continue
			}
		}
		a.staged = true
		need = (need + 63) &^ 63
		a.off = uint64(need)
		need += n
	}
	if err := b.ensureStage(need); err != nil {
		return err
	}
	for _, a := range args {
		switch {
		case a.staged:
			a.r = b.stage
			if a.kind != argScratch {
				copy(b.stage.mem[a.off:], a.data)
				b.stats.StagedBytes += int64(len(a.data))
			}
		case a.r == nil: // empty: bind something valid, never read
			a.r = b.stage
		}
	}
	return nil
}

func (b *Backend) ensureStage(need int) error {
	need = max(need, 64)
	if b.stage != nil && len(b.stage.mem) >= need {
		return nil
	}
	size := b.minStage
	if b.stage != nil {
		size = max(size, 2*len(b.stage.mem))
		b.dev.free(b.stage)
		b.stage = nil
	}
	size = max(size, need)
	r, err := b.dev.alloc(size)
	if err != nil {
		return fmt.Errorf("metal: allocating %d bytes of staging memory: %w", size, err)
	}
	b.stage = r
	return nil
}

// finish copies staged outputs back to their host slices.
func (b *Backend) finish(args []*arg) {
	for _, a := range args {
		if a.staged && a.kind == argOut {
			copy(a.data, b.stage.mem[a.off:a.off+uint64(len(a.data))])
			b.stats.StagedBytes += int64(len(a.data))
		}
	}
}

// paramBlock is a kernel's parameter struct, written field by field at the
// offsets parsed from the kernel source, so the Go side cannot drift from
// the Metal struct.
type paramBlock struct {
	layout *structLayout
	b      []byte
}

func (b *Backend) params(kernel string) *paramBlock {
	sig := b.lib.kernels[kernel]
	if sig == nil {
		panic("metal: no kernel " + kernel)
	}
	sl := b.lib.structs[sig.Struct]
	return &paramBlock{layout: sl, b: make([]byte, sl.Size)}
}

func (p *paramBlock) field(name, want string) structField {
	f, ok := p.layout.Fields[name]
	if !ok {
		panic(fmt.Sprintf("metal: struct %s has no field %s", p.layout.Name, name))
	}
	if f.Type != want {
		panic(fmt.Sprintf("metal: struct %s field %s is %s, set as %s", p.layout.Name, name, f.Type, want))
	}
	return f
}

func (p *paramBlock) u64(name string, v uint64) *paramBlock {
	f := p.field(name, "ulong")
	binary.LittleEndian.PutUint64(p.b[f.Offset:], v)
	return p
}

// u32 sets a uint field; callers have checked the range (dims below 2^31).
func (p *paramBlock) u32(name string, v int) *paramBlock {
	f := p.field(name, "uint")
	if v < 0 || v > math.MaxUint32 {
		panic(fmt.Sprintf("metal: %s.%s = %d out of range", p.layout.Name, name, v))
	}
	binary.LittleEndian.PutUint32(p.b[f.Offset:], uint32(v))
	return p
}

// ptr sets a QP_GLOBAL pointer field to a GPU address.
func (p *paramBlock) ptr(name string, gpu uint64) *paramBlock {
	f, ok := p.layout.Fields[name]
	if !ok || !f.Pointer() {
		panic(fmt.Sprintf("metal: struct %s has no pointer field %s", p.layout.Name, name))
	}
	binary.LittleEndian.PutUint64(p.b[f.Offset:], gpu)
	return p
}

func (p *paramBlock) f32(name string, v float32) *paramBlock {
	f := p.field(name, "float")
	binary.LittleEndian.PutUint32(p.b[f.Offset:], math.Float32bits(v))
	return p
}

// exec places args, writes their offsets into p, runs the kernel over grid
// threadgroups of group threads, and copies staged outputs back.
func (b *Backend) exec(kernel string, grid, group [3]int, p *paramBlock, args ...*arg) error {
	if b.closed {
		return fmt.Errorf("metal: backend is closed")
	}
	sig := b.lib.kernels[kernel]
	if sig == nil {
		return fmt.Errorf("metal: no kernel %s", kernel)
	}
	if len(args)+1 != sig.Buffers {
		return fmt.Errorf("metal: kernel %s takes %d buffers, launch has %d", kernel, sig.Buffers, len(args)+1)
	}
	if p.layout.Name != sig.Struct {
		return fmt.Errorf("metal: kernel %s takes struct %s, launch has %s", kernel, sig.Struct, p.layout.Name)
	}
	var l launch
	l.kernel, l.sig, l.layout, l.params = kernel, sig, p.layout, p.b
	for i := range 3 {
		if grid[i] < 1 || group[i] < 1 || grid[i] > math.MaxUint32 || group[i] > 1024 {
			return fmt.Errorf("metal: kernel %s: bad geometry %v x %v", kernel, grid, group)
		}
		l.grid[i], l.group[i] = uint32(grid[i]), uint32(group[i])
	}
	if err := b.place(args); err != nil {
		return err
	}
	l.bufs = make([]*region, len(args))
	for i, a := range args {
		if a.field != "" {
			p.u64(a.field, a.off)
		}
		l.bufs[i] = a.r
	}
	if err := run(b.dev, []*launch{&l}); err != nil {
		return fmt.Errorf("metal: kernel %s: %w", kernel, err)
	}
	b.stats.Launches++
	if b.counts == nil {
		b.counts = map[string]int64{}
	}
	b.counts[kernel]++
	b.finish(args)
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// fail records a device error behind a CPU fallback.
func (b *Backend) fail(what string, err error) {
	b.stats.Fallbacks++
	if b.err == nil {
		b.err = err
		slog.Error("metal: device error, computing on the CPU instead", "op", what, "err", err)
	}
}

// MatMul implements runtime.Backend: y[i] = W·x[i] for the n rows of x, on
// the packed MLX data (4- and 8-bit with dedicated kernels, 2, 3, 5 and 6
// bits with the generic one) or a dense F32/F16/BF16 matrix.
func (b *Backend) MatMul(w mlxq.Matrix, y, x []float32, n int) {
	if n < 1 || len(x) < n*w.Cols || len(y) < n*w.Rows {
		panic(fmt.Sprintf("metal: MatMul: len(y)=%d len(x)=%d n=%d for a [%d, %d] matrix", len(y), len(x), n, w.Rows, w.Cols))
	}
	y, x = y[:n*w.Rows], x[:n*w.Cols]
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.matMul(w, y, x, n); err != nil {
		b.fail("MatMul", err)
		runtime.CPU{}.MatMul(w, y, x, n)
	}
}

func (b *Backend) matMul(w mlxq.Matrix, y, x []float32, n int) error {
	if err := checkMatrix(w); err != nil {
		panic("metal: MatMul: " + err.Error())
	}
	var kernel string
	walign := 2
	switch w.Bits {
	case 0:
		kernel = "gemv_dense"
	case 4:
		kernel = "gemv_q4"
	case 8:
		kernel = "gemv_q8"
	default:
		kernel, walign = "gemv_qn", 1
	}
	ya := outF("y_off", y)
	ya.private = overlaps(ya.data, f32bytes(x))
	p := b.params(kernel).u32("rows", w.Rows).u32("cols", w.Cols).u32("group", w.GroupSize).
		u32("stype", int(w.Type)).u32("bits", w.Bits)
	return b.exec(kernel, [3]int{ceilDiv(w.Rows, rowsPerTG), n, 1}, [3]int{tgThreads, 1, 1}, p,
		in("w_off", w.Weight, walign), in("s_off", w.Scales, 2), in("b_off", w.Biases, 2), inF("x_off", x), ya)
}

// checkMatrix checks what the kernels assume of a Matrix.
func checkMatrix(w mlxq.Matrix) error {
	if w.Rows < 1 || w.Cols < 1 || w.Rows >= 1<<31 || w.Cols >= 1<<31 {
		return fmt.Errorf("bad shape [%d, %d]", w.Rows, w.Cols)
	}
	if w.Type != mlxq.F32 && w.Type != mlxq.F16 && w.Type != mlxq.BF16 {
		return fmt.Errorf("bad float type %v", w.Type)
	}
	if w.Bits == 0 {
		if int64(len(w.Weight)) != int64(w.Rows)*int64(w.Cols)*int64(w.Type.Size()) {
			return fmt.Errorf("dense weight is %d bytes for [%d, %d] %v", len(w.Weight), w.Rows, w.Cols, w.Type)
		}
		return nil
	}
	if err := mlxq.ValidParams(w.Bits, w.GroupSize); err != nil {
		return err
	}
	if w.Cols%w.GroupSize != 0 || w.Cols%32 != 0 {
		return fmt.Errorf("%d columns is not a multiple of the group size %d", w.Cols, w.GroupSize)
	}
	if int64(len(w.Weight)) != int64(w.Rows)*int64(w.RowBytes()) {
		return fmt.Errorf("weight is %d bytes for [%d, %d] at %d bits", len(w.Weight), w.Rows, w.Cols, w.Bits)
	}
	sb := int64(w.Rows) * int64(w.Groups()) * int64(w.Type.Size())
	if int64(len(w.Scales)) != sb || int64(len(w.Biases)) != sb {
		return fmt.Errorf("scales/biases are %d/%d bytes, want %d", len(w.Scales), len(w.Biases), sb)
	}
	return nil
}

// RMSNorm implements runtime.Backend: x/sqrt(mean(x²)+eps)·w for each row
// of len(w) values.
func (b *Backend) RMSNorm(y, x, w []float32, eps float32) {
	if len(w) == 0 || len(x) == 0 {
		return
	}
	rows := len(x) / len(w)
	if len(y) < rows*len(w) {
		panic(fmt.Sprintf("metal: RMSNorm: len(y)=%d for %d rows of %d", len(y), rows, len(w)))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.rowNorm("rms_norm", y, x, nil, w, rows, len(w), len(w), len(w), 0, eps, 1); err != nil {
		b.fail("RMSNorm", err)
		runtime.CPU{}.RMSNorm(y, x, w, eps)
	}
}

// SwiGLU implements runtime.Backend: silu(gate)·up element-wise.
func (b *Backend) SwiGLU(y, gate, up []float32) {
	n := len(gate)
	if n == 0 {
		return
	}
	if len(up) < n || len(y) < n {
		panic(fmt.Sprintf("metal: SwiGLU: len(y)=%d len(gate)=%d len(up)=%d", len(y), n, len(up)))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.elementwise("swiglu", y[:n], gate, up[:n], 1, n, n, n, n, 0, 0); err != nil {
		b.fail("SwiGLU", err)
		runtime.CPU{}.SwiGLU(y, gate, up)
	}
}

// rowNorm runs one of the RowNorm kernels over rows of dim values.
func (b *Backend) rowNorm(kernel string, y, x, z, w []float32, rows, dim, xStride, yStride, zStride int, eps, scale float32) error {
	p := b.params(kernel).u32("rows", rows).u32("dim", dim).u32("x_stride", xStride).
		u32("y_stride", yStride).u32("z_stride", zStride).f32("eps", eps).f32("scale", scale)
	ya := outF("y_off", y)
	return b.exec(kernel, [3]int{rows, 1, 1}, [3]int{tgThreads, 1, 1}, p,
		inF("x_off", x), inF("w_off", w), inF("z_off", z), ya)
}

// elementwise runs one of the Elem kernels over rows of n values.
func (b *Backend) elementwise(kernel string, y, a, bb []float32, rows, n, yStride, aStride, bStride, mode int, alpha float32) error {
	p := b.params(kernel).u32("n", n).u32("rows", rows).u32("a_stride", aStride).u32("b_stride", bStride).
		u32("y_stride", yStride).u32("mode", mode).f32("alpha", alpha)
	return b.exec(kernel, [3]int{ceilDiv(n, elemThreads), rows, 1}, [3]int{elemThreads, 1, 1}, p,
		inF("a_off", a), inF("b_off", bb), outF("y_off", y))
}
