package runtime_test

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/internal/fakealloc"
	"github.com/qpack-go/qpack/runtime/synthetic"
)

// prefillDecode runs a prefill chunk and two decode steps and returns all
// their logits.
func prefillDecode(t testing.TB, m *runtime.Model) []float32 {
	t.Helper()
	st := m.NewState()
	var out []float32
	for _, toks := range [][]int{testTokens[:8], testTokens[8:9], testTokens[9:10]} {
		l, err := m.Forward(st, toks, &runtime.ForwardOptions{AllLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l...)
	}
	return out
}

func sameBits(a, b []float32) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d logits, want %d", len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return fmt.Errorf("logit %d is %v, want %v", i, a[i], b[i])
		}
	}
	return nil
}

// With a backend that is an Allocator, every dense weight and every expert
// matrix a forward pass hands to the backend lies in memory from it (the
// dense weights in one arena, the first allocation), the logits are bit for
// bit those of the default path, freed memory is never used again (Free
// poisons it), and Close gives everything back. Without the hooks (the same
// checking backend, not an Allocator) every weight is outside.
func TestAllocatorHoldsEveryWeight(t *testing.T) {
	next := tinyDims(runtime.TypeQwen3Next, 4, 64)
	next.DenseLayers = []int{0, 5}
	tied := tinyDims(runtime.TypeQwen35MoE, 8, 32)
	tied.Tied = true
	for _, d := range []synthetic.Dims{next, tinyDims(runtime.TypeQwen35MoE, 0, 0), tied} {
		g := gen(t, d, 9)
		tmp := t.TempDir()
		ck, qp := filepath.Join(tmp, "ck"), filepath.Join(tmp, "m.qpack")
		if err := g.WriteCheckpoint(ck, 2); err != nil {
			t.Fatal(err)
		}
		if err := g.WriteContainer(qp); err != nil {
			t.Fatal(err)
		}
		expertBytes := g.Config.MoEIntermediate * g.Config.Hidden * 3 // at most 4 bytes a weight: a few experts
		for _, src := range []struct{ name, dir string }{{"checkpoint", ck}, {"container", qp}} {
			for _, cache := range []int64{0, -1, int64(expertBytes)} {
				t.Run(fmt.Sprintf("%s/%s/cache%d", name(d), src.name, cache), func(t *testing.T) {
					testAllocator(t, src.dir, cache)
				})
			}
		}
	}
}

