package cuda

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sort"
	"sync"
	"unsafe"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
)

// Backend runs runtime.Backend's operations on an NVIDIA GPU, one call at a
// time: float arguments are copied into pinned staging memory, to device
// memory on the backend's stream, the kernel runs, outputs come back the
// same way, and the call waits for the stream. Weights (the matrix bytes of
// MatMul) lying in memory from Alloc, suitably aligned, are read by the GPU
// in place over the bus; any other weight is copied for the call. Nothing is
// cached per address, as runtime.Backend requires.
//
// A device error during a call is recorded (Err) and the call is computed
// on the CPU instead, so results are never wrong; Stats counts fallbacks.
//
// A Backend is safe for concurrent use; calls are serialized.
type Backend struct {
	mu       sync.Mutex
	dev      device
	fn       map[string]uintptr
	compiler string
	regions  []*region // from Alloc, sorted by address

	// staging: pinned host memory and device memory of the same size;
	// staged argument i lives at the same offset in both.
	host    []byte
	scratch devptr
	stats   Stats
	// pbuf holds the parameter block of the launch in progress: launch
	// copies each block into it (under mu; every device copies a block
	// before its launch returns), so that the blocks the callers build,
	// which never leave launch, can live on their stacks.
	pbuf []byte
	prof *profiler // QPACK_CUDA_PROFILE=1 (profile.go)
	tl   *timeline // QPACK_CUDA_PROFILE=graphs (timeline.go)
	// splitOverride, when > 0, replaces gemvSplit's choice (benchmarks
	// and tests compare splits).
	splitOverride int
	// attnTileOff keeps multi-token chunks on the per-(token, head)
	// attention kernel instead of attention_tile (gpukernels.AttnTiled;
	// tests cover both).
	attnTileOff bool
	// attnGQAOff keeps decode on the per-(token, head) attention kernel
	// instead of attention_gqa (QPACK_CUDA_ATTN_GQA=0: A/B runs; tests
	// cover both).
	attnGQAOff bool
	// noSharedSlot runs a shared expert in launches of its own, never as
	// the routed experts' slot k (QPACK_CUDA_SHARED_SLOT=0: A/B runs;
	// tests cover both).
	noSharedSlot bool
	// mappedUploads: a pass's small uploads read by kernels from the
	// mapped staging memory (layer_mem.go; on unless
	// QPACK_CUDA_MAPPED_UPLOADS=0; tests cover both).
	mappedUploads bool
	// selectMapped: the selection's results written into mapped staging
	// memory and read in place (QPACK_CUDA_SELECT_MAPPED=1,
	// layer_select.go: measured even, off; tests cover both).
	selectMapped bool
	// selectOne: the selection in one launch (select_top,
	// QPACK_CUDA_SELECT=one, select_top.go) instead of three.
	selectOne bool
	// pfNext: which MoE launch prefetches the next product into the L2
	// (QPACK_CUDA_PF_NEXT=gateup|down|off, layer_pfnext.go: gateup by
	// default, +3.4% measured; tests cover each).
	pfNext int
	// fuse is the set of decode fusions the Layer makes
	// (layer_normfuse.go; QPACK_CUDA_FUSE: A/B runs; tests cover each).
	fuse fuseSet
	// stagedReads copies every download through staging, even into
	// pinned memory from Alloc (QPACK_CUDA_DIRECT_READ=0: A/B runs).
	stagedReads bool
	// dnCols: which chunks' DeltaNet recurrence splits a head's columns
	// over groups (QPACK_CUDA_DN_COLS).
	dnCols dnColsPolicy
	// selectMin: the fewest logits a decode step selects the top of on
	// the device (Layer.SelectsTop, QPACK_CUDA_SELECT_MIN).
	selectMin int
	// flushEvery: the Layer submits its queue at every flushEvery-th
	// Flush (QPACK_CUDA_FLUSH_LAYERS; flushEveryDefault unless set).
	flushEvery int
	err        error
	closed     bool

	layer       *Layer // the whole-layer device (layer.go), made on first use
	expertBytes int64  // SetExpertCacheBytes: the device expert cache's budget (0: default)
}

// region is a block of pinned, mapped host memory from Alloc.
type region struct {
	mem []byte
	dev devptr
}

