package metal

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
)

// Kernel tests, run on whatever kernelTestBackend returns: a Backend over the
// C++ shim on Linux (shim_test.go), over the real GPU on macOS
// (metal_darwin_test.go). Every kernel is compared with an independent
// float64 Go reference written here (and, where the runtime has one, with
// the CPU backend) on random inputs, with a tolerance per kernel.

func randF32(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32((r.Float64()*2 - 1) * scale)
	}
	return x
}

// closeTo checks |got-want| <= rel*mag[i] + abs for every element, where mag
// is the magnitude of the terms that made want[i] (nil: |want[i]|).
func closeTo(t *testing.T, what string, got []float32, want, mag []float64, rel, abs float64) {
	t.Helper()
	if len(got) < len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i, w := range want {
		m := math.Abs(w)
		if mag != nil {
			m = mag[i]
		}
		d := math.Abs(float64(got[i]) - w)
		if !(d <= rel*m+abs) { // also catches NaN
			if bad < 5 {
				t.Errorf("%s[%d] = %.9g, want %.9g (diff %.3g, tolerance %.3g)", what, i, got[i], w, d, rel*m+abs)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values out of tolerance", what, bad, len(want))
	}
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// ---- independent references ----

// refFloat decodes element i of a little-endian array of type t.
func refFloat(b []byte, i int, t mlxq.Float) float64 {
	switch t {
	case mlxq.F32:
		return float64(math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24))
	case mlxq.BF16:
		return float64(math.Float32frombits((uint32(b[2*i]) | uint32(b[2*i+1])<<8) << 16))
	}
	// IEEE half, decoded by hand.
	u := uint16(b[2*i]) | uint16(b[2*i+1])<<8
	sign := 1.0
	if u&0x8000 != 0 {
		sign = -1
	}
	e, m := int(u>>10&0x1f), float64(u&0x3ff)
	if e == 0 {
		return sign * m * math.Pow(2, -24)
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

// refWeight is W[r][c] of a quantized or dense matrix: the packed row is one
// LSB-first bit stream, read bit by bit.
func refWeight(w mlxq.Matrix, r, c int) float64 {
	if w.Bits == 0 {
		return refFloat(w.Weight, r*w.Cols+c, w.Type)
	}
	row := w.Weight[r*w.Cols*w.Bits/8:]
	q := 0
	for k := 0; k < w.Bits; k++ {
		bit := c*w.Bits + k
		q |= int(row[bit/8]>>(bit%8)&1) << k
	}
	g := r*(w.Cols/w.GroupSize) + c/w.GroupSize
	return refFloat(w.Scales, g, w.Type)*float64(q) + refFloat(w.Biases, g, w.Type)
}

// refMatMul returns y = W x for n vectors and the magnitudes sum |w x|.
func refMatMul(w mlxq.Matrix, x []float32, n int) (y, mag []float64) {
	y = make([]float64, n*w.Rows)
	mag = make([]float64, n*w.Rows)
	for r := 0; r < w.Rows; r++ {
		for c := 0; c < w.Cols; c++ {
			wv := refWeight(w, r, c)
			for v := 0; v < n; v++ {
				p := wv * float64(x[v*w.Cols+c])
				y[v*w.Rows+r] += p
				mag[v*w.Rows+r] += math.Abs(p)
			}
		}
	}
	return y, mag
}

func randMatrix(t *testing.T, r *rand.Rand, rows, cols, bits, group int, ft mlxq.Float) mlxq.Matrix {
	t.Helper()
	w := randF32(r, rows*cols, 1)
	if bits == 0 {
		data := make([]byte, rows*cols*ft.Size())
		mlxq.EncodeFloats(data, w, ft)
		m, err := mlxq.NewDense(rows, cols, ft, data)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m, err := mlxq.Quantize(w, rows, cols, bits, group, ft)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gemvCases are the shapes and formats the GEMV tests cover: every bit
// width, every group size, every scale type, dense types, row counts that
// leave a partial threadgroup, columns that leave lanes idle.
var gemvCases = []struct {
	bits, group int
	ft          mlxq.Float
	rows, cols  int
	n           int
}{
	{4, 64, mlxq.BF16, 37, 640, 1},
	{4, 32, mlxq.F16, 16, 256, 3},
	{4, 128, mlxq.F32, 9, 384, 2},
	{8, 64, mlxq.BF16, 37, 640, 1},
	{8, 32, mlxq.F32, 8, 96, 2},
	{8, 128, mlxq.F16, 11, 256, 1},
	{2, 64, mlxq.BF16, 13, 320, 2},
	{3, 32, mlxq.BF16, 13, 288, 1},
	{5, 64, mlxq.F16, 10, 192, 1},
	{6, 128, mlxq.F32, 10, 384, 2},
	{0, 0, mlxq.F32, 21, 200, 2},
	{0, 0, mlxq.F16, 9, 72, 1},
	{0, 0, mlxq.BF16, 17, 130, 3},
}

func testGEMV(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range gemvCases {
		name := fmt.Sprintf("bits%d_g%d_%v_%dx%d_n%d", c.bits, c.group, c.ft, c.rows, c.cols, c.n)
		t.Run(name, func(t *testing.T) {
			w := randMatrix(t, r, c.rows, c.cols, c.bits, c.group, c.ft)
			x := randF32(r, c.n*c.cols, 1)
			want, mag := refMatMul(w, x, c.n)
			got := make([]float32, c.n*c.rows)
			b.MatMul(w, got, x, c.n)
			closeTo(t, "y", got, want, mag, 2e-6, 1e-6)
			cpu := make([]float32, c.n*c.rows)
			runtime.CPU{}.MatMul(w, cpu, x, c.n)
			closeTo(t, "y vs CPU backend", got, f64(cpu), mag, 4e-6, 1e-6)
		})
	}
	if err := b.Err(); err != nil {
		t.Fatalf("device error (results came from the CPU fallback): %v", err)
	}
}

func TestKernels(t *testing.T) {
	b := kernelTestBackend(t)
	t.Run("gemv", func(t *testing.T) { testGEMV(t, b) })
}
