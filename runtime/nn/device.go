package nn

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// Device is the whole-layer seam: the graph asks it for layer-level work on
// tensors the device owns (activations, KV caches, recurrent states, dense
// weights), so that a GPU keeps a layer's data in its own memory and runs
// the layer as one submission. HostDevice is the reference implementation
// (Go slices, the arithmetic of this package, products through a Backend);
// package cuda implements it on NVIDIA GPUs.
//
// Contract:
//   - Operations are queued: a device may run them later and in the
//     background, but always in the order they were queued. Only Read, Route,
//     Flush and EndPass wait; they return the first error the device met since
//     the last EndPass (an operation itself never fails: its error is kept
//     and every later wait returns it). After an error, the contents of every
//     tensor written since are undefined; the forward pass returns the error
//     and its state must be Reset.
//   - Tensors are float32 arrays in the device's memory, addressed by element
//     (Tensor.Slice views share the storage). Ops name their extents in the
//     spec structs; a device may panic on a tensor too short for them (a
//     programming error, found by the conformance suite).
//   - Results must not depend on how work is split into calls (the rows of a
//     batch) beyond float round-off, and must be deterministic: the same
//     inputs give the same bits.
//   - Host slices an op takes (GatherRows' and ScatterRows' rows, Combine's
//     weights, Write's source) may be reused by the caller as soon as the op
//     returns: a device that runs the op later copies them first.
//   - A layer state's Reset, Clone and Restore are ordered with the queued
//     work (a device runs them in queue order or waits first); Len counts
//     the positions queued so far.
//   - An op given a Mat without this device's handle (a Resident that
//     failed: Binding keeps its error) records an error; it never panics.
//   - A device is used from one goroutine at a time per forward pass.
//   - Flush marks the end of a layer: a device that batches work submits what
//     is queued (one command buffer per layer). It need not wait.
type Device interface {
	// Name says which device this is, for logs and errors.
	Name() string

	// Alloc returns n zeroed floats that stay valid until Free (layer
	// states live there).
	Alloc(n int) (Tensor, error)
	// Free releases a tensor from Alloc.
	Free(t Tensor)
	// Temp returns n zeroed floats of scratch that stay valid until the
	// next EndPass.
	Temp(n int) Tensor
	// EndPass waits for everything queued, releases the Temps, and returns
	// the first device error since the last EndPass (clearing it).
	EndPass() error
	// Flush marks the end of a layer's work (see the contract).
	Flush() error

	// Write queues a copy of src into dst (len(src) ≤ dst.N); src may be
	// reused as soon as Write returns.
	Write(dst Tensor, src []float32)
	// Read waits for everything queued and copies src into dst.
	Read(dst []float32, src Tensor) error
	// Copy queues dst[:src.N] = src.
	Copy(dst, src Tensor)

	// Resident makes a dense weight available to the device for the
	// lifetime of the graph (a GPU uploads it once). The matrix's bytes
	// must not change while the Mat is in use.
	Resident(m mlxq.Matrix) (Mat, error)
	// Constant is Resident for a float vector (norm weights, scales); the
	// device may keep v itself, so v must not change.
	Constant(v []float32) (Tensor, error)
	// Indices is Resident for a vector of element indices (Gather).
	Indices(ix []int32) (Index, error)

	// Expert makes a routed expert of src (the source w came from) available
	// until the end of the layer (the next Flush). When it returns, the
	// device no longer reads w's bytes unless it runs every queued op before
	// returning from the op (HostDevice), so the caller may Release w right
	// after queuing the work that uses the result.
	Expert(src ExpertSource, w *ExpertWeights) (ExpertMats, error)
	// CachedExpert returns src's expert of a layer from the device's own
	// cache of experts, when it keeps one and holds it: the expert source
	// need not be asked. A cache keys experts by (src, layer, expert), so
	// two models on one device never share an entry; a src whose dynamic
	// type is not comparable is not cached.
	CachedExpert(src ExpertSource, layer, expert int) (ExpertMats, bool)

	// NewKV returns an empty KV cache for an attention layer (see KVCache
	// for widths and Window).
	NewKV(kWidth, vWidth, window int) (KVState, error)
	// NewTensors returns a layer state made of zeroed tensors of the given
	// lengths (the DeltaNet conv window and recurrent state).
	NewTensors(sizes ...int) (TensorState, error)

	// MatMul computes y[i] = W·x[i] for the n rows of x.
	MatMul(w Mat, y, x Tensor, n int)
	// RMSNorm normalises s.Rows rows of s.Width floats (see NormSpec).
	RMSNorm(y, x, w Tensor, s NormSpec)
	// RoPE rotates s.Rows head vectors of x in place.
	RoPE(x Tensor, r *RoPE, s RoPESpec)
	// Attention runs causal attention for a chunk of T tokens over the
	// cache, as KVCache.Attend documents.
	Attention(kv KVState, O, Q, K, V Tensor, T int, d AttnDims)
	// DeltaNet runs the Gated DeltaNet mixer's conv and recurrence over a
	// chunk (see DeltaNetArgs).
	DeltaNet(st TensorState, a *DeltaNetArgs)
	// Gather writes dst[r·len(ix)+i] = src[r·srcStride+ix[i]] for rows r.
	Gather(dst, src Tensor, ix Index, rows, srcStride int)
	// GatherRows copies rows[i] of src into row i of dst (rows of width).
	GatherRows(dst, src Tensor, rows []int, width int)
	// ScatterRows copies row i of src into row rows[i] of dst.
	ScatterRows(dst, src Tensor, rows []int, width int)
	// GLU writes act(gate)·up element-wise into y (n floats).
	GLU(act Activation, y, gate, up Tensor, n int)
	// SigmoidMul does o[r·oStride+i] *= sigmoid(g[r·gStride+i]) for i below
	// width, for rows r.
	SigmoidMul(o, g Tensor, rows, width, oStride, gStride int)
	// Add does x[:n] += y[:n].
	Add(x, y Tensor, n int)
	// AddGated does out[r] += sigmoid(g[r])·x[r] for rows r of width
	// (a sigmoid-gated shared expert).
	AddGated(out, x, g Tensor, rows, width int)
	// Scale does x[:n] *= a.
	Scale(x Tensor, a float32, n int)
	// Softcap replaces x[:n] by cap·tanh(x/cap).
	Softcap(x Tensor, cap float32, n int)
	// Route computes routing from router logits [T, E] as
	// RouteSoftmaxTopK does (softmax, top r.K, renormalised when norm) and
	// fills r on the host: a wait (the experts to read depend on it). The
	// logits' contents afterwards are undefined.
	Route(r Routing, logits Tensor, T, E int, norm bool) error
	// Combine writes out[t] = Σ_j wts[t·k+j]·res[t·k+j] for T rows of width,
	// j in order; wts is on the host.
	Combine(out, res Tensor, wts []float32, T, k, width int)
}

