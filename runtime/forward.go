package runtime

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/nn"
)

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
	// Top, if set, asks for the top of the last token's logits instead of
	// the logits, where the device selects it itself (nn.TopSelector): see
	// TopRequest. It is ignored with AllLogits or NoLogits.
	Top *TopRequest
}

// TopRequest asks Forward for the top of the last token's logits instead of
// the logits. A decode step that samples with a top-k (or greedily) needs
// only the few largest logits (sample.Sampler.TopK, SampleTop): a device
// that selects them (nn.TopSelector) brings back those instead of the whole
// vector, which at a 248K vocabulary is a 1 MB download and a host scan of
// 100-300 µs a step.
//
// Forward then returns nil logits and no error, with C filled: the top K of
// the last token's final logits (after any softcapping), C.N the
// vocabulary. Otherwise (the device selects nothing, declines, or Accept
// refuses the selection) it returns the logits as usual and C is empty.
// One request may serve every step of a decode loop: Forward resets C, and
// C's storage is reused.
type TopRequest struct {
	K int // the k (Sampler.TopK); 0 or less: no selection
	// Accept, if set, sees the selection before Forward gives up the
	// logits; false makes Forward read the whole logits instead (a
	// sampler that cannot draw its token from these candidates:
	// Sampler.AcceptsTop). nil accepts any.
	Accept func(c *nn.TopLogits) bool
	C      nn.TopLogits // filled when Forward returns nil logits and no error
}

// SelectTop is where a graph ends a pass whose last token's logits are out
// (vocab floats on dev, final: nothing is applied to them after): when o
// asks for the top (Top with K > 0, neither AllLogits nor NoLogits) and
// the device selects it, it fills o.Top.C and reports done, and the graph
// returns nil logits; otherwise the graph reads out as usual. A device's
// error is returned as is; a selection that is not of vocab logits is an
// error (a device's bug), never a silent fallback.
func (o *ForwardOptions) SelectTop(dev nn.Device, out nn.Tensor, vocab int) (done bool, err error) {
	if o == nil || o.Top == nil || o.Top.K <= 0 || o.AllLogits || o.NoLogits {
		return false, nil
	}
	sel, ok := dev.(nn.TopSelector)
	if !ok || !sel.SelectsTop(vocab, o.Top.K) {
		return false, nil
	}
	r := o.Top
	r.C.Reset()
	done, err = sel.SelectTop(&r.C, out, vocab, r.K)
	switch {
	case err != nil:
		r.C.Reset()
		return false, err
	case !done:
		r.C.Reset()
		return false, nil
	case r.C.N != vocab || len(r.C.IDs) != len(r.C.Logits) || len(r.C.IDs) == 0:
		err = fmt.Errorf("forward: %s selected %d ids and %d logits of %d, want a top of the %d logits", dev.Name(), len(r.C.IDs), len(r.C.Logits), r.C.N, vocab)
		r.C.Reset()
		return false, err
	case r.Accept != nil && !r.Accept(&r.C):
		r.C.Reset()
		return false, nil
	}
	return true, nil
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
// else 1; none with NoLogits, and none when opt.Top's selection replaces
// them: see TopRequest). Matrix products run over the whole chunk;
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
	if opt.Top != nil {
		opt.Top.C.Reset() // a graph that selects nothing leaves it empty
	}
	m.Mark("the graph's Forward called")
	logits, err := m.graph.Forward(Env{Device: m.Device(), Backend: m.Backend, Experts: m.Experts}, st.layers, st.pos, tokens, opt)
	m.Mark("the graph's Forward returns")
	if err != nil {
		return nil, err
	}
	if logits == nil && !opt.NoLogits && (opt.Top == nil || opt.Top.C.N != V) {
		// A caller would take this for a selection it did not get.
		return nil, fmt.Errorf("forward: the %s graph returned no logits and no top of them", m.Config.ModelType)
	}
	st.pos += len(tokens)
	return logits, nil
}
