package gemma4_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/internal/reference"
	_ "github.com/qpack-go/qpack/runtime/models/gemma4"
)

// The references come from transformers 5.17 (testdata/reference/
// gemma4_reference.py) run on the tiny Gemma 4 checkpoints of
// testdata/tiny; gemma4_README.md says what each covers.
var variants = []struct {
	name string
	tol  float64
}{
	{"gemma4-f32", 1e-4},
	{"gemma4-q4g32", 1e-3},
	{"gemma4-nokeqv-f32", 1e-4},
	{"gemma4-towers-q4g64", 1e-3},
}

const (
	tinyDir = "../../../testdata/tiny"
	refDir  = "../../../testdata/reference"
)

// must returns v, failing the test on err (called as must(f())(t)).
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

func TestAgainstTransformers(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			ref := must(reference.Open(filepath.Join(refDir, "gemma4_"+v.name+".safetensors")))(t)
			ids := must(ref.Ints("input_ids"))(t)
			want := must(ref.Floats("logits"))(t)
			m := must(runtime.Load(filepath.Join(tinyDir, v.name), nil))(t)
			defer m.Close()
			H, V, T, L := m.Config.Hidden, m.Config.Vocab, len(ids), m.Config.Layers
			hidden := make([][]float32, L)
			logits := must(m.Forward(m.NewState(), ids, &runtime.ForwardOptions{AllLogits: true,
				LayerHook: func(l int, h []float32) { hidden[l] = append([]float32(nil), h...) }}))(t)
			// Per layer first, so a failure names the first layer that diverges.
			for l := range L {
				wantH := must(ref.Floats(fmt.Sprintf("hidden.%d", l)))(t)
				if len(wantH) != T*H {
					t.Fatalf("reference hidden.%d: %d values, want %d", l, len(wantH), T*H)
				}
				if d := reference.MaxAbsDiff(hidden[l], wantH); d > v.tol*max(1, maxAbs(wantH)) {
					t.Fatalf("layer %d is the first to diverge: hidden state max abs error %g", l, d)
				}
			}
			if d := reference.MaxAbsDiff(logits, want); d > v.tol {
				t.Fatalf("logits max abs error %g > %g", d, v.tol)
			}
			greedy := must(ref.Ints("greedy"))(t)
			for p := range T {
				if g := argmax(logits[p*V : (p+1)*V]); g != greedy[p] {
					t.Fatalf("greedy token at position %d: %d, transformers %d", p, g, greedy[p])
				}
			}
			t.Logf("%s: logits max abs error %.3g", v.name, reference.MaxAbsDiff(logits, want))

			// Token by token, past every sliding window, then the greedy
			// continuation from the same state.
			st := m.NewState()
			dec := must(ref.Floats("decode_logits"))(t)
			var worst float64
			var last []float32
			for p, id := range ids {
				last = must(m.Forward(st, []int{id}, nil))(t)
				worst = max(worst, reference.MaxAbsDiff(last, dec[p*V:(p+1)*V]))
			}
			if worst > v.tol {
				t.Fatalf("decode one token at a time: logits max abs error %g > %g", worst, v.tol)
			}
			cont := must(ref.Ints("continuation"))(t)
			contLogits := must(ref.Floats("continuation_logits"))(t)
			sn := st.Snapshot()
			for k, id := range cont {
				if d := reference.MaxAbsDiff(last, contLogits[k*V:(k+1)*V]); d > v.tol {
					t.Fatalf("continuation step %d: logits max abs error %g > %g", k, d, v.tol)
				}
				if g := argmax(last); g != id {
					t.Fatalf("continuation step %d: greedy %d, transformers %d", k, g, id)
				}
				last = must(m.Forward(st, []int{id}, nil))(t)
			}

			// The continuation in chunks of 3 after restoring the snapshot
			// taken at the end of the prompt: the same logits.
			st2 := m.NewState()
			if err := st2.Restore(sn); err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(cont); i += 3 {
				chunk := cont[i:min(i+3, len(cont)-1)]
				rows := must(m.Forward(st2, chunk, &runtime.ForwardOptions{AllLogits: true}))(t)
				for j := range chunk {
					k := i + j + 1
					if d := reference.MaxAbsDiff(rows[j*V:(j+1)*V], contLogits[k*V:(k+1)*V]); d > v.tol {
						t.Fatalf("restored snapshot, chunked continuation step %d: logits max abs error %g > %g", k, d, v.tol)
					}
				}
			}
		})
	}
}

func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = max(m, float64(max(v, -v)))
	}
	return m
}

// Speculating experts is only a hint: the same logits, bit for bit.
func TestSpeculateChangesNothing(t *testing.T) {
	dir := filepath.Join(tinyDir, "gemma4-q4g32")
	m := must(runtime.Load(dir, nil))(t)
	defer m.Close()
	spec := &guessCounter{ExpertSource: m.Experts}
	ids := []int{357, 117, 198, 44, 256, 310, 72}
	plain := must(m.Forward(m.NewState(), ids, &runtime.ForwardOptions{AllLogits: true}))(t)
	m.Experts = spec
	guessed := must(m.Forward(m.NewState(), ids, &runtime.ForwardOptions{AllLogits: true, Speculate: 2}))(t)
	if spec.calls != m.Config.Layers {
		t.Fatalf("%d guesses for %d sparse layers", spec.calls, m.Config.Layers)
	}
	for i := range plain {
		if plain[i] != guessed[i] {
			t.Fatalf("logit %d: %g without speculation, %g with", i, plain[i], guessed[i])
		}
	}
}

type guessCounter struct {
	runtime.ExpertSource
	calls int
}

func (g *guessCounter) Speculate(int, []int) { g.calls++ }