// Layered is implemented by a Backend that has a Device: graphs then run
// their layers on it (runtime.Model.Device) instead of on the host device
// over the Backend. LayerDevice returns the same Device each time, or nil
// when it has none after all.
type Layered interface {
	LayerDevice() Device
}

// Buffer is a device's storage behind a Tensor (device memory, a Go slice).
type Buffer interface {
	// Len is its length in floats.
	Len() int
}

// Tensor is a range of floats of a Buffer: N floats from Off.
type Tensor struct {
	Buf    Buffer
	Off, N int
}

// Slice returns the view t[lo:hi].
func (t Tensor) Slice(lo, hi int) Tensor {
	if lo < 0 || hi < lo || hi > t.N {
		panic(fmt.Sprintf("nn: Tensor.Slice(%d, %d) of a tensor of %d floats", lo, hi, t.N))
	}
	return Tensor{Buf: t.Buf, Off: t.Off + lo, N: hi - lo}
}

// Mat is a weight matrix a device can multiply by: the matrix (its shape,
// quantization and host bytes) and the device's handle for it.
type Mat struct {
	W   mlxq.Matrix
	Dev any
}

// ExpertMats are one expert's three matrices on a device.
type ExpertMats struct {
	Gate, Up, Down Mat
}

// Index is a resident vector of element indices.
type Index struct {
	Host []int32 // the indices (kept for devices that compute on the host)
	Dev  any
}

// NormKind selects the RMSNorm variant.
type NormKind int

const (
	// NormWeight is x/rms(x)·w (MLX checkpoints store 1+w already).
	NormWeight NormKind = iota
	// NormOffset is x/rms(x)·(1+w).
	NormOffset
	// NormUnit is x/rms(x) (w is ignored).
	NormUnit
)

// NormSpec shapes an RMSNorm call: Rows rows of Width floats, row r of x at
// r·XStride and of y at r·YStride (a stride of 0 means Width), y and x may
// be the same tensor.
type NormSpec struct {
	Rows, Width      int
	XStride, YStride int
	Eps              float32
	Kind             NormKind
}

func (s NormSpec) strides() (int, int) {
	xs, ys := s.XStride, s.YStride
	if xs == 0 {
		xs = s.Width
	}
	if ys == 0 {
		ys = s.Width
	}
	return xs, ys
}

// RoPESpec shapes a RoPE call: Rows head vectors, row r at r·Stride, for
// position Pos0 + r/PerPos (PerPos heads per token).
type RoPESpec struct {
	Rows, PerPos, Stride, Pos0 int
}

// KVState is a device's KV cache of one attention layer.
type KVState interface {
	LayerState
	// Len is the number of positions the cache has seen.
	Len() int
}

// TensorState is a layer state made of tensors (Device.NewTensors).
type TensorState interface {
	LayerState
	// Tensor returns the i-th tensor.
	Tensor(i int) Tensor
}

// DeltaNetArgs is one Gated DeltaNet call over a chunk of T tokens. The
// state (Device.NewTensors) holds the conv window [K-1][C], oldest first,
// and the recurrent state [Nv][Dk][Dv]. Mixed [T, C] is the q|k|v
// projection before the conv (C = 2·Nk·Dk + Nv·Dv), Z [T, Nv·Dv] the gate,
// B and A [T, Nv] the beta and decay inputs. Per token: the causal conv and
// SiLU over the window, the L2 norms of q (then ×Dk^-1/2) and k per key
// head, then per value head h (key head h/(Nv/Nk)): S ← exp(NegA·
// softplus(a+DtBias))·S, δ = sigmoid(b)·(v − Sᵀk), S ← S + k⊗δ, o = Sᵀq,
// and Y = rmsnorm(o)·Norm·silu(z), into Y [T, Nv·Dv].
type DeltaNetArgs struct {
	T                  int
	Nk, Nv, Dk, Dv, K  int
	Eps                float32
	Y, Mixed, Z, B, A  Tensor
	Conv               Tensor // [C][K]
	NegA, DtBias, Norm Tensor // [Nv], [Nv], [Dv]
}

// ConvDim is C, the conv's channels.
func (a *DeltaNetArgs) ConvDim() int { return 2*a.Nk*a.Dk + a.Nv*a.Dv }
