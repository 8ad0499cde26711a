package runner

import (
	"errors"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/internal/fakealloc"
)

// A backend that is a runtime.Allocator gets the dense weights and the
// expert cache's slots: every weight a generation hands to the backend
// lies in its memory (experts are read straight into it), tokens and
// logits are bit for bit the default path's, and Close gives it all back.
func TestBackendAllocator(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen3Next, 4, 64, "qwen3_next-q4g64")
	const chunk, n = 8, 6
	for _, c := range []struct {
		name   string
		dir    string
		budget int64
		io     expertcache.IOMode
	}{
		{"raw-one-slot", f.raw, 1, expertcache.Buffered},
		{"qpack-3slots-direct", f.pack, 3 * 16384, expertcache.Direct},
		{"qpack-unlimited", f.pack, 1 << 30, expertcache.Buffered},
	} {
		t.Run(c.name, func(t *testing.T) {
			fb := fakealloc.New()
			def, err := Open(c.dir, Options{ExpertCache: c.budget, IO: c.io, PrefillChunk: chunk, Backend: fb.Plain()})
			if err != nil {
				t.Fatal(err)
			}
			want := generate(t, def.NewSession(), prompt, GenOptions{MaxNew: n})
			def.Close()
			if allocs, _, _, _ := fb.Counts(); allocs != 0 || len(fb.Strays()) != len(fb.Calls()) || len(fb.Calls()) == 0 {
				t.Fatalf("default path: %d allocations, %d of %d weights outside them (want 0 and all)", allocs, len(fb.Strays()), len(fb.Calls()))
			}
			fb.Reset()

			r, err := Open(c.dir, Options{ExpertCache: c.budget, IO: c.io, PrefillChunk: chunk, Backend: fb})
			if err != nil {
				t.Fatal(err)
			}
			got := generate(t, r.NewSession(), prompt, GenOptions{MaxNew: n})
			if !slices.Equal(got.tokens, want.tokens) {
				t.Fatalf("tokens %v, want %v", got.tokens, want.tokens)
			}
			for i := range want.logits {
				if !sameBits(got.logits[i], want.logits[i]) {
					t.Fatalf("logits of step %d differ from the default path's", i)
				}
			}
			if s := fb.Strays(); len(s) > 0 {
				t.Fatalf("%d weights outside allocated memory, e.g. %s", len(s), s[0])
			}
			var arena, slots int
			for _, call := range fb.Calls() {
				if call.Block == 1 {
					arena++
				} else if call.Op == "MatMul" && call.Part == "weight" {
					slots++
				}
			}
			if arena == 0 || slots == 0 || r.Model.ArenaBytes() != int64(fb.Size(1)) {
				t.Fatalf("%d arguments in the arena (%d bytes, first allocation %d), %d expert matrices in slots",
					arena, r.Model.ArenaBytes(), fb.Size(1), slots)
			}
			if r.DenseBytes() < r.Model.ArenaBytes() {
				t.Fatalf("DenseBytes %d leaves out the %d-byte arena", r.DenseBytes(), r.Model.ArenaBytes())
			}
			// The decode loop's logits buffer (one, back in the pool).
			st := r.Cache.Stats()
			logits := int64(4 * r.Model.Config.Vocab)
			if _, _, _, live := fb.Counts(); live != r.Model.ArenaBytes()+st.Allocated+logits {
				t.Fatalf("%d bytes allocated, want the arena (%d), the slots (%d) and a logits buffer (%d)", live, r.Model.ArenaBytes(), st.Allocated, logits)
			}
			if len(r.logits.all) != 1 || len(r.logits.free) != 1 {
				t.Fatalf("logits buffers: %d made, %d free after the generation (want 1 and 1)", len(r.logits.all), len(r.logits.free))
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			if allocs, frees, live, _ := fb.Counts(); live != 0 || allocs != frees {
				t.Fatalf("after Close: %d allocations, %d frees, %d live", allocs, frees, live)
			}
		})
	}
}

// failAlloc refuses every allocation after the first ok ones.
type failAlloc struct {
	runtime.Allocator
	ok int
}

func (f *failAlloc) Alloc(n int) ([]byte, error) {
	if f.ok == 0 {
		return nil, errors.New("out of pinned memory")
	}
	f.ok--
	return f.Allocator.Alloc(n)
}

// The logits pool lends distinct buffers to loops that run at once,
// reuses what is given back, lends nothing (the loop's own slice then)
// when the backend refuses memory or is no Allocator, and frees all at
// close.
func TestLogitsPool(t *testing.T) {
	fb := fakealloc.New()
	p := newLogitsPool(&failAlloc{Allocator: fb, ok: 2}, 10)
	a, b := p.take(), p.take()
	if len(a) != 10 || len(b) != 10 || &a[0] == &b[0] {
		t.Fatalf("two loops got buffers of %d and %d floats, same memory %v", len(a), len(b), len(a) > 0 && len(b) > 0 && &a[0] == &b[0])
	}
	if c := p.take(); c != nil || p.fails != 1 {
		t.Fatalf("a refused allocation lent %d floats (fails %d)", len(c), p.fails)
	}
	p.give(a[:3])
	if c := p.take(); len(c) != 10 || &c[0] != &a[0] {
		t.Fatal("a buffer given back was not lent again whole")
	}
	p.give(nil)
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	if allocs, frees, live, _ := fb.Counts(); allocs != 2 || frees != 2 || live != 0 {
		t.Fatalf("after close: %d allocations, %d frees, %d bytes live", allocs, frees, live)
	}
	if newLogitsPool(nil, 10).take() != nil {
		t.Fatal("a backend that is no Allocator lent a buffer")
	}
	var none *logitsPool
	if none.take() != nil || none.close() != nil {
		t.Fatal("a nil pool")
	}
}
