package metal

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/runner"
)

// placement checks, call by call, where the arguments of the runtime's
// MatMul and RMSNorm calls lived: the Stats deltas of each call say how
// many bytes were used in place and how many were staged.
type placement struct {
	b        *Backend
	calls    int
	weights  int64 // weight bytes (packed weights, scales, biases, norm weights)
	inPlace  int64 // of those, used in place
	wrong    []string
	expected func(weights, activations int64) (zeroCopy, staged int64)
}

func (p *placement) check(what string, weights, activations int64, before, after Stats) {
	p.calls++
	p.weights += weights
	zc, st := after.ZeroCopyBytes-before.ZeroCopyBytes, after.StagedBytes-before.StagedBytes
	p.inPlace += min(zc, weights)
	if wantZC, wantSt := p.expected(weights, activations); zc != wantZC || st != wantSt {
		p.wrong = append(p.wrong, fmt.Sprintf("%s: %d bytes in place, %d staged; want %d and %d", what, zc, st, wantZC, wantSt))
	}
}

func (p *placement) matMul(w mlxq.Matrix, y, x []float32, n int) {
	before := p.b.Stats()
	p.b.MatMul(w, y, x, n)
	// x is copied in; y is copied in and back.
	p.check(fmt.Sprintf("MatMul [%d, %d] × %d", w.Rows, w.Cols, n), int64(len(w.Weight)+len(w.Scales)+len(w.Biases)),
		4*int64(n*w.Cols+2*n*w.Rows), before, p.b.Stats())
}

func (p *placement) rmsNorm(y, x, w []float32, eps float32) {
	before := p.b.Stats()
	p.b.RMSNorm(y, x, w, eps)
	p.check(fmt.Sprintf("RMSNorm %d", len(w)), 4*int64(len(w)), 4*int64(len(x)+2*len(y)), before, p.b.Stats())
}

// withHooks is the Backend as the runtime sees it: a runtime.Allocator
// (Alloc and Free promoted), so the dense weights and the expert buffers
// are allocated from it.
type withHooks struct {
	*Backend
	p *placement
}

func (h withHooks) MatMul(w mlxq.Matrix, y, x []float32, n int) { h.p.matMul(w, y, x, n) }
func (h withHooks) RMSNorm(y, x, w []float32, eps float32)      { h.p.rmsNorm(y, x, w, eps) }

// LayerDevice hides the backend's layer device: this test checks the
// runtime.Backend calls (the graphs run on the host device over them).
func (h withHooks) LayerDevice() nn.Device { return nil }

// withoutHooks is the same Backend hidden behind runtime.Backend only: the
// default path, where the runtime allocates nothing through it.
type withoutHooks struct{ p *placement }

func (h withoutHooks) MatMul(w mlxq.Matrix, y, x []float32, n int) { h.p.matMul(w, y, x, n) }
func (h withoutHooks) RMSNorm(y, x, w []float32, eps float32)      { h.p.rmsNorm(y, x, w, eps) }
func (h withoutHooks) SwiGLU(y, gate, up []float32)                { h.p.b.SwiGLU(y, gate, up) }

var _ runtime.Allocator = withHooks{}

func zeroCopy(weights, activations int64) (int64, int64)  { return weights, activations }
func allStaged(weights, activations int64) (int64, int64) { return 0, weights + activations }

func sameFloatBits(a, b []float32) bool {
	return len(a) == len(b) && slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// TestTinyModelsZeroCopy runs committed tiny checkpoints through the
// runtime with the allocator hooks (the backend is a runtime.Allocator):
// every weight of every MatMul and RMSNorm of the forward pass, dense
// weights and routed experts alike, is used in place and only the
// activations are staged, where without the hooks every weight is staged;
// the logits are bit for bit the same, and closing the model gives every
// allocation back. Through the runner, the expert cache's slots (pread
// into Alloc memory) are used in place too.
func TestTinyModelsZeroCopy(t *testing.T) {
	b := modelTestBackend(t)
	for _, name := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q8g64"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "tiny", name)
			if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
				t.Skipf("tiny model %s missing", dir)
			}
			forward := func(be runtime.Backend, p *placement) []float32 {
				t.Helper()
				regions := len(b.regions)
				m, err := runtime.Load(dir, &runtime.LoadOptions{Backend: be, ExpertCacheBytes: -1})
				must(t, err)
				st := m.NewState()
				var out []float32
				for _, toks := range [][]int{{1, 17, 42, 99, 7}, {23}} {
					l, err := m.Forward(st, toks, &runtime.ForwardOptions{AllLogits: true})
					must(t, err)
					out = append(out, l...)
				}
				must(t, m.Close())
				if len(b.regions) != regions {
					t.Errorf("%d Alloc regions after Close, %d before Load", len(b.regions), regions)
				}
				if len(p.wrong) > 0 {
					t.Errorf("%d of %d calls placed wrongly, e.g. %s", len(p.wrong), p.calls, p.wrong[0])
				}
				return out
			}
			plain := &placement{b: b, expected: allStaged}
			want := forward(withoutHooks{plain}, plain)
			hooked := &placement{b: b, expected: zeroCopy}
			got := forward(withHooks{b, hooked}, hooked)
			if !sameFloatBits(got, want) {
				t.Error("logits with the hooks differ from the default path's")
			}
			if hooked.calls != plain.calls || hooked.inPlace != hooked.weights || plain.inPlace != 0 || hooked.weights == 0 {
				t.Errorf("weights in place: %d of %d bytes with the hooks (%d calls), %d without (%d calls)",
					hooked.inPlace, hooked.weights, hooked.calls, plain.inPlace, plain.calls)
			}
			t.Logf("%d calls, %d weight bytes: all in place with the hooks, all staged without", hooked.calls, hooked.weights)

			if name != "qwen3_next-q4g64" {
				return // the runner on one model is enough (the shim is slow)
			}
			// The runner: dense arena and expert-cache slots from Alloc,
			// one slot of budget so that slots are reused for other experts.
			regions := len(b.regions)
			var tokens [2][]int
			for i, p := range []*placement{{b: b, expected: allStaged}, {b: b, expected: zeroCopy}} {
				var be runtime.Backend = withoutHooks{p}
				if i == 1 {
					be = withHooks{b, p}
				}
				r, err := runner.Open(dir, runner.Options{Backend: be, ExpertCache: 1, IO: expertcache.Buffered})
				must(t, err)
				res, err := r.NewSession().Generate(context.Background(), []int{1, 17, 42, 99, 7}, runner.GenOptions{MaxNew: 2})
				must(t, err)
				tokens[i] = res.Tokens
				if i == 1 && (res.DecodeCache.Evicted == 0 || p.inPlace != p.weights) {
					t.Errorf("runner: %d evictions, %d of %d weight bytes in place", res.DecodeCache.Evicted, p.inPlace, p.weights)
				}
				must(t, r.Close())
				if len(p.wrong) > 0 {
					t.Errorf("runner (hooks %v): %d of %d calls placed wrongly, e.g. %s", i == 1, len(p.wrong), p.calls, p.wrong[0])
				}
			}
			if !slices.Equal(tokens[0], tokens[1]) || len(tokens[1]) == 0 {
				t.Errorf("runner tokens with the hooks %v, without %v", tokens[1], tokens[0])
			}
			if len(b.regions) != regions {
				t.Errorf("%d Alloc regions after the runner closed, %d before", len(b.regions), regions)
			}
		})
	}
}
