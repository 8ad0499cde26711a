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

// Forward runs the MLP over T rows of xn into out [T, Down.Rows] on the
// binding's device.
func (d *MLP) Forward(b *Binding, xn, out Tensor, T int) {
	glu(b.Dev, ExpertMats{Gate: b.M(&d.Gate), Up: b.M(&d.Up), Down: b.M(&d.Down)}, d.Act, xn, out, T)
}