func (r *region) addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(r.mem))) }

// Stats counts what a Backend did.
type Stats struct {
	Launches      int64 // kernels run
	StagedBytes   int64 // argument bytes copied through staging memory
	ZeroCopyBytes int64 // weight bytes the GPU read in place from Alloc memory
	Fallbacks     int64 // calls computed on the CPU after a device error

	// The whole-layer device (Layer).
	HostOps       int64 // layer ops computed on the host (no kernel for them yet)
	ExpertHits    int64 // Expert and CachedExpert calls served by the device expert cache
	ExpertMisses  int64 // experts copied into the device expert cache
	ExpertBytes   int64 // bytes copied into device expert slots
	ExpertEvicts  int64 // slots given to another expert
	RoutedLayers  int64 // sparse layers routed on the device (nn.ExpertRouter: no wait, no expert source)
	GroupedLayers int64 // chunks whose routed experts ran as grouped products (nn.ExpertGrouper)

	// CUDA graphs (record.go): queues submitted as one graph launch, the
	// ops those launches ran, and the graphs captured.
	GraphLaunches int64
	GraphNodes    int64
	GraphCaptures int64
}

var (
	_ runtime.Backend   = (*Backend)(nil)
	_ runtime.Allocator = (*Backend)(nil)
)

// New opens GPU 0 (see NewDevice).
func New() (*Backend, error) { return NewDevice(0) }

// NewDevice opens the CUDA device of that ordinal and compiles the kernels
// (Source) for its compute capability with NVRTC. Without a driver, a GPU
// or NVRTC the error wraps ErrNoDevice; a failed compile is an *Error
// carrying NVRTC's log.
func NewDevice(ordinal int) (*Backend, error) {
	dev, err := openDevice(ordinal)
	if err != nil {
		return nil, err
	}
	b, err := newBackend(dev)
	if err != nil {
		dev.close()
		return nil, err
	}
	return b, nil
}

func newBackend(dev device) (*Backend, error) {
	src, defs, err := sourceWithDefines(os.Getenv("QPACK_CUDA_DEFINES"))
	if err != nil {
		return nil, err
	}
	fuse, err := parseFuse(os.Getenv(fuseEnv))
	if err != nil {
		return nil, err
	}
	version, log, err := dev.compile(src, "qpack_kernels.cu")
	if err != nil {
		return nil, fmt.Errorf("cuda: compiling the kernels for %s: %w", dev.name(), err)
	}
	if log != "" {
		slog.Debug("cuda: NVRTC log", "log", log)
	}
	if defs != "" {
		slog.Warn("cuda: kernels compiled with QPACK_CUDA_DEFINES (a benchmark switch, not a tested build)", "defines", defs)
		version += " with " + defs
	}
	b := &Backend{compiler: version, fn: map[string]uintptr{}, prof: newProfiler(dev), noSharedSlot: os.Getenv(sharedSlotEnv) == "0", attnGQAOff: os.Getenv(attnGQAEnv) == "0",
		fuse:        fuse,
		stagedReads: os.Getenv(directReadEnv) == "0", dnCols: dnColsFor(os.Getenv(dnColsEnv)),
		selectMin: selectMinFor(os.Getenv(selectMinEnv)), flushEvery: flushEveryFor(os.Getenv(flushLayersEnv)),
		mappedUploads: os.Getenv(mappedUploadsEnv) != "0", selectMapped: os.Getenv(selectMappedEnv) == "1",
		selectOne: selectOneFor(os.Getenv(selectEnv)),
		pfNext:    pfNextFor(os.Getenv(pfNextEnv))}
	b.dev = dev
	if b.prof != nil {
		b.dev = &profiledCopies{device: dev, p: b.prof}
	} else {
		b.dev = withRecorder(dev, &b.stats)
		if r, ok := b.dev.(*recorder); ok && os.Getenv(profileEnv) == profileGraphs {
			r.tl = newTimeline(dev)
			b.tl = r.tl
		}
	}
	for _, k := range kernelNames {
		f, err := dev.function(k)
		if err != nil {
			return nil, err
		}
		b.fn[k] = f
	}
	if b.tl != nil {
		b.tl.names = make(map[uintptr]string, len(b.fn))
		for k, f := range b.fn {
			b.tl.names[f] = k
		}
	}
	return b, nil
}

