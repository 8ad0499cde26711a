package expertcache

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/internal/fakealloc"
)

// mixedBlobs has layer 0 from a and layer 1 from b (buffers of two sizes).
type mixedBlobs struct{ a, b *fakeBlobs }

func (m mixedBlobs) pick(l int) *fakeBlobs {
	if l == 0 {
		return m.a
	}
	return m.b
}
func (m mixedBlobs) Layers() int         { return 2 }
func (m mixedBlobs) Experts() int        { return m.a.E }
func (m mixedBlobs) BufSize(l int) int64 { return m.pick(l).BufSize(l) }
func (m mixedBlobs) Extents(l, e int, dst []runtime.ExpertExtent) ([]runtime.ExpertExtent, error) {
	return m.pick(l).Extents(l, e, dst)
}
func (m mixedBlobs) View(l, e int, buf []byte, w *runtime.ExpertWeights) error {
	return m.pick(l).View(l, e, buf, w)
}

func allocOptions(fb *fakealloc.Backend, budget int64, io IOMode) Options {
	return Options{Budget: budget, IO: io, Readers: 2,
		Alloc: func(n int64) ([]byte, error) { return fb.Alloc(int(n)) },
		Free: func(b []byte) {
			if err := fb.Free(b); err != nil {
				panic(err)
			}
		}}
}

// With Options.Alloc every slot comes from it: every expert handed out
// lies in its memory, a slot dropped for one of another size is freed
// (and its memory poisoned), and Close gives back the rest.
func TestSlotsFromAllocator(t *testing.T) {
	for _, io := range []IOMode{Buffered, Direct} {
		t.Run(io.String(), func(t *testing.T) {
			a := newFake(t, 2, 4, 4000, 4096, 1)
			b := newFake(t, 2, 4, 8000, 8192, 3)
			bl := mixedBlobs{a, b}
			fb := fakealloc.New()
			c, err := New(bl, allocOptions(fb, 8192, io))
			if err != nil {
				t.Fatal(err)
			}
			check := func(l, e int) {
				t.Helper()
				w := hold(t, c, bl.pick(l), l, e)
				if !fb.Holds(w.Buf) {
					t.Fatalf("layer %d expert %d: buffer not from Options.Alloc", l, e)
				}
				c.Release(w)
			}
			check(0, 0)
			check(0, 1)
			if allocs, frees, _, _ := fb.Counts(); allocs != 2 || frees != 0 {
				t.Fatalf("two 4096-byte slots: %d allocations, %d frees", allocs, frees)
			}
			check(1, 2) // the budget holds one 8192-byte slot: both small ones go
			allocs, frees, live, bytes := fb.Counts()
			if allocs != 3 || frees != 2 || live != 1 || bytes != 8192 {
				t.Fatalf("after a larger slot: %d allocations, %d frees, %d live (%d bytes)", allocs, frees, live, bytes)
			}
			check(0, 3)
			check(1, 2)
			if st := c.Stats(); st.Allocated > st.Budget {
				t.Fatalf("allocated %d over the budget %d", st.Allocated, st.Budget)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			allocs, frees, live, _ = fb.Counts()
			if live != 0 || allocs != frees {
				t.Fatalf("after Close: %d allocations, %d frees, %d live", allocs, frees, live)
			}
		})
	}
}

// offsetAlloc returns n bytes starting skew bytes past an Align boundary
// (want, if not 0, is the length returned instead of n).
func offsetAlloc(skew, want int) func(int64) ([]byte, error) {
	return func(n int64) ([]byte, error) {
		b := make([]byte, int(n)+2*Align)
		s := (Align-int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%Align))%Align + skew
		if want > 0 {
			return b[s : s+want], nil
		}
		return b[s : s+int(n)], nil
	}
}

func TestAllocatorOptionErrors(t *testing.T) {
	f := newFake(t, 1, 2, 4000, 4096, 1)
	if _, err := New(f, Options{Budget: 4096, Alloc: offsetAlloc(0, 0)}); err == nil ||
		!strings.Contains(err.Error(), "must be set together") {
		t.Fatalf("Alloc without Free: %v", err)
	}
	failing := Options{Budget: 4096,
		Alloc: func(int64) ([]byte, error) { return nil, errors.New("no device memory") },
		Free:  func([]byte) {}}
	if _, err := mustNew(t, f, failing).Expert(0, 1); err == nil || !strings.Contains(err.Error(), "no device memory") ||
		!strings.Contains(err.Error(), "allocating a 4096-byte slot") {
		t.Fatalf("failing Alloc: %v", err)
	}
	frees := 0
	short := Options{Budget: 4096, Alloc: offsetAlloc(0, 100), Free: func([]byte) { frees++ }}
	if _, err := mustNew(t, f, short).Expert(0, 1); err == nil || !strings.Contains(err.Error(), "returned 100 bytes") || frees != 1 {
		t.Fatalf("short Alloc: %v (%d frees)", err, frees)
	}
	// Memory 2 bytes past a page boundary: refused for direct reads, fine
	// for buffered ones (the kernels need 2-byte alignment).
	for _, io := range []IOMode{Direct, Buffered} {
		opt := Options{Budget: 4096, IO: io, Alloc: offsetAlloc(2, 0), Free: func([]byte) {}}
		c := mustNew(t, f, opt)
		w, err := c.Expert(0, 1)
		if io == Direct && (err == nil || !strings.Contains(err.Error(), "not 4096-byte aligned")) {
			t.Fatalf("misaligned memory, direct reads: %v", err)
		}
		if io == Buffered {
			if err != nil {
				t.Fatalf("misaligned memory, buffered reads: %v", err)
			}
			if !bytes.Equal(w.Buf[:f.size], pattern(0, 1, f.size)) {
				t.Fatal("misaligned memory, buffered reads: wrong bytes")
			}
			c.Release(w)
		}
	}
}
