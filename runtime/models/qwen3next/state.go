package qwen3next

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
)

// NewLayerStates implements runtime.Graph: a KV cache per full-attention
// layer, and per DeltaNet layer two tensors, the last K-1 conv inputs
// (oldest first, [K-1][C]) and the recurrent state [Nv][dk][dv].
func (m *graph) NewLayerStates(dev nn.Device) ([]runtime.LayerState, error) {
	c := m.cfg
	out := make([]runtime.LayerState, len(m.layers))
	for l, ly := range m.layers {
		var err error
		if ly.lin != nil {
			out[l], err = dev.NewTensors((c.ConvKernel-1)*c.ConvDim(), c.LinValueHeads*c.LinKeyHeadDim*c.LinValHeadDim)
		} else {
			kvw := c.KVHeads * c.HeadDim
			out[l], err = dev.NewKV(kvw, kvw, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("layer %d state on %s: %w", l, dev.Name(), err)
		}
	}
	return out, nil
}

func errState(l int, s runtime.LayerState) error {
	return fmt.Errorf("layer %d: state %T is not this layer's kind (a state of another model or device)", l, s)
}
