package nn

// LayerState is the decode state one layer keeps between forward passes
// (a KV cache, a recurrent state). A State of package runtime holds one
// per layer, and its snapshots (prefix reuse) are made of Clones.
type LayerState interface {
	// Reset empties the state (position 0), keeping its buffers.
	Reset()
	// Clone returns an independent copy.
	Clone() LayerState
	// Restore replaces the state with a copy of from, reusing its own
	// buffers where they are large enough. It reports false, changing
	// nothing, if from is not a state of the same kind and shape.
	Restore(from LayerState) bool
	// Bytes is the memory the state's tensors take.
	Bytes() int64
}

// CloneF32 copies x (nil stays nil).
func CloneF32(x []float32) []float32 {
	if x == nil {
		return nil
	}
	return append(make([]float32, 0, len(x)), x...)
}
