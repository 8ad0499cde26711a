package nn

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// HostDevice is the reference Device: tensors are Go slices, every
// operation runs when it is called with this package's arithmetic, and the
// matrix products, full-row weighted norms and SwiGLU go through Backend
// (CPU when nil). It never fails. Its results are the runner's reference:
// the graphs' outputs through it are the transformers references' (see
// runtime's reference tests).
type HostDevice struct {
	Backend Backend
}

// hostBuf is HostDevice's storage.
type hostBuf []float32

func (b hostBuf) Len() int { return len(b) }

// HostTensor wraps a Go slice as a tensor of a HostDevice.
func HostTensor(x []float32) Tensor { return Tensor{Buf: hostBuf(x), N: len(x)} }

// F32 returns the floats of a HostDevice tensor. It panics for another
// device's tensor.
func F32(t Tensor) []float32 {
	b, ok := t.Buf.(hostBuf)
	if !ok {
		panic(fmt.Sprintf("nn: a %T tensor used with the host device", t.Buf))
	}
	return b[t.Off : t.Off+t.N : t.Off+t.N]
}

func (d HostDevice) be() Backend {
	if d.Backend == nil {
		return CPU{}
	}
	return d.Backend
}

// Name implements Device.
func (d HostDevice) Name() string { return fmt.Sprintf("host (%T)", d.be()) }

// Alloc implements Device.
func (HostDevice) Alloc(n int) (Tensor, error) { return HostTensor(make([]float32, n)), nil }

// Free implements Device.
func (HostDevice) Free(Tensor) {}

// Temp implements Device.
func (HostDevice) Temp(n int) Tensor { return HostTensor(make([]float32, n)) }

// EndPass implements Device.
func (HostDevice) EndPass() error { return nil }

// Flush implements Device.
func (HostDevice) Flush() error { return nil }

// Write implements Device.
func (HostDevice) Write(dst Tensor, src []float32) { copy(F32(dst)[:len(src)], src) }

// Read implements Device.
func (HostDevice) Read(dst []float32, src Tensor) error {
	copy(dst, F32(src))
	return nil
}

// Copy implements Device.
func (HostDevice) Copy(dst, src Tensor) { copy(F32(dst)[:src.N], F32(src)) }

// Resident implements Device.
func (HostDevice) Resident(m mlxq.Matrix) (Mat, error) { return Mat{W: m}, nil }

// Constant implements Device.
func (HostDevice) Constant(v []float32) (Tensor, error) { return HostTensor(v), nil }

// Indices implements Device.
func (HostDevice) Indices(ix []int32) (Index, error) { return Index{Host: ix}, nil }

// Expert implements Device: the products read w's bytes when they are
// called, so w may be released once they have been.
func (HostDevice) Expert(_ ExpertSource, w *ExpertWeights) (ExpertMats, error) {
	return ExpertMats{Gate: Mat{W: w.Gate}, Up: Mat{W: w.Up}, Down: Mat{W: w.Down}}, nil
}

// CachedExpert implements Device: the host device keeps no cache of its own.
func (HostDevice) CachedExpert(ExpertSource, int, int) (ExpertMats, bool) {
	return ExpertMats{}, false
}

// NewKV implements Device.
func (HostDevice) NewKV(kWidth, vWidth, window int) (KVState, error) {
	return NewKVCache(kWidth, vWidth, window), nil
}

// NewTensors implements Device.
func (HostDevice) NewTensors(sizes ...int) (TensorState, error) {
	s := &hostTensors{t: make([][]float32, len(sizes))}
	for i, n := range sizes {
		s.t[i] = make([]float32, n)
	}
	return s, nil
}

// hostTensors is HostDevice's TensorState.
type hostTensors struct{ t [][]float32 }

func (s *hostTensors) Tensor(i int) Tensor { return HostTensor(s.t[i]) }

func (s *hostTensors) Reset() {
	for _, t := range s.t {
		clear(t)
	}
}

func (s *hostTensors) Clone() LayerState {
	c := &hostTensors{t: make([][]float32, len(s.t))}
	for i, t := range s.t {
		c.t[i] = CloneF32(t)
	}
	return c
}

func (s *hostTensors) Restore(from LayerState) bool {
	f, ok := from.(*hostTensors)
	if !ok || len(f.t) != len(s.t) {
		return false
	}
	for i := range s.t {
		if len(f.t[i]) != len(s.t[i]) {
			return false
		}
	}
	for i := range s.t {
		copy(s.t[i], f.t[i])
	}
	return true
}

func (s *hostTensors) Bytes() int64 {
	var n int64
	for _, t := range s.t {
		n += 4 * int64(len(t))
	}
	return n
}

// MatMul implements Device.
func (d HostDevice) MatMul(w Mat, y, x Tensor, n int) {
	d.be().MatMul(w.W, F32(y), F32(x), n)
}