// Name describes the device, e.g. "NVIDIA H200 (sm_90, 132 SMs)".
func (b *Backend) Name() string { return b.dev.name() }

// Compiler names the NVRTC that compiled the kernels.
func (b *Backend) Compiler() string { return b.compiler }

// Stats returns the counters so far.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Err returns the first device error a call met (that call and any later
// failing one were computed on the CPU instead), or nil.
func (b *Backend) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Close releases the device, the staging memory and all memory from Alloc.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var errs []error
	if b.prof != nil || b.tl != nil {
		b.logProfile()
	}
	if b.prof != nil {
		errs = append(errs, b.prof.release(b))
	}
	if b.tl != nil {
		errs = append(errs, b.tl.release(b.dev))
	}
	if b.layer != nil {
		errs = append(errs, b.layer.release())
	}
	for _, r := range b.regions {
		errs = append(errs, b.dev.hostFree(r.mem))
	}
	b.regions = nil
	errs = append(errs, b.freeStage(), b.dev.close())
	return errors.Join(errs...)
}

// Alloc returns n zeroed bytes of page-locked host memory mapped into the
// GPU's address space: weights read (pread) into it are used by the kernels
// in place. It is not managed by the Go garbage collector: release it with
// Free.
func (b *Backend) Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("cuda: Alloc(%d): size must be positive", n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("cuda: Alloc on a closed backend")
	}
	mem, dev, err := b.dev.hostAlloc(n)
	if err != nil {
		return nil, fmt.Errorf("cuda: allocating %d bytes of pinned memory: %w", n, err)
	}
	r := &region{mem: mem, dev: dev}
	i := sort.Search(len(b.regions), func(i int) bool { return b.regions[i].addr() > r.addr() })
	b.regions = append(b.regions, nil)
	copy(b.regions[i+1:], b.regions[i:])
	b.regions[i] = r
	return mem[:n:n], nil
}

