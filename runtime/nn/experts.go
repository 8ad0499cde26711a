package nn

import "github.com/qpack-go/qpack/runtime/mlxq"

// ExpertWeights is one routed expert of one layer: three matrices (gate and
// up [I, H], down [H, I]) that are views into a byte buffer the source owns.
type ExpertWeights struct {
	Layer, Expert  int
	Gate, Up, Down mlxq.Matrix
	Buf            []byte // the bytes the matrices point into
}

// ExpertSource hands out routed experts. The forward pass asks for each
// expert it needs once per layer and chunk, computes with it, and releases
// it; the matrices must stay valid until Release. Implementations must be
// safe for concurrent use.
type ExpertSource interface {
	Expert(layer, expert int) (*ExpertWeights, error)
	Release(w *ExpertWeights)
}

// ExpertPrefetcher is an optional extension of ExpertSource. Before the
// forward pass requests the routed experts of a layer for a chunk, it calls
// Prefetch once with all of them (ascending, each once: the union of the
// chunk's routed experts); it then computes what overlaps the reads (the
// shared expert, a dense MLP) and only then calls Expert for each of them
// in the same order. A source can start its reads in Prefetch so that they
// overlap that compute. Prefetch must not block on I/O; errors surface from
// Expert.
type ExpertPrefetcher interface {
	Prefetch(layer int, experts []int)
}

// ExpertSpeculator is an optional extension of ExpertPrefetcher. When the
// forward pass is asked to speculate (ForwardOptions.Speculate), it calls
// Speculate(l, guess) before layer l's mixer (attention, DeltaNet), with
// the experts that layer l's router picks from the hidden state entering
// the layer, most likely first: a guess at the Prefetch that follows the
// mixer. A source can start reading them so that the reads overlap the
// mixer. It is a hint: it must not block on I/O, must not change what
// Expert returns, and the next Prefetch supersedes it.
type ExpertSpeculator interface {
	Speculate(layer int, experts []int)
}
