package runtime

import "fmt"

// State is the decode state of one sequence: the position and each layer's
// state (the KV cache of an attention layer, the conv window and recurrent
// state of a Gated DeltaNet layer, ...). A State belongs to the Model that
// made it.
type State struct {
	m      *Model
	pos    int
	layers []LayerState
	err    error // making the layer states on the device failed
}

// NewState returns an empty decode state (position 0) on the model's
// device. If the device cannot hold it, Forward returns that error.
func (m *Model) NewState() *State {
	layers, err := m.graph.NewLayerStates(m.Device())
	return &State{m: m, layers: layers, err: err}
}

// Pos is the number of tokens the state has seen.
func (s *State) Pos() int { return s.pos }

// Reset empties the state (position 0), keeping its buffers.
func (s *State) Reset() {
	s.pos = 0
	for _, l := range s.layers {
		if l != nil {
			l.Reset()
		}
	}
}

// ForwardOptions selects what Forward returns.
type ForwardOptions struct {
	// AllLogits returns logits for every token of the chunk; otherwise only
	// for the last one.
	AllLogits bool
	// NoLogits skips the final norm and lm_head (a prefill chunk whose
	// logits are not needed). It overrides AllLogits.
	NoLogits bool
	// Speculate, if > 0 and the expert source is an ExpertSpeculator,
	// guesses each sparse layer's experts before its mixer (attention,
	// DeltaNet) runs, from the residual stream entering the layer (each
	// architecture says how: qwen applies layer l's router to it, normed
	// with the layer's post_attention_layernorm), picks the top Speculate
	// experts per token, and Speculate(l, guess) lets the source start
	// reading them while the mixer computes. The guess is only a hint: the
	// results are the same, bit for bit, with or without it.
	Speculate int
	// LayerHook, if set, is called after each decoder layer with that
	// layer's output hidden states [T, Hidden] (before the final norm). The
	// slice is reused: copy what you keep.
	LayerHook func(layer int, hidden []float32)
	// Into, if its capacity holds the logits, receives them and is
	// returned resliced, instead of a new slice: a decode loop passes the
	// previous step's logits, which it is done with (at a 248K vocabulary a
	// step would otherwise allocate 1 MB for the collector to sweep).
	Into []float32
}

// LogitsBuffer returns a slice of n floats for a graph's logits: o.Into
// resliced when it is large enough, else a new slice.
func (o *ForwardOptions) LogitsBuffer(n int) []float32 {
	if o != nil && cap(o.Into) >= n {
		return o.Into[:n]
	}
	return make([]float32, n)
}

// Forward runs a chunk of tokens through the model, continuing from st, and
// returns float32 logits [rows, Vocab] (rows = len(tokens) with AllLogits,
// else 1; none with NoLogits). Matrix products run over the whole chunk;
// each routed expert a chunk needs is fetched once. If Forward returns an
// error after the token check, st is left inconsistent and must be Reset.
func (m *Model) Forward(st *State, tokens []int, opt *ForwardOptions) ([]float32, error) {
	if opt == nil {
		opt = &ForwardOptions{}
	}
	if st == nil || st.m != m {
		return nil, fmt.Errorf("forward: state does not belong to this model")
	}
	if st.err != nil {
		return nil, fmt.Errorf("forward: %w", st.err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("forward: no tokens")
	}
	V := m.Config.Vocab
	for i, tok := range tokens {
		if tok < 0 || tok >= V {
			return nil, fmt.Errorf("forward: token %d at index %d out of range [0, %d)", tok, i, V)
		}
	}
	logits, err := m.graph.Forward(Env{Device: m.Device(), Backend: m.Backend, Experts: m.Experts}, st.layers, st.pos, tokens, opt)
	if err != nil {
		return nil, err
	}
	st.pos += len(tokens)
	return logits, nil
}
