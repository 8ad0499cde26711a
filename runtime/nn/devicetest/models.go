package devicetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/runtime"
	_ "github.com/qpack-go/qpack/runtime/models/all" // the architectures of the tiny models
	"github.com/qpack-go/qpack/runtime/runner"
)

// modelTokens is the fixed prompt (taken modulo the vocabulary).
var modelTokens = []int{5, 17, 300, 42, 42, 0, 383, 128, 7, 99, 250, 3, 357, 117, 198}

// genSteps is the number of greedy tokens Models generates.
const genSteps = 6

// TinyDir returns the repository's testdata/tiny, found by walking up
// from the working directory to the module root (go.mod), or why not.
func TinyDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			tiny := filepath.Join(dir, "testdata", "tiny")
			if st, err := os.Stat(tiny); err != nil || !st.IsDir() {
				return "", fmt.Errorf("no testdata/tiny under the module root %s", dir)
			}
			return tiny, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// TinyModels lists the model directories of testdata/tiny.
func TinyModels() ([]string, error) {
	tiny, err := TinyDir()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(tiny)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(tiny, e.Name(), "config.json")); err == nil {
				out = append(out, filepath.Join(tiny, e.Name()))
			}
		}
	}
	return out, nil
}

// Models runs every tiny model of testdata/tiny through be (its own
// Device when it implements nn.Layered) against runtime.CPU: the logits
// of a fixed prompt within tol's ModelF32 or ModelQuant of max |logit|
// and the same greedy tokens; a chunked prefill against step-by-step
// decode on be; and a .qpack repacked from the model, run with a
// one-slot expert cache (every expert read again, slots reused), with and
// without speculative reads, against every expert resident: the same
// greedy generation. A missing testdata
// directory skips, saying why.
func Models(t *testing.T, be runtime.Backend, tol ...Tolerances) {
	tl := DefaultTolerances()
	if len(tol) > 0 {
		tl = tol[0].filled()
	}
	dirs, err := TinyModels()
	if err != nil {
		t.Skipf("tiny models: %v", err)
	}
	if len(dirs) == 0 {
		t.Skip("testdata/tiny holds no model")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) { modelCase(t, be, dir, tl) })
	}
}

