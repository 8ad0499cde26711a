package runtime

import "github.com/qpack-go/qpack/runtime/nn"

// Backend is the seam for the heavy products (the interface is nn.Backend).
// Graphs do not call it directly: they queue whole layers on an nn.Device
// (Model.Device), which is the backend's own when it implements nn.Layered
// (package cuda) and otherwise nn.HostDevice over the backend, which runs
// the small parts (the causal conv, the DeltaNet recurrence, attention over
// the cache, routing) on the host and the products, weighted norms and
// SwiGLU through the Backend. CPU is the implementation in this package;
// packages metal and cuda implement the same interface on GPUs.
//
// Contract:
//   - All slices are row-major float32. A batch of n rows is n consecutive
//     vectors; for MatMul, x holds n×w.Cols values and y receives n×w.Rows.
//   - The byte slices of a Matrix stay valid and unchanged for as long as the
//     Matrix is used: dense weights for the lifetime of the Model, an expert's
//     matrices until its ExpertWeights is released. After Release the same
//     addresses may hold another expert's bytes: expert caches reuse their
//     slots. So a backend must not keep anything derived from a matrix's
//     bytes (a device copy, a repacked layout) keyed by its address beyond
//     one call: it could go stale silently. Memory from the backend's own
//     Allocator needs no such cache: the device reads it in place, so it
//     always sees the current bytes.
//   - Results must not depend on n beyond float round-off, and must be
//     deterministic: the same inputs give the same bits.
//   - Methods may be called from one goroutine at a time per Model.
type Backend = nn.Backend

// Allocator is implemented by a backend whose device reads host memory it
// hands out in place (package metal: page-aligned memory shared with the
// GPU). When the backend of a Model implements it, or LoadOptions.Alloc is
// set, the dense weights are read into one allocation from it (an arena,
// each tensor at a 64-byte aligned offset, freed by Model.Close), the
// loader's expert buffers come from it, and the runner's expert cache
// allocates its slots from it, so no weight is copied on its way to the
// device.
type Allocator interface {
	// Alloc returns n ≥ 1 bytes of zeroed memory, at least 64-byte
	// aligned, that stay valid until Free.
	Alloc(n int) ([]byte, error)
	// Free releases memory from Alloc; it is given a slice that starts
	// where Alloc's did.
	Free(b []byte) error
}

// CPU is the pure-Go backend: products on the packed MLX data through mlxq
// (which splits large products by rows over GOMAXPROCS goroutines).
type CPU = nn.CPU

// Marker is implemented by a backend that can time the host's path between
// its waits for the device (package cuda's submission timeline,
// QPACK_CUDA_PROFILE=graphs): Mark names a point the host passes there, so
// that the report says where a decode step's boundary goes outside the
// backend too (the runner's draw, Forward's entry). It costs a check when
// the timeline is off.
type Marker interface{ Mark(point string) }

// Mark tells m's backend, when it is a Marker, that the host passed point.
func (m *Model) Mark(point string) {
	if mk, ok := m.Backend.(Marker); ok {
		mk.Mark(point)
	}
}