func testAllocator(t *testing.T, dir string, cache int64) {
	fb := fakealloc.New()
	def, err := runtime.Load(dir, &runtime.LoadOptions{Backend: fb.Plain(), ExpertCacheBytes: cache})
	if err != nil {
		t.Fatal(err)
	}
	want := prefillDecode(t, def)
	def.Close()
	if allocs, _, _, _ := fb.Counts(); allocs != 0 {
		t.Fatalf("the default path allocated %d times", allocs)
	}
	calls, strays := fb.Calls(), fb.Strays()
	if len(calls) == 0 || len(strays) != len(calls) {
		t.Fatalf("default path: %d of %d weights outside allocated memory, want all", len(strays), len(calls))
	}
	fb.Reset()

	m, err := runtime.Load(dir, &runtime.LoadOptions{Backend: fb, ExpertCacheBytes: cache})
	if err != nil {
		t.Fatal(err)
	}
	if m.ArenaBytes() <= 0 || fb.Size(1) != int(m.ArenaBytes()) {
		t.Fatalf("arena of %d bytes, first allocation %d bytes", m.ArenaBytes(), fb.Size(1))
	}
	if err := sameBits(prefillDecode(t, m), want); err != nil {
		t.Fatalf("with the allocator: %v", err)
	}
	if s := fb.Strays(); len(s) > 0 {
		t.Fatalf("%d weights outside allocated memory, e.g. %s", len(s), s[0])
	}
	var dense, expert int
	for _, c := range fb.Calls() {
		switch {
		case c.Block == 1:
			dense++
		case c.Op == "MatMul" && c.Part == "weight":
			expert++
		}
	}
	if len(fb.Calls()) != len(calls) || dense == 0 || expert == 0 || expert%3 != 0 {
		t.Fatalf("%d checked arguments (default path %d): %d in the arena, %d expert matrices", len(fb.Calls()), len(calls), dense, expert)
	}
	_, _, live, _ := fb.Counts()
	switch {
	case cache < 0 && live != 1:
		t.Fatalf("no expert cache: %d allocations live after the pass, want the arena only", live)
	case cache == 0 && live < 2:
		t.Fatalf("expert cache: %d allocations live after the pass, want the arena and the cached experts", live)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	allocs, frees, live, bytes := fb.Counts()
	if live != 0 || allocs != frees || bytes != 0 {
		t.Fatalf("after Close: %d allocations, %d frees, %d live (%d bytes)", allocs, frees, live, bytes)
	}
}

// NewModel over a backend that is an Allocator copies the dense weights
// into memory from it and gives it back at Close.
func TestNewModelAllocator(t *testing.T) {
	g := gen(t, tinyDims(runtime.TypeQwen35MoE, 4, 32), 2)
	ref, err := g.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	fb := fakealloc.New()
	m, err := g.Build(fb)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameBits(prefillDecode(t, m), prefillDecode(t, ref)); err != nil {
		t.Fatal(err)
	}
	for _, c := range fb.Calls() {
		// The synthetic experts are Go memory; everything else is in the arena.
		isExpert := c.Op == "MatMul" && (c.Rows == g.Config.MoEIntermediate && c.Cols == g.Config.Hidden ||
			c.Rows == g.Config.Hidden && c.Cols == g.Config.MoEIntermediate) && c.Block == 0
		if c.Block != 1 && !isExpert {
			t.Fatalf("%+v: not in the arena", c)
		}
	}
	m.Close()
	if _, _, live, _ := fb.Counts(); live != 0 {
		t.Fatalf("%d allocations live after Close", live)
	}
}

type failingAlloc struct{}

func (failingAlloc) Alloc(int) ([]byte, error) { return nil, errors.New("out of device memory") }
func (failingAlloc) Free([]byte) error         { return nil }

type shortAlloc struct{ frees int }

func (s *shortAlloc) Alloc(n int) ([]byte, error) { return make([]byte, n/2), nil }
func (s *shortAlloc) Free([]byte) error           { s.frees++; return nil }

func TestAllocatorErrors(t *testing.T) {
	g := gen(t, tinyDims(runtime.TypeQwen3Next, 4, 64), 1)
	dir := filepath.Join(t.TempDir(), "ck")
	if err := g.WriteCheckpoint(dir, 1); err != nil {
		t.Fatal(err)
	}
	_, err := runtime.Load(dir, &runtime.LoadOptions{Alloc: failingAlloc{}})
	if err == nil || !strings.Contains(err.Error(), "dense weights: allocating") || !strings.Contains(err.Error(), "out of device memory") {
		t.Fatalf("failing allocator: %v", err)
	}
	sa := &shortAlloc{}
	_, err = runtime.Load(dir, &runtime.LoadOptions{Alloc: sa})
	if err == nil || !strings.Contains(err.Error(), "the allocator returned") || sa.frees != 1 {
		t.Fatalf("short allocation: %v (%d frees)", err, sa.frees)
	}
}

// An expert evicted from the loader's cache while handed out keeps its
// memory until it is released, then gives it back; a cached one keeps it.
func TestAllocatorEvictionWhileHeld(t *testing.T) {
	g := gen(t, tinyDims(runtime.TypeQwen35MoE, 4, 32), 4)
	qp := filepath.Join(t.TempDir(), "m.qpack")
	if err := g.WriteContainer(qp); err != nil {
		t.Fatal(err)
	}
	fb := fakealloc.New()
	probe, err := runtime.Load(qp, &runtime.LoadOptions{ExpertCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := probe.Experts.Expert(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	one := int64(len(w.Buf)) // room for one expert
	probe.Close()

	m, err := runtime.Load(qp, &runtime.LoadOptions{Alloc: fb, ExpertCacheBytes: one})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w0, err := m.Experts.Expert(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	keep := append([]byte(nil), w0.Buf...)
	w1, err := m.Experts.Expert(0, 1) // evicts expert 0, still held
	if err != nil {
		t.Fatal(err)
	}
	if !m.Experts.(*runtime.ExpertCache).Resident(0, 1) || m.Experts.(*runtime.ExpertCache).Resident(0, 0) {
		t.Fatal("expert 1 should have replaced expert 0 in the cache")
	}
	if string(w0.Buf) != string(keep) {
		t.Fatal("a held expert's memory changed when it was evicted")
	}
	_, _, live, _ := fb.Counts()
	m.Experts.Release(w0)
	if _, _, after, _ := fb.Counts(); after != live-1 {
		t.Fatalf("releasing the evicted expert: %d live allocations, want %d", after, live-1)
	}
	m.Experts.Release(w1)
	if _, _, after, _ := fb.Counts(); after != live-1 {
		t.Fatalf("releasing a cached expert freed it: %d live allocations, want %d", after, live-1)
	}
}
