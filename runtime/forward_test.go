package runtime_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/synthetic"
)

var testTokens = []int{5, 17, 300, 42, 42, 0, 383, 128, 7, 99, 250, 3}

func tinyDims(typ string, bits, group int) synthetic.Dims {
	d := synthetic.Tiny(typ)
	d.Bits, d.Group = bits, group
	return d
}

func variants() []synthetic.Dims {
	return []synthetic.Dims{
		tinyDims(runtime.TypeQwen3Next, 0, 0),
		tinyDims(runtime.TypeQwen3Next, 4, 64),
		tinyDims(runtime.TypeQwen35MoE, 0, 0),
		tinyDims(runtime.TypeQwen35MoE, 4, 32),
		tinyDims(runtime.TypeQwen35MoE, 3, 32),
		wideDims(),
	}
}

// wideDims has DeltaNet heads large enough for the recurrence to run its
// heads in parallel, and no shared expert.
func wideDims() synthetic.Dims {
	d := tinyDims(runtime.TypeQwen3Next, 6, 64)
	d.LinKeyHeads, d.LinValueHeads, d.LinKeyDim, d.LinValueDim = 2, 8, 32, 64
	d.Layers, d.SharedInter = 4, 0
	return d
}

func name(d synthetic.Dims) string {
	return fmt.Sprintf("%s-b%dg%d-v%dx%d", d.ModelType, d.Bits, d.Group, d.LinValueHeads, d.LinValueDim)
}

