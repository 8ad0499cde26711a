package cuda

import (
	"testing"
	"unsafe"
)

// Read into pinned memory from Alloc (a decode loop's logits buffer) is one
// copy from the device, no staging; into a Go slice it goes through
// staging; QPACK_CUDA_DIRECT_READ=0 stages both. The values are the same.
func TestReadIntoPinned(t *testing.T) {
	for _, staged := range []bool{false, true} {
		if staged {
			t.Setenv(directReadEnv, "0")
		}
		b, _ := fakeBackend(t)
		l := b.Layer()
		const n = 1000
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(i)*0.5 - 7
		}
		x := l.Temp(n)
		l.Write(x, src)
		mem, err := b.Alloc(4 * n)
		if err != nil {
			t.Fatal(err)
		}
		pinned := unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), n)
		for _, c := range []struct {
			name   string
			dst    []float32
			direct bool
		}{{"pinned", pinned, !staged}, {"heap", make([]float32, n), false}} {
			before := b.Stats().StagedBytes
			if err := l.Read(c.dst, x); err != nil {
				t.Fatal(err)
			}
			for i := range src {
				if c.dst[i] != src[i] {
					t.Fatalf("%s (staged reads %v): [%d] = %v, want %v", c.name, staged, i, c.dst[i], src[i])
				}
			}
			if got := b.Stats().StagedBytes - before; (got == 0) != c.direct {
				t.Fatalf("%s (staged reads %v): %d bytes through staging", c.name, staged, got)
			}
		}
		if err := b.Free(mem); err != nil {
			t.Fatal(err)
		}
	}
}
