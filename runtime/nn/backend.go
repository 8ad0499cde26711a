package nn

import "github.com/qpack-go/qpack/runtime/mlxq"

// Backend is the seam between a model graph and the hardware that runs its
// heavy arithmetic (runtime.Backend is this interface; see its contract
// there). CPU is the pure-Go implementation; package metal implements the
// same methods on Apple GPUs.
type Backend interface {
	// MatMul computes y[i] = W·x[i] for each of the n rows.
	MatMul(w mlxq.Matrix, y, x []float32, n int)
	// RMSNorm writes x/sqrt(mean(x²)+eps)·w for each row of len(w).
	RMSNorm(y, x, w []float32, eps float32)
	// SwiGLU writes silu(gate)·up element-wise.
	SwiGLU(y, gate, up []float32)
}

// CPU is the pure-Go backend: products on the packed MLX data through mlxq
// (which splits large products by rows over GOMAXPROCS goroutines).
type CPU struct{}

// MatMul implements Backend.
func (CPU) MatMul(w mlxq.Matrix, y, x []float32, n int) {
	w.MatMul(y[:n*w.Rows], x[:n*w.Cols], n)
}

// RMSNorm implements Backend.
func (CPU) RMSNorm(y, x, w []float32, eps float32) { RMSNormRows(y, x, w, eps) }

// SwiGLU implements Backend.
func (CPU) SwiGLU(y, gate, up []float32) { SwiGLU(y, gate, up) }
