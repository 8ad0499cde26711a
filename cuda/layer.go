package cuda

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/qpack-go/qpack/runtime/nn"
)

// Layer is the Backend's whole-layer device (nn.Device): tensors live in
// device memory (activations in a per-pass arena, states and constants in
// allocations of their own), dense weights are uploaded once (Resident),
// routed experts are copied into a device expert cache on a second stream,
// and ops are queued on the backend's compute stream in call order, each
// as its kernel (MatMul: the gemv kernels; the others: layer_kernels.go).
// An op whose kernel refuses the shape, or every op when the layer kernels
// are switched off (the fake device's host-path tests), runs on the host
// path (layer_ops.go): it waits, computes on host copies with
// nn.HostDevice's arithmetic and uploads its outputs.
//
// Errors follow the nn.Device contract: the first device error is kept,
// every later op is skipped, and Read, Route, Flush and EndPass return it
// (EndPass clears it). A Layer shares its Backend's lock, so it may be used
// beside the per-op Backend methods; it runs one forward pass at a time (a
// pass's Temps end at its EndPass), as the runner and server do.
type Layer struct {
	b   *Backend
	err error // the first device error since the last EndPass

	stage    []byte // pinned staging memory for uploads and downloads
	stageDev devptr // stage's device address (mapped: kernels may read it)
	stageOff int    // bytes of stage queued since the last wait
	temp     arena  // the per-pass Temp arena
	owned    map[devptr]int64
	experts  expertCache
	frees    *freeList // allocations of collected states (layer_state.go)
	ropes    map[*nn.RoPE]devptr
	// fromRegion: device copies of weights per Alloc region they came from
	fromRegion map[*region][]devptr
	kernels    bool            // ops run the layer kernels (else the host path)
	selBuf     []int32         // SelectTop's download, kept between passes
	refused    map[string]bool // ops a kernel refused a shape of (logged once)
	flushes    int             // Flush calls so far (Backend.flushEvery)
	// Routing on the device (layer_moe.go): the layers' expert tables,
	// tables replaced since the streams were idle, the fault word (in
	// mapped host memory: faultHost on the host, fault on the device), and
	// whether a pass used it since the last EndPass.
	tables     map[tableKey]*expertTable
	retired    []devptr
	fault      devptr
	faultHost  []byte
	faultArmed bool
	shared     map[*devMat]*sharedExpert // shared experts' tables, by their gate matrix
	consts     devptr                    // zeros and ones for them (moeConsts)
	// pfWant: the table whose tail the next MatMul fills (layer_pfnext.go;
	// set and cleared under the lock, peeked at without it by MatMul, whose
	// calls come in the pass's order after RouteExperts', one pass at a time).
	pfWant *expertTable
	// pend is a deferred one-row AddRMSNorm, pset a fused launch held
	// back, normDone the fused kernels' group counter (layer_normfuse.go).
	pend     pendingNorm
	pset     pendingSet
	normDone devptr
	closed   bool
	released bool
}

var _ nn.Device = (*Layer)(nil)
var _ nn.ExpertRouter = (*Layer)(nil)
var _ nn.Layered = (*Backend)(nil)

// LayerDevice implements nn.Layered: the backend's Layer, made on the first
// call (the same one every time).
func (b *Backend) LayerDevice() nn.Device {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.layerLocked()
}

// Layer returns the backend's whole-layer device (LayerDevice, typed).
func (b *Backend) Layer() *Layer {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.layerLocked()
}

func (b *Backend) layerLocked() *Layer {
	if b.layer == nil {
		b.layer = &Layer{b: b, owned: map[devptr]int64{}, frees: &freeList{}, ropes: map[*nn.RoPE]devptr{}, kernels: true, refused: map[string]bool{},
			fromRegion: map[*region][]devptr{}}
		b.layer.experts.init()
		if b.closed {
			b.layer.closed = true
		}
	}
	return b.layer
}

// SetExpertCacheBytes sets the byte budget of the device expert cache
// (layer_expert.go): 0 restores the default (QPACK_CUDA_EXPERT_CACHE, else
// a fraction of the device memory free at first use); a negative value
// keeps no expert beyond the pass that used it. A smaller budget takes
// effect at the next EndPass.
func (b *Backend) SetExpertCacheBytes(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expertBytes = n
	if b.layer != nil {
		b.layer.experts.budget = -1 // decided again at the next use
	}
}

