package runtime_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/safetensors"
)

// The reference fixtures come from transformers (testdata/reference/
// make_reference.py) run on the tiny checkpoints of testdata/tiny.
var referenceVariants = []struct {
	name string
	tol  float64 // max abs error allowed on logits and hidden states
}{
	{"qwen3_next-f32", 1e-4},
	{"qwen3_next-q4g64", 1e-3},
	{"qwen3_next-q8g32", 1e-3},
	{"qwen3_5_moe-f32", 1e-4},
	{"qwen3_5_moe-q4g32", 1e-3},
	{"qwen3_5_moe-q8g64", 1e-3},
}

const (
	tinyDir = "../testdata/tiny"
	refDir  = "../testdata/reference"
)

type reference struct {
	ids    []int
	logits []float32
	greedy []int
	hidden map[int][]float32
}

func readReference(t *testing.T, path string) *reference {
	t.Helper()
	h, err := safetensors.ReadFileHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	read := func(name string, dt safetensors.DType) []byte {
		ts, ok := h.Tensor(name)
		if !ok {
			t.Fatalf("%s: no tensor %s", path, name)
		}
		if ts.DType != dt {
			t.Fatalf("%s: tensor %s is %s, want %s", path, name, ts.DType, dt)
		}
		b := make([]byte, ts.Size)
		if _, err := f.ReadAt(b, ts.Offset); err != nil {
			t.Fatal(err)
		}
		return b
	}
	ints := func(name string) []int {
		b := read(name, safetensors.I64)
		out := make([]int, len(b)/8)
		for i := range out {
			out[i] = int(int64(binary.LittleEndian.Uint64(b[8*i:])))
		}
		return out
	}
	floats := func(name string) []float32 {
		b := read(name, safetensors.F32)
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out
	}
	r := &reference{ids: ints("input_ids"), logits: floats("logits"), greedy: ints("greedy"), hidden: map[int][]float32{}}
	for l := 0; ; l++ {
		if _, ok := h.Tensor(fmt.Sprintf("hidden.%d", l)); !ok {
			break
		}
		r.hidden[l] = floats(fmt.Sprintf("hidden.%d", l))
	}
	return r
}

func TestAgainstTransformers(t *testing.T) {
	if _, err := os.Stat(refDir + "/qwen3_next-f32.safetensors"); os.IsNotExist(err) {
		t.Fatal("reference fixtures missing (testdata/reference/make_reference.py makes them)")
	}
	for _, v := range referenceVariants {
		t.Run(v.name, func(t *testing.T) {
			ref := readReference(t, filepath.Join(refDir, v.name+".safetensors"))
			m, err := runtime.Load(filepath.Join(tinyDir, v.name), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			H, V, T := m.Config.Hidden, m.Config.Vocab, len(ref.ids)
			if len(ref.hidden) != m.Config.Layers {
				t.Fatalf("reference has %d hidden states for %d layers", len(ref.hidden), m.Config.Layers)
			}
			hidden := make([][]float32, m.Config.Layers)
			logits, err := m.Forward(m.NewState(), ref.ids, &runtime.ForwardOptions{AllLogits: true,
				LayerHook: func(l int, h []float32) { hidden[l] = append([]float32(nil), h...) }})
			if err != nil {
				t.Fatal(err)
			}
			// Per layer first, so a failure names the first layer that diverges.
			for l := range m.Config.Layers {
				if len(ref.hidden[l]) != T*H {
					t.Fatalf("reference hidden.%d has %d values, want %d", l, len(ref.hidden[l]), T*H)
				}
				if d := maxAbsDiff(hidden[l], ref.hidden[l]); d > v.tol {
					t.Fatalf("layer %d is the first to diverge: hidden state max abs error %g > %g (position %s)",
						l, d, v.tol, worstPosition(hidden[l], ref.hidden[l], H))
				}
			}
			if len(ref.logits) != T*V {
				t.Fatalf("reference logits: %d values, want %d", len(ref.logits), T*V)
			}
			d := maxAbsDiff(logits, ref.logits)
			if d > v.tol {
				t.Fatalf("logits max abs error %g > %g", d, v.tol)
			}
			for p := range T {
				row := logits[p*V : (p+1)*V]
				best := 0
				for i, x := range row {
					if x > row[best] {
						best = i
					}
				}
				if best != ref.greedy[p] {
					t.Fatalf("greedy token at position %d: %d, transformers %d", p, best, ref.greedy[p])
				}
			}
			var hmax float64
			for l := range hidden {
				hmax = max(hmax, maxAbsDiff(hidden[l], ref.hidden[l]))
			}
			t.Logf("%s: logits max abs error %.3g, hidden states %.3g", v.name, d, hmax)

			// Token-by-token decode reproduces the reference too.
			st := m.NewState()
			var worst float64
			for p, id := range ref.ids {
				row, err := m.Forward(st, []int{id}, nil)
				if err != nil {
					t.Fatal(err)
				}
				worst = max(worst, maxAbsDiff(row, ref.logits[p*V:(p+1)*V]))
			}
			if worst > v.tol {
				t.Fatalf("decode one token at a time: logits max abs error %g > %g", worst, v.tol)
			}
		})
	}
}

func worstPosition(a, b []float32, H int) string {
	var w float64
	at := 0
	for i := range a {
		if d := math.Abs(float64(a[i]) - float64(b[i])); d > w {
			w, at = d, i
		}
	}
	return fmt.Sprintf("token %d, dim %d: %g vs %g", at/H, at%H, a[at], b[at])
}

// A .qpack repacked from each tiny checkpoint (by package repack, through
// the qpack writer) gives bit-identical logits to the checkpoint itself.
func TestContainerMatchesCheckpoint(t *testing.T) {
	for _, v := range referenceVariants {
		t.Run(v.name, func(t *testing.T) {
			src := filepath.Join(tinyDir, v.name)
			dst := filepath.Join(t.TempDir(), v.name+".qpack")
			if _, err := repack.Run(context.Background(), repack.Options{FromDir: src, Output: dst, Reserve: -1}); err != nil {
				t.Fatal(err)
			}
			ck, err := runtime.LoadCheckpoint(src, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			qp, err := runtime.LoadContainer(dst, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer qp.Close()
			a, b := fullLogits(t, ck, testTokens), fullLogits(t, qp, testTokens)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("logit %d: checkpoint %g, .qpack %g", i, a[i], b[i])
				}
			}
		})
	}
}
