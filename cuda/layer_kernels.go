package cuda

import (
	"errors"

	"github.com/qpack-go/qpack/runtime/nn"
)

// Launchers of the whole-layer kernels (internal/gpukernels' bodies). Each
// works on device addresses, checks its extents (every element it addresses
// below 2^31), builds the kernel's parameter block and queues the kernel on
// the backend's stream (b.launch); it waits for nothing. The caller holds
// b.mu. Tensors are float32; index vectors int32.

var errNotYet = errors.New("cuda: layer kernels not implemented yet")

// deltaNetPtrs are the device addresses and shape of one Gated DeltaNet call
// (nn.DeltaNetArgs with its tensors on the device).
type deltaNetPtrs struct {
	T, Nk, Nv, Dk, Dv, K int
	Eps                  float32
	Window               devptr // [K-1][C] conv window, oldest first (updated)
	State                devptr // [Nv][Dk][Dv] recurrent state (updated)
	Scratch              devptr // T·C floats: the conv output (q|k|v per token)
	Y                    devptr // [T][Nv·Dv] output
	Mixed                devptr // [T][C]
	Z                    devptr // [T][Nv·Dv]
	B, A                 devptr // [T][Nv]
	Conv                 devptr // [C][K]
	NegA, DtBias         devptr // [Nv]
	Norm                 devptr // [Dv]
}

// kRMSNorm normalises s.Rows rows of s.Width floats as nn.NormSpec says
// (row r of x at r·XStride, of y at r·YStride; 0 means Width); y == x is
// allowed. w is ignored (may be 0) for nn.NormUnit.
func (b *Backend) kRMSNorm(y, x, w devptr, s nn.NormSpec) error { return errNotYet }

// kRoPE rotates s.Rows head vectors of x in place (row r at r·s.Stride,
// position s.Pos0 + r/s.PerPos): pair i < pairs by angle pos·invFreq[i]
// (invFreq: pairs floats on the device), dims (i, i+half), or (2i, 2i+1)
// when interleaved (half is then unused).
func (b *Backend) kRoPE(x, invFreq devptr, pairs, half int, interleaved bool, s nn.RoPESpec) error {
	return errNotYet
}

// kAttention writes o [T][Heads·VDim] for a chunk of T queries q [T][Heads·
// QStride] at positions pos..pos+T-1: each attends (causally; only the last
// window positions when window > 0) to keys and values of positions < pos
// in the cache kc, vc (rows of kWidth, vWidth floats; position j at row j,
// or j % window when window > 0) and of positions ≥ pos in the chunk's k
// [T][kWidth], v [T][vWidth]. It only reads the cache.
func (b *Backend) kAttention(o, q, k, v, kc, vc devptr, pos, T, window, kWidth, vWidth int, d nn.AttnDims) error {
	return errNotYet
}

// kDeltaNet runs the Gated DeltaNet conv, q/k norms and recurrence over a
// chunk (nn.DeltaNetArgs documents the arithmetic), updating the window and
// state; a.Scratch receives the conv output.
func (b *Backend) kDeltaNet(a *deltaNetPtrs) error { return errNotYet }

// kGather writes dst[r·n+i] = src[r·srcStride+ix[i]] for rows r (ix: n
// int32 on the device).
func (b *Backend) kGather(dst, src, ix devptr, n, rows, srcStride int) error { return errNotYet }

// kGatherRows copies row rows[i] of src into row i of dst for i < n (rows:
// n int32 on the device, each below srcRows; rows of width floats).
func (b *Backend) kGatherRows(dst, src, rows devptr, n, srcRows, width int) error { return errNotYet }

// kScatterRows copies row i of src into row rows[i] of dst for i < n (rows:
// n distinct int32 on the device, each below dstRows).
func (b *Backend) kScatterRows(dst, src, rows devptr, n, dstRows, width int) error { return errNotYet }

// kGLU writes act(gate)·up into y (n floats; y may be gate or up).
func (b *Backend) kGLU(act nn.Activation, y, gate, up devptr, n int) error { return errNotYet }

// kSigmoidMul does o[r·oStride+i] *= sigmoid(g[r·gStride+i]) for i < width,
// r < rows.
func (b *Backend) kSigmoidMul(o, g devptr, rows, width, oStride, gStride int) error {
	return errNotYet
}

// kAdd does x[:n] += y[:n].
func (b *Backend) kAdd(x, y devptr, n int) error { return errNotYet }

// kAddGated does out[r] += sigmoid(g[r])·x[r] for rows r < rows of width.
func (b *Backend) kAddGated(out, x, g devptr, rows, width int) error { return errNotYet }

// kScale does x[:n] *= a.
func (b *Backend) kScale(x devptr, a float32, n int) error { return errNotYet }

// kSoftcap replaces x[:n] by cap·tanh(x/cap) (cap > 0).
func (b *Backend) kSoftcap(x devptr, cap float32, n int) error { return errNotYet }

// kCombine writes out[t] = Σ_j wts[t·k+j]·res[t·k+j] for T rows of width,
// j in order (wts: T·k floats on the device).
func (b *Backend) kCombine(out, res, wts devptr, T, k, width int) error { return errNotYet }

// kRouteTopK computes, per token t < T, the softmax of logits [T][E] and its
// top k (descending; ties to the lower index, as nn.TopK), into sel [T][k]
// int32 and wts [T][k] floats, renormalised to sum to one when norm. The
// logits are only read.
func (b *Backend) kRouteTopK(sel, wts, logits devptr, T, E, k int, norm bool) error {
	return errNotYet
}
