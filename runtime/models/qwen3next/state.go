package qwen3next

import (
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
)

// deltaState is a Gated DeltaNet layer's decode state: the last K-1 conv
// inputs, oldest first, [K-1][C], and the recurrent state [Nv][dk][dv].
type deltaState struct {
	conv, rec []float32
}

func (s *deltaState) Reset() {
	clear(s.conv)
	clear(s.rec)
}

func (s *deltaState) Clone() nn.LayerState {
	return &deltaState{conv: nn.CloneF32(s.conv), rec: nn.CloneF32(s.rec)}
}

func (s *deltaState) Restore(from nn.LayerState) bool {
	f, ok := from.(*deltaState)
	if !ok || len(f.conv) != len(s.conv) || len(f.rec) != len(s.rec) {
		return false
	}
	copy(s.conv, f.conv)
	copy(s.rec, f.rec)
	return true
}

func (s *deltaState) Bytes() int64 { return 4 * int64(len(s.conv)+len(s.rec)) }

// NewLayerStates implements runtime.Graph: a KV cache per full-attention
// layer, a conv window and recurrent state per DeltaNet layer.
func (m *graph) NewLayerStates() []runtime.LayerState {
	c := m.cfg
	out := make([]runtime.LayerState, len(m.layers))
	for l, ly := range m.layers {
		if ly.lin != nil {
			out[l] = &deltaState{conv: make([]float32, (c.ConvKernel-1)*c.ConvDim()),
				rec: make([]float32, c.LinValueHeads*c.LinKeyHeadDim*c.LinValHeadDim)}
		} else {
			kvw := c.KVHeads * c.HeadDim
			out[l] = nn.NewKVCache(kvw, kvw, 0)
		}
	}
	return out
}
