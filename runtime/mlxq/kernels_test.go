package mlxq

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Small shapes: one group per row (the kernels' loop runs once), a few
// groups, and 1 to 5 input vectors (the four-vector kernels alone, with one
// single-vector call after them, or not at all), against the float64
// reference.
func TestMatVecSmallShapes(t *testing.T) {
	kernelModes(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(21, 22))
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, group := range []int{32, 64, 128} {
				for _, cols := range []int{group, 2 * group, 5 * group} {
					for _, ft := range []Float{F32, F16, BF16} {
						rows := 3
						q, err := Quantize(randMatrix(r, rows, cols), rows, cols, bits, group, ft)
						if err != nil {
							t.Fatal(err)
						}
						for n := 1; n <= 5; n++ {
							X := randVec(r, n*cols)
							Y := make([]float32, n*rows)
							q.MatMul(Y, X, n)
							for v := 0; v < n; v++ {
								want, mag := refMatVec(q, X[v*cols:(v+1)*cols])
								checkClose(t, fmt.Sprintf("%d-bit g%d %v [%d,%d] n=%d vector %d", bits, group, ft, rows, cols, n, v),
									Y[v*rows:(v+1)*rows], want, mag)
							}
						}
					}
				}
			}
		}
	})
}

// Dense rows of every length from 1 to 80 (below, at and between the
// kernels' 16- and 32-element steps), one to five vectors.
func TestMatVecDenseLengths(t *testing.T) {
	kernelModes(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(23, 24))
		for _, ft := range []Float{F32, F16, BF16} {
			for cols := 1; cols <= 80; cols++ {
				rows := 2
				data := make([]byte, rows*cols*ft.Size())
				EncodeFloats(data, randMatrix(r, rows, cols), ft)
				m, err := NewDense(rows, cols, ft, misalign(data, 1))
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range []int{1, 4, 5} {
					X := randVec(r, n*cols)
					Y := make([]float32, n*rows)
					m.MatMul(Y, X, n)
					for v := 0; v < n; v++ {
						want, mag := refMatVec(m, X[v*cols:(v+1)*cols])
						checkClose(t, fmt.Sprintf("dense %v cols %d n=%d vector %d", ft, cols, n, v), Y[v*rows:(v+1)*rows], want, mag)
					}
				}
			}
		}
	})
}