// Free releases memory from Alloc (pass the slice as returned, or any slice
// starting at the same address).
func (b *Backend) Free(buf []byte) error {
	if len(buf) == 0 {
		return fmt.Errorf("cuda: Free of an empty slice")
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range b.regions {
		if r.addr() == p {
			b.regions = append(b.regions[:i], b.regions[i+1:]...)
			if b.layer != nil {
				b.layer.regionFreed(r) // a model's dense weights gone: layer_weights.go
			}
			return b.dev.hostFree(r.mem)
		}
	}
	return fmt.Errorf("cuda: Free of memory that did not come from Alloc")
}

// lookup returns the device address of p if all of it lies in one Alloc
// region.
func (b *Backend) lookup(p []byte) (devptr, bool) {
	if len(p) == 0 {
		return 0, false
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	i := sort.Search(len(b.regions), func(i int) bool { return b.regions[i].addr() > a }) - 1
	if i < 0 {
		return 0, false
	}
	r := b.regions[i]
	off := uint64(a - r.addr())
	if off+uint64(len(p)) > uint64(len(r.mem)) {
		return 0, false
	}
	return r.dev + off, true
}

// arg is one array argument of a call.
type arg struct {
	data    []byte
	out     bool // written by the kernel (copied back), never read
	inPlace int  // if > 0: may be used in place from Alloc memory at this alignment

	ptr    devptr
	staged bool
	off    int
}

func inW(data []byte, align int) *arg { return &arg{data: data, inPlace: align} }
func inF(x []float32) *arg            { return &arg{data: f32bytes(x)} }
func outF(y []float32) *arg           { return &arg{data: f32bytes(y), out: true} }

func f32bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

const stageAlign = 256

// place gives every argument a device address: in place where allowed,
// else a 256-byte aligned slot of the staging memory, filled and queued for
// upload if read.
func (b *Backend) place(args []*arg) error {
	need := 0
	for _, a := range args {
		a.staged = false
		if a.inPlace > 0 {
			if p, ok := b.lookup(a.data); ok && p%uint64(a.inPlace) == 0 {
				a.ptr = p
				b.stats.ZeroCopyBytes += int64(len(a.data))
				continue
			}
		}
		a.staged = true
		a.off = need
		need += (max(len(a.data), 1) + stageAlign - 1) &^ (stageAlign - 1)
	}
	if err := b.ensureStage(need); err != nil {
		return err
	}
	for _, a := range args {
		if !a.staged {
			continue
		}
		a.ptr = b.scratch + uint64(a.off)
		if a.out || len(a.data) == 0 {
			continue
		}
		h := b.host[a.off : a.off+len(a.data)]
		copy(h, a.data)
		if err := b.dev.htod(a.ptr, h); err != nil {
			return err
		}
		b.stats.StagedBytes += int64(len(a.data))
	}
	return nil
}

// finish queues the downloads of staged outputs, waits for the stream, and
// copies the outputs to their slices.
func (b *Backend) finish(args []*arg) error {
	for _, a := range args {
		if a.staged && a.out && len(a.data) > 0 {
			if err := b.dev.dtoh(b.host[a.off:a.off+len(a.data)], a.ptr); err != nil {
				return err
			}
		}
	}
	if err := b.dev.sync(); err != nil {
		return err
	}
	for _, a := range args {
		if a.staged && a.out {
			copy(a.data, b.host[a.off:a.off+len(a.data)])
			b.stats.StagedBytes += int64(len(a.data))
		}
	}
	return nil
}

func (b *Backend) ensureStage(need int) error {
	need = max(need, 1<<20)
	if len(b.host) >= need {
		return nil
	}
	size := max(need, 2*len(b.host))
	if err := b.freeStage(); err != nil {
		return err
	}
	host, _, err := b.dev.hostAlloc(size)
	if err != nil {
		return fmt.Errorf("cuda: allocating %d bytes of staging memory: %w", size, err)
	}
	scratch, err := b.dev.memAlloc(size)
	if err != nil {
		b.dev.hostFree(host)
		return fmt.Errorf("cuda: allocating %d bytes of device memory: %w", size, err)
	}
	b.host, b.scratch = host, scratch
	return nil
}

func (b *Backend) freeStage() error {
	var errs []error
	if b.host != nil {
		errs = append(errs, b.dev.hostFree(b.host))
		b.host = nil
	}
	if b.scratch != 0 {
		errs = append(errs, b.dev.memFree(b.scratch))
		b.scratch = 0
	}
	return errors.Join(errs...)
}

// run places args, queues the launches that mk builds from their device
// addresses, and brings the outputs back.
func (b *Backend) run(args []*arg, mk func() error) error {
	if b.closed {
		return fmt.Errorf("cuda: backend is closed")
	}
	if err := b.place(args); err != nil {
		return err
	}
	if err := mk(); err != nil {
		return err
	}
	return b.finish(args)
}

// launch queues one kernel after checking the geometry and parameter size.
func (b *Backend) launch(kernel string, grid [3]int, group int, p params, size int) error {
	if len(p) != size {
		return fmt.Errorf("cuda: kernel %s: parameter block is %d bytes, the struct %d", kernel, len(p), size)
	}
	var g [3]uint32
	for i, v := range grid {
		if v < 1 || v > math.MaxInt32 || i > 0 && v > maxGridY {
			return fmt.Errorf("cuda: kernel %s: bad grid %v", kernel, grid)
		}
		g[i] = uint32(v)
	}
	b.pbuf = append(b.pbuf[:0], p...)
	q := b.pbuf
	run := func() error { return b.dev.launch(b.fn[kernel], g, [3]uint32{uint32(group), 1, 1}, q) }
	if b.prof != nil {
		if err := b.prof.around(b, kernel, run); err != nil {
			return fmt.Errorf("kernel %s: %w", kernel, err)
		}
	} else if err := run(); err != nil {
		return fmt.Errorf("kernel %s: %w", kernel, err)
	}
	b.stats.Launches++
	return nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// fail records a device error behind a CPU fallback.
func (b *Backend) fail(what string, err error) {
	b.stats.Fallbacks++
	if b.err == nil {
		b.err = err
		slog.Error("cuda: device error, computing on the CPU instead", "op", what, "err", err)
	}
}

// MatMul implements runtime.Backend: y[i] = W·x[i] for the n rows of x, on
// the packed MLX data (4- and 8-bit with 16-byte vector kernels, 2, 3, 5
// and 6 bits with the generic one) or a dense F32/F16/BF16 matrix.
func (b *Backend) MatMul(w mlxq.Matrix, y, x []float32, n int) {
	if n < 1 || len(x) < n*w.Cols || len(y) < n*w.Rows {
		panic(fmt.Sprintf("cuda: MatMul: len(y)=%d len(x)=%d n=%d for a [%d, %d] matrix", len(y), len(x), n, w.Rows, w.Cols))
	}
	if err := checkMatrix(w); err != nil {
		panic("cuda: MatMul: " + err.Error())
	}
	y, x = y[:n*w.Rows], x[:n*w.Cols]
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.matMul(w, y, x, n); err != nil {
		b.fail("MatMul", err)
		runtime.CPU{}.MatMul(w, y, x, n)
	}
}

// gemvKernel picks the kernel for w and the alignment its weight bytes
// need to be used in place.
func gemvKernel(w mlxq.Matrix) (string, int) {
	switch w.Bits {
	case 0:
		return "gemv_dense", w.Type.Size()
	case 4:
		return "gemv_q4", 16
	case 8:
		return "gemv_q8", 16
	default:
		return "gemv_qn", 1
	}
}

func (b *Backend) matMul(w mlxq.Matrix, y, x []float32, n int) error {
	if useGemm(w, n) {
		return b.matMulGemm(w, y, x, n)
	}
	kernel, walign := gemvKernel(w)
	salign := w.Type.Size()
	aw, as, ab := inW(w.Weight, walign), inW(w.Scales, salign), inW(w.Biases, salign)
	ax, ay := inF(x), outF(y)
	return b.run([]*arg{aw, as, ab, ax, ay}, func() error {
		return b.gemv(kernel, aw.ptr, as.ptr, ab.ptr, ax.ptr, ay.ptr, w, n)
	})
}

// gemv queues y = W·x for n vectors on device addresses, in launches of at
// most maxGridY vectors.
func (b *Backend) gemv(kernel string, wp, sp, bp, xp, yp devptr, w mlxq.Matrix, n int) error {
	rows, split := rowsPerTG, 1 // rows per group of threads
	if kernel == "gemv_q4" || kernel == "gemv_q8" {
		split = b.gemvSplit(w.Rows, w.Cols, w.Bits, min(n, maxGridY))
		rows = rowsPerTG / split * qRows
	}
	for v0 := 0; v0 < n; v0 += maxGridY {
		nv := min(n-v0, maxGridY)
		p := params(make([]byte, 0, sizeQGemv)).ptr(wp).ptr(sp).ptr(bp).
			ptr(xp + uint64(4*v0*w.Cols)).ptr(yp + uint64(4*v0*w.Rows)).
			u32(w.Rows).u32(w.Cols).u32(w.GroupSize).u32(int(w.Type)).u32(w.Bits).u32(split)
		if err := b.launch(kernel, [3]int{ceilDiv(w.Rows, rows), nv, 1}, tgThreads, p, sizeQGemv); err != nil {
			return err
		}
	}
	return nil
}

// gemvWarps is how many simdgroups a 4- or 8-bit matvec (or set of them)
// should give the device at least: about 8 for each of the H100's and
// H200's 132 multiprocessors. The sixteenth session's BenchmarkDecodeKernels
// (six runs, both cards): the [2048, 4096] output projection, 512 row
// quads, takes 4.17-4.34 µs at split 2 (1,024 simdgroups) against
// 4.59-4.73 at split 4 (2,048, the choice when this was 2,048), and every
// other decode product's best split is the same at either figure.
const gemvWarps = 1024

// moeWarps is gemvWarps for the MoE gate/up (moe_gateup_*, whose groups
// stage x and whose slots are the vectors): a decode step's 8 slots of
// [512, 2048] take 7.08-7.44 µs at split 2 (2,048 simdgroups) against
// 8.51 at split 1 (H100 and H200, fifteenth and sixteenth sessions).
const moeWarps = 2048

// gemvSplit is how many simdgroups share a row quad's chunks in gemv_q4,
// gemv_q8 and their sets: the fewest (a power of two up to QP_SIMDS) that
// give a product of rows rows for n vectors (each its own groups) at least
// gemvWarps simdgroups, while every lane keeps a chunk of each row (a
// chunk is 16 bytes of a row of cols bits-bit elements). A decode step's small products (a router, an
// output projection) otherwise run on a few multiprocessors, each lane
// walking its chunks one memory latency after another. The choice depends
// on the shape alone, so a product's bits are the same every time.
func (b *Backend) gemvSplit(rows, cols, bits, n int) int {
	return b.splitTo(rows, cols, bits, n, gemvWarps)
}

// moeSplit is gemvSplit for a MoE gate/up of n slots.
func (b *Backend) moeSplit(rows, cols, bits, n int) int {
	return b.splitTo(rows, cols, bits, n, moeWarps)
}

// splitTo is splitForWarps, or the split a benchmark or test forces.
func (b *Backend) splitTo(rows, cols, bits, n, warps int) int {
	if b.splitOverride > 0 {
		return b.splitOverride
	}
	return splitForWarps(rows, cols, bits, n, warps)
}

func gemvSplitFor(rows, cols, bits, n int) int { return splitForWarps(rows, cols, bits, n, gemvWarps) }

func moeSplitFor(rows, cols, bits, n int) int { return splitForWarps(rows, cols, bits, n, moeWarps) }

func splitForWarps(rows, cols, bits, n, warps int) int {
	chunks := cols * bits / 128
	quads := ceilDiv(rows, qRows) * n
	split := 1
	for split < rowsPerTG && quads*split < warps && chunks >= 2*split*simdWidth {
		split *= 2
	}
	return split
}

// checkMatrix checks what the kernels assume of a Matrix: mlxq's own
// constructors' checks (supported bits, group and type, dims below 2^30,
// columns a multiple of the group, every slice exactly its shape's size).
func checkMatrix(w mlxq.Matrix) error {
	var err error
	if w.Bits == 0 {
		_, err = mlxq.NewDense(w.Rows, w.Cols, w.Type, w.Weight)
	} else {
		_, err = mlxq.NewQuantized(w.Rows, w.Cols, w.Bits, w.GroupSize, w.Type, w.Weight, w.Scales, w.Biases)
	}
	return err
}

// RMSNorm implements runtime.Backend: x/sqrt(mean(x²)+eps)·w for each row
// of len(w) values.
func (b *Backend) RMSNorm(y, x, w []float32, eps float32) {
	if len(w) == 0 || len(x) < len(w) {
		return
	}
	rows := len(x) / len(w)
	if len(y) < rows*len(w) || len(w) >= 1<<31 {
		panic(fmt.Sprintf("cuda: RMSNorm: len(y)=%d for %d rows of %d", len(y), rows, len(w)))
	}
	x, y = x[:rows*len(w)], y[:rows*len(w)]
	b.mu.Lock()
	defer b.mu.Unlock()
	ax, aw, ay := inF(x), inF(w), outF(y)
	err := b.run([]*arg{ax, aw, ay}, func() error {
		p := params(make([]byte, 0, sizeRowNorm)).ptr(ax.ptr).ptr(aw.ptr).ptr(ay.ptr).
			u32(rows).u32(len(w)).f32(eps).u32(0)
		return b.launch("rms_norm", [3]int{rows, 1, 1}, tgThreads, p, sizeRowNorm)
	})
	if err != nil {
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
	if len(up) < n || len(y) < n || n >= 1<<31 {
		panic(fmt.Sprintf("cuda: SwiGLU: len(y)=%d len(gate)=%d len(up)=%d", len(y), n, len(up)))
	}
	y, up = y[:n], up[:n]
	b.mu.Lock()
	defer b.mu.Unlock()
	ag, au, ay := inF(gate), inF(up), outF(y)
	err := b.run([]*arg{ag, au, ay}, func() error {
		p := params(make([]byte, 0, sizeElem)).ptr(ag.ptr).ptr(au.ptr).ptr(ay.ptr).u32(n).u32(0)
		return b.launch("swiglu", [3]int{ceilDiv(n, tgThreads), 1, 1}, tgThreads, p, sizeElem)
	})
	if err != nil {
		b.fail("SwiGLU", err)
		runtime.CPU{}.SwiGLU(y, gate, up)
	}
}
