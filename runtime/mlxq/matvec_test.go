package mlxq

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refCode extracts element i of a row bit by bit from the packing rule
// (bit k of the element is stream bit i*bits+k, LSB first within bytes),
// independently of getBits and the kernels.
func refCode(row []byte, i, bits int) int {
	v := 0
	for k := 0; k < bits; k++ {
		p := i*bits + k
		v |= int(row[p/8]>>(p%8)&1) << k
	}
	return v
}

// refMatVec computes y = W x in float64 from the packed data, and for each
// row the magnitude sum_i (|s q_i| + |b|) |x_i| that bounds float32 error.
func refMatVec(m Matrix, x []float32) (y, mag []float64) {
	y = make([]float64, m.Rows)
	mag = make([]float64, m.Rows)
	rb := m.RowBytes()
	for r := 0; r < m.Rows; r++ {
		row := m.Weight[r*rb : (r+1)*rb]
		for i := 0; i < m.Cols; i++ {
			var w, a float64
			if m.Bits == 0 {
				w = float64(m.Type.load(row, i))
				a = math.Abs(w)
			} else {
				gi := r*m.Groups() + i/m.GroupSize
				s := float64(m.Type.load(m.Scales, gi))
				b := float64(m.Type.load(m.Biases, gi))
				q := float64(refCode(row, i, m.Bits))
				w = s*q + b
				a = math.Abs(s*q) + math.Abs(b)
			}
			y[r] += w * float64(x[i])
			mag[r] += a * math.Abs(float64(x[i]))
		}
	}
	return y, mag
}

// misalign copies b into a fresh buffer at byte offset off.
func misalign(b []byte, off int) []byte {
	buf := make([]byte, len(b)+off)
	copy(buf[off:], b)
	return buf[off : off+len(b)]
}

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func checkClose(t *testing.T, what string, got []float32, want, mag []float64) {
	t.Helper()
	for i := range want {
		tol := 2e-6*mag[i] + 1e-30
		if d := math.Abs(float64(got[i]) - want[i]); d > tol || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: y[%d] = %v, want %v (diff %g > tol %g)", what, i, got[i], want[i], d, tol)
		}
	}
}

// kernelModes runs f with the assembly kernels (where present) and with the
// portable ones.
func kernelModes(t *testing.T, f func(t *testing.T)) {
	modes := []bool{false}
	if asmAvailable {
		modes = append(modes, true)
	}
	for _, asm := range modes {
		t.Run(fmt.Sprintf("asm=%v", asm), func(t *testing.T) {
			saved := useAsm
			useAsm = asm
			defer func() { useAsm = saved }()
			f(t)
		})
	}
}

func TestMatVecQuantized(t *testing.T) {
	kernelModes(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(9, 10))
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, group := range []int{32, 64, 128} {
				for _, ft := range []Float{F32, F16, BF16} {
					rows, cols := 37, 384
					w := randMatrix(r, rows, cols)
					q, err := Quantize(w, rows, cols, bits, group, ft)
					if err != nil {
						t.Fatal(err)
					}
					// Data as it comes from a file: only 2-byte aligned (and the
					// weight even at an odd offset).
					m, err := NewQuantized(rows, cols, bits, group, ft, misalign(q.Weight, 1), misalign(q.Scales, 2), misalign(q.Biases, 2))
					if err != nil {
						t.Fatal(err)
					}
					x := randVec(r, cols)
					want, mag := refMatVec(m, x)
					y := make([]float32, rows)
					m.MatVec(y, x)
					name := fmt.Sprintf("%d-bit g%d %v", bits, group, ft)
					checkClose(t, name+" MatVec", y, want, mag)

					// MatMul over 6 vectors (a block of four and two more).
					const n = 6
					X := make([]float32, 0, n*cols)
					X = append(X, x...)
					X = append(X, randVec(r, (n-1)*cols)...)
					Y := make([]float32, n*rows)
					m.MatMul(Y, X, n)
					for v := 0; v < n; v++ {
						wv, mv := refMatVec(m, X[v*cols:(v+1)*cols])
						checkClose(t, fmt.Sprintf("%s MatMul vector %d", name, v), Y[v*rows:(v+1)*rows], wv, mv)
					}
				}
			}
		}
	})
}