// RMSNorm implements Device. Whole rows with a weight go through the
// Backend; strided rows (per-head norms) and the other kinds are computed
// here.
func (d HostDevice) RMSNorm(y, x, w Tensor, s NormSpec) {
	xs, ys := s.strides()
	X, Y := F32(x), F32(y)
	if s.Kind == NormWeight && xs == s.Width && ys == s.Width {
		d.be().RMSNorm(Y[:s.Rows*s.Width], X[:s.Rows*s.Width], F32(w)[:s.Width], s.Eps)
		return
	}
	var W []float32
	if s.Kind != NormUnit {
		W = F32(w)[:s.Width]
	}
	for r := range s.Rows {
		xr := X[r*xs : r*xs+s.Width]
		yr := Y[r*ys : r*ys+s.Width]
		switch s.Kind {
		case NormWeight:
			RMSNorm(yr, xr, W, s.Eps)
		case NormOffset:
			RMSNormOffset(yr, xr, W, s.Eps)
		default:
			RMSNormUnit(yr, xr, s.Eps)
		}
	}
}

// RoPE implements Device.
func (HostDevice) RoPE(x Tensor, r *RoPE, s RoPESpec) {
	X := F32(x)
	hd := 2 * r.Half
	if r.Interleaved {
		hd = 2 * len(r.InvFreq)
	}
	for i := range s.Rows {
		r.Apply(X[i*s.Stride:i*s.Stride+hd], s.Pos0+i/s.PerPos)
	}
}

// Attention implements Device.
func (HostDevice) Attention(kv KVState, O, Q, K, V Tensor, T int, d AttnDims) {
	c, ok := kv.(*KVCache)
	if !ok {
		panic(fmt.Sprintf("nn: a %T KV cache used with the host device", kv))
	}
	c.Attend(F32(O), F32(Q), F32(K), F32(V), T, d)
}

// DeltaNet implements Device.
func (HostDevice) DeltaNet(st TensorState, a *DeltaNetArgs) {
	DeltaNetHost(F32(st.Tensor(0)), F32(st.Tensor(1)), a)
}

// Gather implements Device.
func (HostDevice) Gather(dst, src Tensor, ix Index, rows, srcStride int) {
	D, S := F32(dst), F32(src)
	n := len(ix.Host)
	for r := range rows {
		row := D[r*n : (r+1)*n]
		for i, j := range ix.Host {
			row[i] = S[r*srcStride+int(j)]
		}
	}
}

// GatherRows implements Device.
func (HostDevice) GatherRows(dst, src Tensor, rows []int, width int) {
	D, S := F32(dst), F32(src)
	for i, r := range rows {
		copy(D[i*width:(i+1)*width], S[r*width:(r+1)*width])
	}
}

// ScatterRows implements Device.
func (HostDevice) ScatterRows(dst, src Tensor, rows []int, width int) {
	D, S := F32(dst), F32(src)
	for i, r := range rows {
		copy(D[r*width:(r+1)*width], S[i*width:(i+1)*width])
	}
}

// GLU implements Device.
func (d HostDevice) GLU(act Activation, y, gate, up Tensor, n int) {
	GLU(d.be(), act, F32(y)[:n], F32(gate)[:n], F32(up)[:n])
}

// SigmoidMul implements Device.
func (HostDevice) SigmoidMul(o, g Tensor, rows, width, oStride, gStride int) {
	O, G := F32(o), F32(g)
	for r := range rows {
		or := O[r*oStride : r*oStride+width]
		gr := G[r*gStride : r*gStride+width]
		for i := range or {
			or[i] *= Sigmoid(gr[i])
		}
	}
}

// Add implements Device.
func (HostDevice) Add(x, y Tensor, n int) { AddTo(F32(x)[:n], F32(y)[:n]) }

// AddGated implements Device.
func (HostDevice) AddGated(out, x, g Tensor, rows, width int) {
	O, X, G := F32(out), F32(x), F32(g)
	for r := range rows {
		Axpy(O[r*width:(r+1)*width], Sigmoid(G[r]), X[r*width:(r+1)*width])
	}
}

// Scale implements Device.
func (HostDevice) Scale(x Tensor, a float32, n int) { Scale(F32(x)[:n], a) }

// Softcap implements Device.
func (HostDevice) Softcap(x Tensor, cap float32, n int) { Softcap(F32(x)[:n], cap) }

// Route implements Device.
func (HostDevice) Route(r Routing, logits Tensor, T, E int, norm bool) error {
	RouteSoftmaxTopK(r, F32(logits)[:T*E], T, E, norm)
	return nil
}

// Combine implements Device.
func (HostDevice) Combine(out, res Tensor, wts []float32, T, k, width int) {
	O, R := F32(out), F32(res)
	clear(O[:T*width])
	for t := range T {
		o := O[t*width : (t+1)*width]
		for j := range k {
			s := t*k + j
			Axpy(o, wts[s], R[s*width:(s+1)*width])
		}
	}
}
