//go:build unix

package mlxq

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"
)

// guarded returns a copy of b that ends exactly where an inaccessible page
// begins, so a kernel reading past the end of b faults (the test binary
// dies with SIGSEGV) instead of silently reading neighbouring memory.
func guarded(t *testing.T, b []byte) []byte {
	t.Helper()
	ps := unix.Getpagesize()
	n := (len(b) + ps - 1) / ps * ps
	mem, err := unix.Mmap(-1, 0, n+ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	if err := unix.Mprotect(mem[n:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	out := mem[n-len(b) : n : n]
	copy(out, b)
	return out
}

// The kernels must not read past the weight, scale and bias data: each is
// placed right before an unmapped page.
func TestKernelsStayInBounds(t *testing.T) {
	kernelModes(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(25, 26))
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, group := range []int{32, 64, 128} {
				for _, ft := range []Float{F32, F16, BF16} {
					rows, cols := 3, 2*group
					q, err := Quantize(randMatrix(r, rows, cols), rows, cols, bits, group, ft)
					if err != nil {
						t.Fatal(err)
					}
					m, err := NewQuantized(rows, cols, bits, group, ft, guarded(t, q.Weight), guarded(t, q.Scales), guarded(t, q.Biases))
					if err != nil {
						t.Fatal(err)
					}
					const n = 5
					X := randVec(r, n*cols)
					Y := make([]float32, n*rows)
					m.MatMul(Y, X, n)
					for v := 0; v < n; v++ {
						want, mag := refMatVec(m, X[v*cols:(v+1)*cols])
						checkClose(t, fmt.Sprintf("%d-bit g%d %v vector %d", bits, group, ft, v), Y[v*rows:(v+1)*rows], want, mag)
					}
				}
			}
		}
		for _, ft := range []Float{F32, F16, BF16} {
			for _, cols := range []int{16, 32, 45, 64} {
				rows := 2
				data := make([]byte, rows*cols*ft.Size())
				EncodeFloats(data, randMatrix(r, rows, cols), ft)
				m, err := NewDense(rows, cols, ft, guarded(t, data))
				if err != nil {
					t.Fatal(err)
				}
				const n = 5
				X := randVec(r, n*cols)
				Y := make([]float32, n*rows)
				m.MatMul(Y, X, n)
				for v := 0; v < n; v++ {
					want, mag := refMatVec(m, X[v*cols:(v+1)*cols])
					checkClose(t, fmt.Sprintf("dense %v cols %d vector %d", ft, cols, v), Y[v*rows:(v+1)*rows], want, mag)
				}
			}
		}
	})
}