// Name implements nn.Device.
func (l *Layer) Name() string { return "cuda layers on " + l.b.dev.name() }

// lock takes the backend's lock; it reports false (with the error kept)
// when the Layer can no longer be used or an error is pending, in which
// case the caller skips its work but must still unlock.
func (l *Layer) lock() bool {
	ok := l.lockKeep()
	if ok {
		l.flushPending() // every op but those that may fuse it follows it
	}
	return l.err == nil
}

func (l *Layer) unlock() { l.b.mu.Unlock() }

// mark names a point of the host's path after a wait for the submission
// timeline (QPACK_CUDA_PROFILE=graphs), with the lock held.
func (l *Layer) mark(name string) {
	if tl := l.b.tl; tl != nil {
		tl.mark(name)
	}
}

var errClosed = errors.New("cuda: the backend is closed")

// fail keeps the first error (op names what was being done).
func (l *Layer) fail(op string, err error) {
	if err == nil || l.err != nil {
		return
	}
	if op != "" {
		err = fmt.Errorf("cuda layer %s: %w", op, err)
	}
	l.err = err
	if !errors.Is(err, errClosed) {
		slog.Error("cuda: device error in a layer op (the forward pass returns it)", "err", err)
	}
}

// EndPass implements nn.Device: it waits for both streams, releases the
// Temps (the arena is kept, grown to the pass's peak when it had to add
// chunks), frees what collected states left, and returns the first error
// since the last EndPass, clearing it.
func (l *Layer) EndPass() error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if l.closed || l.b.closed {
		return errClosed
	}
	l.mark("EndPass called")
	defer l.mark("EndPass returns")
	l.flushPending()
	if err := l.b.dev.syncAll(); err != nil {
		l.fail("EndPass", err)
	} else {
		l.checkFault() // only with the streams idle
	}
	l.stageOff = 0
	l.freeRetired()
	if err := l.temp.reset(l); err != nil {
		l.fail("EndPass", err)
	}
	l.experts.endPass(l)
	l.drainFrees()
	err := l.err
	l.err = nil
	return err
}

// Flush implements nn.Device: the end of a layer. With CUDA graphs
// (record.go) the layer's queued work is submitted here (replayed as its
// graph when it repeats), so the GPU runs a layer while the host queues
// the next; without them the work went to the stream as it was called.
// It returns the pending error.
func (l *Layer) Flush() error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if l.closed || l.b.closed {
		return errClosed
	}
	l.experts.flush()
	l.flushes++
	if r, ok := l.b.dev.(*recorder); ok && l.flushes%max(l.b.flushEvery, 1) == 0 {
		if err := r.flush(); err != nil {
			l.fail("Flush", err)
		}
	}
	return l.err
}

// wait waits for the compute stream (staging is free again afterwards).
func (l *Layer) wait(op string) bool {
	if err := l.b.dev.sync(); err != nil {
		l.fail(op, err)
		return false
	}
	l.stageOff = 0
	return true
}

// release frees everything the Layer holds (Backend.Close, lock held).
func (l *Layer) release() error {
	if l.released {
		return nil
	}
	l.released, l.closed = true, true
	var errs []error
	errs = append(errs, l.b.dev.syncAll())
	errs = append(errs, l.experts.release(l))
	errs = append(errs, l.temp.release(l))
	l.drainFrees()
	for p := range l.owned {
		errs = append(errs, l.b.dev.memFree(p))
	}
	l.owned = map[devptr]int64{}
	l.tables, l.retired, l.fault, l.shared, l.consts = nil, nil, 0, nil, 0
	l.pend, l.pset, l.normDone = pendingNorm{}, pendingSet{}, 0
	if l.faultHost != nil {
		errs = append(errs, l.b.dev.hostFree(l.faultHost))
		l.faultHost = nil
	}
	l.ropes = map[*nn.RoPE]devptr{}
	l.fromRegion = map[*region][]devptr{}
	if l.stage != nil {
		errs = append(errs, l.b.dev.hostFree(l.stage))
		l.stage, l.stageDev = nil, 0
	}
	return errors.Join(errs...)
}