func mustModel(t testing.TB, d synthetic.Dims, seed uint64) *runtime.Model {
	t.Helper()
	g, err := synthetic.Generate(d, seed)
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fullLogits runs tokens as one chunk and returns all logits.
func fullLogits(t testing.TB, m *runtime.Model, tokens []int) []float32 {
	t.Helper()
	out, err := m.Forward(m.NewState(), tokens, &runtime.ForwardOptions{AllLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

func argmaxOf(x []float32) int {
	b := 0
	for i, v := range x {
		if v > x[b] {
			b = i
		}
	}
	return b
}

// perVector is a Backend whose products handle one vector at a time, so
// that a chunk of n tokens computes bit for bit what n single-token steps
// compute (mlxq's multi-vector kernels may sum in another order).
type perVector struct{ runtime.CPU }

func (perVector) MatMul(w mlxq.Matrix, y, x []float32, n int) {
	for i := range n {
		w.MatVec(y[i*w.Rows:(i+1)*w.Rows], x[i*w.Cols:(i+1)*w.Cols])
	}
}

// Prefill N then decode the rest (one token at a time, or in chunks) gives
// the same logits as one forward pass over everything: bit for bit with
// products that do not depend on the batch size, and within round-off (and
// with the same greedy tokens) on the CPU backend.
func TestPrefillDecodeEqualsFull(t *testing.T) {
	for _, d := range variants() {
		t.Run(name(d), func(t *testing.T) {
			g := gen(t, d, 1)
			for _, be := range []runtime.Backend{perVector{}, runtime.CPU{}} {
				m, err := g.Build(be)
				if err != nil {
					t.Fatal(err)
				}
				_, exact := be.(perVector)
				tol := 0.0
				if !exact {
					// These random models amplify float32 round-off (small
					// DeltaNet outputs meet the gated RMSNorm) to ~1e-3 when
					// sums are reordered; a state bug gives errors of order 0.1.
					tol = 1e-2
				}
				V := m.Config.Vocab
				full := fullLogits(t, m, testTokens)
				for _, split := range [][]int{{5, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {3, 4, 5}, {7, 5}} {
					st := m.NewState()
					pos := 0
					for _, n := range split {
						got, err := m.Forward(st, testTokens[pos:pos+n], &runtime.ForwardOptions{AllLogits: true})
						if err != nil {
							t.Fatal(err)
						}
						if diff := maxAbsDiff(got, full[pos*V:(pos+n)*V]); diff > tol {
							t.Fatalf("exact=%v split %v: chunk at %d differs from the full pass by %g", exact, split, pos, diff)
						}
						for i := range n {
							g, f := got[i*V:(i+1)*V], full[(pos+i)*V:(pos+i+1)*V]
							if a, b := argmaxOf(g), argmaxOf(f); a != b && float64(f[b]-f[a]) > 2*tol {
								t.Fatalf("split %v: greedy token at %d is %d, full pass %d", split, pos+i, a, b)
							}
						}
						pos += n
					}
					if st.Pos() != len(testTokens) {
						t.Fatalf("pos %d", st.Pos())
					}
					// The last-token-only logits equal the last row.
					st.Reset()
					last, err := m.Forward(st, testTokens, nil)
					if err != nil {
						t.Fatal(err)
					}
					if diff := maxAbsDiff(last, full[(len(testTokens)-1)*V:]); diff > tol {
						t.Fatalf("last-row logits differ by %g", diff)
					}
				}
			}
		})
	}
}

// The qwen3_next fused, per-key-head interleaved projections compute the
// same function as the separate qwen3_5 ones they were built from.
func TestFusedProjectionsMatchSeparate(t *testing.T) {
	for _, bits := range []int{0, 8} {
		next := mustModel(t, tinyDims(runtime.TypeQwen3Next, bits, 32), 7)
		q35 := mustModel(t, tinyDims(runtime.TypeQwen35MoE, bits, 32), 7)
		a, b := fullLogits(t, next, testTokens), fullLogits(t, q35, testTokens)
		if diff := maxAbsDiff(a, b); diff != 0 {
			t.Fatalf("bits %d: qwen3_next and qwen3_5_moe logits differ by %g", bits, diff)
		}
	}
}

// recordingSource wraps an ExpertSource and records the calls a
// prefetching source sees.
type recordingSource struct {
	runtime.ExpertSource
	log []string
}

func (r *recordingSource) Prefetch(layer int, experts []int) {
	r.log = append(r.log, fmt.Sprint("P", layer, experts))
}

func (r *recordingSource) Expert(l, e int) (*runtime.ExpertWeights, error) {
	r.log = append(r.log, fmt.Sprint("E", l, " ", e))
	return r.ExpertSource.Expert(l, e)
}

// For each layer of a chunk, Prefetch gets the union of the routed experts,
// ascending, once; then each is fetched exactly once, in that order.
func TestPrefetchProtocol(t *testing.T) {
	g := gen(t, tinyDims(runtime.TypeQwen35MoE, 0, 0), 1)
	rec := &recordingSource{ExpertSource: g.Experts}
	m, err := runtime.NewModel(g.Config, g.Tensors, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fullLogits(t, mustModel(t, tinyDims(runtime.TypeQwen35MoE, 0, 0), 1), testTokens)
	if diff := maxAbsDiff(fullLogits(t, m, testTokens), want); diff != 0 {
		t.Fatalf("logits through the wrapper differ by %g", diff)
	}
	layer := -1
	var pending []int
	for _, entry := range rec.log {
		var l int
		if entry[0] == 'P' {
			if len(pending) != 0 {
				t.Fatalf("prefetch %q while experts %v of layer %d are still pending", entry, pending, layer)
			}
			var list string
			fmt.Sscanf(entry, "P%d %s", &l, &list)
			if l != layer+1 {
				t.Fatalf("prefetch for layer %d after layer %d", l, layer)
			}
			layer = l
			body := entry[strings.Index(entry, "[")+1 : len(entry)-1]
			pending = pending[:0]
			for _, f := range strings.Fields(body) {
				var e int
				fmt.Sscan(f, &e)
				if len(pending) > 0 && e <= pending[len(pending)-1] {
					t.Fatalf("prefetch list not ascending: %s", entry)
				}
				pending = append(pending, e)
			}
			if len(pending) == 0 || len(pending) > min(len(testTokens)*2, 8) {
				t.Fatalf("prefetch list %s", entry)
			}
			continue
		}
		var e int
		fmt.Sscanf(entry, "E%d %d", &l, &e)
		if l != layer || len(pending) == 0 || pending[0] != e {
			t.Fatalf("fetch %q, expected layer %d expert %v", entry, layer, pending)
		}
		pending = pending[1:]
	}
	if layer != 7 || len(pending) != 0 {
		t.Fatalf("ended at layer %d with %v pending", layer, pending)
	}
}

// ForwardOptions.Into receives the logits when it is large enough (the
// same array back, every entry overwritten) and is left alone when not;
// the logits are the bits of a pass without it, on every architecture.
func TestForwardInto(t *testing.T) {
	models := map[string]func() (*runtime.Model, error){
		"qwen3_next":  func() (*runtime.Model, error) { return mustModel(t, tinyDims(runtime.TypeQwen3Next, 4, 32), 3), nil },
		"qwen3_5_moe": func() (*runtime.Model, error) { return mustModel(t, tinyDims(runtime.TypeQwen35MoE, 8, 64), 3), nil },
		"gemma4":      func() (*runtime.Model, error) { return runtime.Load("../testdata/tiny/gemma4-q4g32", nil) },
	}
	for name, load := range models {
		t.Run(name, func(t *testing.T) {
			m, err := load()
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			V := m.Config.Vocab
			want, err := m.Forward(m.NewState(), testTokens, nil)
			if err != nil {
				t.Fatal(err)
			}
			into := make([]float32, V+5)
			for i := range into {
				into[i] = float32(math.NaN())
			}
			got, err := m.Forward(m.NewState(), testTokens, &runtime.ForwardOptions{Into: into})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != V || &got[0] != &into[0] {
				t.Fatalf("got %d logits at %p, want %d in Into (%p)", len(got), &got[0], V, &into[0])
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("logit %d: %v, without Into %v", i, got[i], want[i])
				}
			}
			small := make([]float32, V-1)
			got, err = m.Forward(m.NewState(), testTokens, &runtime.ForwardOptions{Into: small})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != V || &got[0] == &small[0] || slices.ContainsFunc(small, func(v float32) bool { return v != 0 }) {
				t.Fatalf("an Into of %d floats for %d logits was used", len(small), V)
			}
		})
	}
}
