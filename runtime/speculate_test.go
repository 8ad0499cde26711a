package runtime_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime"
)

// guessingSource records what a speculating forward pass tells its expert
// source, and scores each guess against the Prefetch that follows it.
type guessingSource struct {
	runtime.ExpertSource
	t          *testing.T
	log        []string
	pending    []int // the last guess, until its Prefetch
	layer      int
	hit, total int
	E, max     int // experts per layer; the most a guess may name
}

func (g *guessingSource) Speculate(l int, experts []int) {
	g.log = append(g.log, fmt.Sprint("S", l))
	if g.pending != nil {
		g.t.Errorf("guess for layer %d while the guess for layer %d has no Prefetch", l, g.layer)
	}
	g.pending, g.layer = slices.Clone(experts), l
	seen := map[int]bool{}
	for _, e := range experts {
		if e < 0 || e >= g.E || seen[e] {
			g.t.Errorf("guess for layer %d: %v: expert out of range or repeated", l, experts)
		}
		seen[e] = true
	}
	if g.max > 0 && len(experts) > g.max {
		g.t.Errorf("guess for layer %d names %d experts, want at most %d", l, len(experts), g.max)
	}
}

func (g *guessingSource) Prefetch(l int, experts []int) {
	g.log = append(g.log, fmt.Sprint("P", l))
	if g.pending == nil || g.layer != l {
		g.t.Errorf("Prefetch for layer %d without a guess for it first", l)
		return
	}
	for _, e := range experts {
		if slices.Contains(g.pending, e) {
			g.hit++
		}
	}
	g.total += len(experts)
	g.pending = nil
}

func identicalBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// Speculation is a pure hint: with any guess size the logits are the same,
// bit for bit, as without it, in a chunked prefill and in decode. Each
// sparse layer gets one guess before its Prefetch, of the top n per token
// (all distinct, valid experts, at most T·n of them).
func TestSpeculateDoesNotChangeLogits(t *testing.T) {
	for _, d := range variants() {
		t.Run(name(d), func(t *testing.T) {
			ref := mustModel(t, d, 3)
			run := func(m *runtime.Model, n int, src *guessingSource) [][]float32 {
				st := m.NewState()
				var out [][]float32
				if src != nil {
					src.max = min(7*n, d.Experts)
				}
				l, err := m.Forward(st, testTokens[:7], &runtime.ForwardOptions{AllLogits: true, Speculate: n})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, l)
				if src != nil {
					src.max = min(n, d.Experts) // one token: its top n
				}
				for _, tok := range testTokens[7:] {
					if l, err = m.Forward(st, []int{tok}, &runtime.ForwardOptions{Speculate: n}); err != nil {
						t.Fatal(err)
					}
					out = append(out, l)
				}
				return out
			}
			want := run(ref, 0, nil)
			for _, n := range []int{1, d.TopK, d.Experts + 5} {
				g := gen(t, d, 3)
				src := &guessingSource{ExpertSource: g.Experts, t: t, E: d.Experts}
				m, err := runtime.NewModel(g.Config, g.Tensors, src, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := run(m, n, src)
				for i := range want {
					if !identicalBits(got[i], want[i]) {
						t.Fatalf("speculating %d per token: logits of pass %d differ", n, i)
					}
				}
				sparse := 0
				for _, s := range g.Config.Sparse {
					if s {
						sparse++
					}
				}
				passes := 1 + len(testTokens) - 7
				if len(src.log) != 2*passes*sparse {
					t.Fatalf("speculating %d: %d calls, want a guess and a Prefetch for each of %d sparse layers in %d passes: %v",
						n, len(src.log), sparse, passes, src.log)
				}
			}
		})
	}
}

// The guess is worth having: on the tiny model (top 2 of 8 experts) a
// guess of the top 2 from the residual entering the layer finds well over
// the 25% of the real batch that chance would.
func TestSpeculationGuessesWell(t *testing.T) {
	d := tinyDims(runtime.TypeQwen35MoE, 4, 32)
	g := gen(t, d, 5)
	src := &guessingSource{ExpertSource: g.Experts, t: t, E: d.Experts, max: d.TopK}
	m, err := runtime.NewModel(g.Config, g.Tensors, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := m.NewState()
	tok := 1
	for i := range 48 {
		l, err := m.Forward(st, []int{tok}, &runtime.ForwardOptions{Speculate: d.TopK})
		if err != nil {
			t.Fatal(err)
		}
		tok = (argmaxOf(l) + 37*i) % d.Vocab
	}
	recall := float64(src.hit) / float64(src.total)
	t.Logf("top-%d of %d guessed from the layer's input: %.1f%% of the real experts", d.TopK, d.Experts, 100*recall)
	if recall < 0.5 {
		t.Errorf("the guess found %.1f%% of the experts, want at least 50%% (chance: 25%%)", 100*recall)
	}
}