// Large enough to take the parallel path.
func TestMatVecParallel(t *testing.T) {
	kernelModes(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 12))
		for _, bits := range []int{3, 4, 8} {
			rows, cols := 301, 2048
			q, err := Quantize(randMatrix(r, rows, cols), rows, cols, bits, 64, BF16)
			if err != nil {
				t.Fatal(err)
			}
			if int64(rows*q.RowBytes()) < parMinBytes {
				t.Fatalf("test matrix too small for the parallel path")
			}
			m, _ := NewQuantized(rows, cols, bits, 64, BF16, misalign(q.Weight, 2), misalign(q.Scales, 2), misalign(q.Biases, 2))
			x := randVec(r, cols)
			want, mag := refMatVec(m, x)
			y := make([]float32, rows)
			m.MatVec(y, x)
			checkClose(t, fmt.Sprintf("%d-bit parallel", bits), y, want, mag)
			X := append(append([]float32{}, x...), randVec(r, 4*cols)...)
			Y := make([]float32, 5*rows)
			m.MatMul(Y, X, 5)
			checkClose(t, fmt.Sprintf("%d-bit parallel MatMul", bits), Y[:rows], want, mag)
			w4, m4 := refMatVec(m, X[4*cols:])
			checkClose(t, fmt.Sprintf("%d-bit parallel MatMul", bits), Y[4*rows:], w4, m4)
		}
	})
}

func TestMatVecDense(t *testing.T) {
	kernelModes(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(13, 14))
		for _, ft := range []Float{F32, F16, BF16} {
			for _, shape := range [][2]int{{5, 77}, {33, 128}, {3, 31}, {1, 1}, {200, 1000}} {
				rows, cols := shape[0], shape[1]
				w := randMatrix(r, rows, cols)
				data := make([]byte, rows*cols*ft.Size())
				EncodeFloats(data, w, ft)
				m, err := NewDense(rows, cols, ft, misalign(data, 2))
				if err != nil {
					t.Fatal(err)
				}
				x := randVec(r, cols)
				want, mag := refMatVec(m, x)
				y := make([]float32, rows)
				m.MatVec(y, x)
				name := fmt.Sprintf("dense %v [%d,%d]", ft, rows, cols)
				checkClose(t, name, y, want, mag)
				const n = 5
				X := append(randVec(r, (n-1)*cols), x...)
				Y := make([]float32, n*rows)
				m.MatMul(Y, X, n)
				for v := 0; v < n; v++ {
					wv, mv := refMatVec(m, X[v*cols:(v+1)*cols])
					checkClose(t, fmt.Sprintf("%s MatMul vector %d", name, v), Y[v*rows:(v+1)*rows], wv, mv)
				}
				// Row and Dequantize decode the stored values.
				row := make([]float32, cols)
				m.Row(row, rows-1)
				for i := range row {
					if row[i] != ft.round(w[(rows-1)*cols+i]) {
						t.Fatalf("%s: Row[%d] = %v, want %v", name, i, row[i], ft.round(w[(rows-1)*cols+i]))
					}
				}
			}
		}
	})
}

// Row and Dequantize against the bit-by-bit reference.
func TestRowReference(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			rows, cols := 3, 256
			m, err := Quantize(randMatrix(r, rows, cols), rows, cols, bits, group, BF16)
			if err != nil {
				t.Fatal(err)
			}
			d := m.Dequantize()
			for rr := 0; rr < rows; rr++ {
				row := make([]float32, cols)
				m.Row(row, rr)
				rb := m.Weight[rr*m.RowBytes():]
				for i := 0; i < cols; i++ {
					gi := rr*m.Groups() + i/group
					s, b := BF16.load(m.Scales, gi), BF16.load(m.Biases, gi)
					want := float32(s*float32(refCode(rb, i, bits))) + b
					if row[i] != want || d[rr*cols+i] != want {
						t.Fatalf("%d-bit g%d: [%d,%d] = %v / %v, want %v", bits, group, rr, i, row[i], d[rr*cols+i], want)
					}
				}
			}
		}
	}
}

func TestMatVecPanicsOnBadLengths(t *testing.T) {
	m, _ := Quantize(make([]float32, 64), 2, 32, 4, 32, BF16)
	for _, f := range []func(){
		func() { m.MatVec(make([]float32, 2), make([]float32, 31)) },
		func() { m.MatVec(make([]float32, 3), make([]float32, 32)) },
		func() { m.MatMul(make([]float32, 4), make([]float32, 64), 0) },
		func() { m.MatMul(make([]float32, 4), make([]float32, 63), 2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}
