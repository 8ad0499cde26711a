package nn

import "github.com/qpack-go/qpack/runtime/mlxq"

// Activation is the gate activation of a GLU.
type Activation int

const (
	// SiLUGate is SwiGLU: silu(gate)·up (through the backend).
	SiLUGate Activation = iota
	// GELUTanhGate is GeGLU with the tanh GELU: gelu(gate)·up.
	GELUTanhGate
)

// GLU writes act(gate)·up element-wise into y.
func GLU(be Backend, act Activation, y, gate, up []float32) {
	switch act {
	case GELUTanhGate:
		for i, g := range gate {
			y[i] = GELUTanh(g) * up[i]
		}
	default:
		be.SwiGLU(y, gate, up)
	}
}

// MLP is a dense gated MLP: down(act(gate·x) · up·x).
type MLP struct {
	Gate, Up, Down mlxq.Matrix
	Act            Activation
}

// Forward runs the MLP over T rows of xn into out [T, Down.Rows].
func (d *MLP) Forward(be Backend, xn, out []float32, T int) {
	inter := d.Gate.Rows
	g := make([]float32, T*inter)
	u := make([]float32, T*inter)
	be.MatMul(d.Gate, g, xn, T)
	be.MatMul(d.Up, u, xn, T)
	GLU(be, d.Act, g, g, u)
	be.MatMul(d.Down, out, g, T)
}