func modelCase(t *testing.T, be runtime.Backend, dir string, tl Tolerances) {
	cpu, err := runtime.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	dev, err := runtime.Load(dir, &runtime.LoadOptions{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	bound := tl.ModelF32
	if cpu.Config.Quant.Present {
		bound = tl.ModelQuant
	}
	V := cpu.Config.Vocab
	toks := make([]int, len(modelTokens))
	for i, v := range modelTokens {
		toks[i] = v % V
	}
	t.Logf("%s on %s: bound %.3g of max |logit|", filepath.Base(dir), dev.Device().Name(), bound)

	want := forward(t, cpu, cpu.NewState(), toks, true)
	scale := maxAbs64(f64(want))
	got := forward(t, dev, dev.NewState(), toks, true)
	within(t, "prompt logits against CPU", got, f64(want), same(len(want), scale), bound)
	sameGreedy(t, "prompt", got, want, V, bound*scale)

	// Chunked prefill against step-by-step decode, both on be.
	st := dev.NewState()
	var steps []float32
	for _, tok := range toks {
		steps = append(steps, forward(t, dev, st, []int{tok}, false)...)
	}
	within(t, "chunked prefill against step-by-step decode", got, f64(steps), same(len(got), scale), bound)
	sameGreedy(t, "step-by-step", steps, got, V, bound*scale)

	// Greedy generation against CPU.
	gc, lc := greedy(t, cpu, toks, genSteps, 0)
	gd, ld := greedy(t, dev, toks, genSteps, 0)
	compareGen(t, "generation against CPU", gd, ld, gc, lc, V, bound, scale)

	// A .qpack, a one-slot expert cache against every expert resident.
	if cpu.Config.Experts == 0 {
		return
	}
	pack := filepath.Join(t.TempDir(), filepath.Base(dir)+".qpack")
	if _, err := repack.Run(context.Background(), repack.Options{FromDir: dir, Output: pack, Reserve: -1}); err != nil {
		t.Fatalf("repack: %v", err)
	}
	quiet := slog.New(slog.DiscardHandler)
	open := func(budget int64, spec int) *runtime.Model {
		r, err := runner.Open(pack, runner.Options{ExpertCache: budget, Backend: be, Speculate: spec, Logger: quiet})
		if err != nil {
			t.Fatalf("runner.Open %s: %v", pack, err)
		}
		t.Cleanup(func() { r.Close() })
		return r.Model
	}
	tiny, spec, all := open(1, -1), open(1, runner.DefaultSpeculate), open(1<<30, -1)
	gt, lt := greedy(t, tiny, toks, genSteps, 0)
	gs, ls := greedy(t, spec, toks, genSteps, 2)
	ga, la := greedy(t, all, toks, genSteps, 0)
	compareGen(t, ".qpack with a one-slot expert cache against every expert resident", gt, lt, ga, la, V, bound, scale)
	compareGen(t, ".qpack with a one-slot cache and speculative reads against every expert resident", gs, ls, ga, la, V, bound, scale)
	compareGen(t, ".qpack against the checkpoint", ga, la, gd, ld, V, bound, scale)
}

func forward(t *testing.T, m *runtime.Model, st *runtime.State, toks []int, all bool) []float32 {
	t.Helper()
	out, err := m.Forward(st, toks, &runtime.ForwardOptions{AllLogits: all})
	if err != nil {
		t.Fatalf("forward: %v", err)
	}
	return out
}

func argmax(x []float32) int {
	b := 0
	for i, v := range x {
		if v > x[b] {
			b = i
		}
	}
	return b
}

// sameGreedy checks each row's argmax against the reference's, unless the
// reference's top two are closer than slack (a near tie: logged).
func sameGreedy(t *testing.T, what string, got, want []float32, V int, slack float64) {
	t.Helper()
	for p := range len(want) / V {
		g, w := got[p*V:(p+1)*V], want[p*V:(p+1)*V]
		a, b := argmax(g), argmax(w)
		if a == b {
			continue
		}
		if float64(w[b]-w[a]) <= 2*slack {
			t.Logf("%s: position %d is a near tie (%d vs %d, logits %g, %g): not counted", what, p, a, b, w[b], w[a])
			continue
		}
		t.Fatalf("%s: greedy token at position %d is %d, want %d", what, p, a, b)
	}
}

// greedy prefills toks as one chunk and decodes n tokens (speculating
// spec experts per token), returning them and each step's logits.
func greedy(t *testing.T, m *runtime.Model, toks []int, n, spec int) ([]int, [][]float32) {
	t.Helper()
	st := m.NewState()
	row := forward(t, m, st, toks, false)
	opt := &runtime.ForwardOptions{Speculate: spec}
	var out []int
	var logits [][]float32
	for range n {
		logits = append(logits, row)
		tok := argmax(row)
		out = append(out, tok)
		var err error
		if row, err = m.Forward(st, []int{tok}, opt); err != nil {
			t.Fatalf("decode: %v", err)
		}
	}
	return out, logits
}

// compareGen checks two greedy generations: the same tokens (up to a
// near tie of the reference, after which the sequences may part) and each
// step's logits within bound.
func compareGen(t *testing.T, what string, gt []int, gl [][]float32, wt []int, wl [][]float32, V int, bound, scale float64) {
	t.Helper()
	var worst float64
	for i := range wt {
		for j := range wl[i] {
			worst = max(worst, math.Abs(float64(gl[i][j])-float64(wl[i][j])))
		}
		if worst > bound*scale {
			t.Fatalf("%s: step %d logits differ by %.3g > %.3g", what, i, worst, bound*scale)
		}
		if gt[i] != wt[i] {
			w := wl[i]
			if float64(w[wt[i]]-w[gt[i]]) <= 2*bound*scale {
				t.Logf("%s: step %d is a near tie (%d vs %d): the rest is not compared", what, i, gt[i], wt[i])
				return
			}
			t.Fatalf("%s: token %d is %d, want %d (tokens %v, want %v)", what, i, gt[i], wt[i], gt, wt)
		}
	}
	t.Logf("%s: tokens %v identical, logits within %.3g of max |logit| (max abs %.3g)", what, gt, worst/scale, worst)
}
