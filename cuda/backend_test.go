package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
)

// openOrSkip opens GPU 0, skipping the test where there is none (CI): the
// GPU parts are checked by the recorded device run (recording_test.go).
// With QPACK_CUDA_REQUIRE set (the device script) a missing GPU fails.
func openOrSkip(t testing.TB) *Backend {
	t.Helper()
	b, err := New()
	if errors.Is(err, ErrNoDevice) && os.Getenv("QPACK_CUDA_REQUIRE") == "" {
		t.Skipf("no CUDA device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Logf("device %s, %s, kernel source sha256 %s", b.Name(), b.Compiler(), sourceHash())
	return b
}

func randVec(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

// The bound of the matrix products: float32 accumulation in another order
// than the CPU's, so |gpu - cpu| <= 1e-4 * sum_j |W_ij x_j| (the magnitude
// of the terms, which bounds the round-off of any summation order), with
// W the dequantized weight. Relative to the result itself the bound would
// be meaningless where the terms cancel.
const matTol = 1e-4

func checkMatMul(t *testing.T, what string, m mlxq.Matrix, x, got []float32, n int) {
	t.Helper()
	checkMatMulWithin(t, what, m, x, got, n, matTol)
}

// checkMatMulWithin checks got against the CPU's product within tol x
// sum_k |w x| per output and returns the largest ratio |d| / sum_k |w x|
// seen. An output never written (NaN) fails.
func checkMatMulWithin(t *testing.T, what string, m mlxq.Matrix, x, got []float32, n int, tol float64) float64 {
	t.Helper()
	want := make([]float32, n*m.Rows)
	runtime.CPU{}.MatMul(m, want, x, n)
	w := weights(m)
	worst, bad := 0.0, 0
	for v := range n {
		for r := range m.Rows {
			var mag float64
			for j := range m.Cols {
				mag += math.Abs(float64(w[r*m.Cols+j]) * float64(x[v*m.Cols+j]))
			}
			g, e := got[v*m.Rows+r], want[v*m.Rows+r]
			d := math.Abs(float64(g) - float64(e))
			if !(d <= tol*mag) {
				if bad++; bad <= 5 {
					t.Errorf("%s: y[%d][%d] = %g, CPU %g (|d| %.3g > %.3g)", what, v, r, g, e, d, tol*mag)
				}
			}
			if mag > 0 {
				worst = max(worst, d/mag)
			}
		}
	}
	return worst
}

// sourceHash identifies the kernel source a recorded run compiled.
func sourceHash() string {
	h := sha256.Sum256([]byte(Source()))
	return hex.EncodeToString(h[:])
}

type matCase struct {
	rows, cols, bits, group int
	t                       mlxq.Float
}

func (c matCase) String() string {
	if c.bits == 0 {
		return fmt.Sprintf("dense-%v-%dx%d", c.t, c.rows, c.cols)
	}
	return fmt.Sprintf("q%d-g%d-%v-%dx%d", c.bits, c.group, c.t, c.rows, c.cols)
}

// stagedCols is QP_XS_COLS: the longest input vector the matvecs stage in
// threadgroup memory (TestParamStructSizes checks the source).
const stagedCols = 8192

func matCases() []matCase {
	var cs []matCase
	types := []mlxq.Float{mlxq.BF16, mlxq.F16, mlxq.F32}
	for _, bits := range []int{4, 8} {
		for _, g := range []int{32, 64, 128} {
			for _, t := range types {
				cs = append(cs, matCase{67, 512, bits, g, t}, matCase{8, 2048 + 128, bits, g, t})
			}
		}
	}
	// Rows longer than the kernels stage (QP_XS_COLS): x read in place.
	cs = append(cs, matCase{5, stagedCols + 128, 4, 64, mlxq.BF16}, matCase{6, stagedCols + 256, 8, 32, mlxq.F16})
	for _, bits := range []int{2, 3, 5, 6} {
		cs = append(cs, matCase{33, 384, bits, 64, mlxq.BF16}, matCase{9, 256, bits, 32, mlxq.F32})
	}
	for _, t := range types {
		cs = append(cs, matCase{41, 300, 0, 0, t})
	}
	return cs
}

func makeMatrix(t testing.TB, r *rand.Rand, c matCase) mlxq.Matrix {
	t.Helper()
	w := randVec(r, c.rows*c.cols, 0.5)
	if c.bits == 0 {
		data := make([]byte, c.rows*c.cols*c.t.Size())
		mlxq.EncodeFloats(data, w, c.t)
		m, err := mlxq.NewDense(c.rows, c.cols, c.t, data)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m, err := mlxq.Quantize(w, c.rows, c.cols, c.bits, c.group, c.t)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMatMulConformance compares every kernel with the CPU backend on
// random matrices and inputs, for one and several vectors, staged and from
// Alloc memory in place (which must give the same bits).
func TestMatMulConformance(t *testing.T) {
	b := openOrSkip(t)
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range matCases() {
		m := makeMatrix(t, r, c)
		for _, n := range []int{1, 3} {
			x := randVec(r, n*c.cols, 1)
			got := make([]float32, n*c.rows)
			b.MatMul(m, got, x, n)
			checkMatMul(t, fmt.Sprintf("%v n=%d staged", c, n), m, x, got, n)

			again := make([]float32, n*c.rows)
			b.MatMul(m, again, x, n)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(again[i]) {
					t.Fatalf("%v n=%d: not deterministic at %d: %g then %g", c, n, i, got[i], again[i])
				}
			}
			// The same matrix with its bytes in Alloc memory: read in place.
			zc := inAlloc(t, b, m)
			before := b.Stats().ZeroCopyBytes
			inPlace := make([]float32, n*c.rows)
			b.MatMul(zc, inPlace, x, n)
			if b.Stats().ZeroCopyBytes == before {
				t.Errorf("%v: no weight bytes read in place from Alloc memory", c)
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(inPlace[i]) {
					t.Fatalf("%v n=%d: in place gives %g at %d, staged %g", c, n, inPlace[i], i, got[i])
				}
			}
		}
	}
	// The 4- and 8-bit matvecs with their chunks split over 1 to 8
	// simdgroups, whatever gemvSplit would pick for the shape.
	for _, c := range matCases() {
		if c.bits != 4 && c.bits != 8 {
			continue
		}
		m := makeMatrix(t, r, c)
		for _, split := range []int{1, 2, 4, 8} {
			b.splitOverride = split
			for _, n := range []int{1, 3} {
				x := randVec(r, n*c.cols, 1)
				got := make([]float32, n*c.rows)
				b.MatMul(m, got, x, n)
				checkMatMul(t, fmt.Sprintf("%v n=%d split %d", c, n, split), m, x, got, n)
			}
		}
		b.splitOverride = 0
	}
	if err := b.Err(); err != nil {
		t.Fatalf("a device error made calls fall back to the CPU: %v", err)
	}
	if s := b.Stats(); s.Fallbacks != 0 || s.Launches == 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestGemvSplitFor(t *testing.T) {
	for _, c := range []struct{ rows, cols, bits, want int }{
		{12352, 2048, 4, 1}, // the DeltaNet's input projections: enough row quads
		{32768, 2048, 4, 1},
		{2048, 4096, 4, 2}, // an output projection: 512 quads (split 4 measured 9% slower)
		{1024, 2048, 4, 2}, // 64 chunks a row: two simdgroups keep a chunk a lane
		{256, 2048, 8, 4},  // a router: 128 chunks a row
		{257, 2048, 8, 4},
		{2048, 512, 4, 1}, // 16 chunks a row
		{1, 1 << 16, 8, 8},
		{8, 2176, 4, 2}, {8, 2176, 8, 4},
	} {
		if got := gemvSplitFor(c.rows, c.cols, c.bits, 1); got != c.want {
			t.Errorf("gemvSplitFor(%d, %d, %d, 1) = %d, want %d", c.rows, c.cols, c.bits, got, c.want)
		}
	}
}

// Vectors have groups of their own: a batch of them needs no split.
func TestGemvSplitForVectors(t *testing.T) {
	for _, c := range []struct{ rows, n, want int }{{2048, 1, 2}, {2048, 2, 1}, {2048, 4, 1}, {1024, 8, 1}, {256, 2, 4}} {
		if got := gemvSplitFor(c.rows, 4096, 4, c.n); got != c.want {
			t.Errorf("gemvSplitFor(%d, 4096, 4, %d) = %d, want %d", c.rows, c.n, got, c.want)
		}
	}
}

// The MoE gate/up keeps the larger target: a decode step's slots of the
// 35B's [512, 2048] experts at split 2, fewer tokens' slots at more.
func TestMoESplitFor(t *testing.T) {
	for _, c := range []struct{ slots, want int }{{8, 2}, {9, 2}, {16, 1}, {4, 2}, {1, 2}} {
		if got := moeSplitFor(512, 2048, 4, c.slots); got != c.want {
			t.Errorf("moeSplitFor(512, 2048, 4, %d) = %d, want %d", c.slots, got, c.want)
		}
	}
	if got := moeSplitFor(512, 4096, 4, 2); got != 4 {
		t.Errorf("moeSplitFor(512, 4096, 4, 2) = %d, want 4", got)
	}
}

// inAlloc copies m's bytes into one Alloc buffer (weights at offset 0,
// scales and biases at 64-byte aligned offsets, as runtime.Load's arena).
func inAlloc(t testing.TB, b *Backend, m mlxq.Matrix) mlxq.Matrix {
	t.Helper()
	al := func(n int) int { return (n + 63) &^ 63 }
	n := al(len(m.Weight)) + al(len(m.Scales)) + al(len(m.Biases)) + 64
	buf, err := b.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Free(buf); err != nil {
			t.Error(err)
		}
	})
	off := 0
	put := func(p []byte) []byte {
		d := buf[off : off+len(p)]
		copy(d, p)
		off += al(len(p))
		return d
	}
	z := m
	z.Weight, z.Scales, z.Biases = put(m.Weight), put(m.Scales), put(m.Biases)
	return z
}

// The norm and SwiGLU bound: 1e-5 relative to the largest |value| of the
// row (float32 sums against the CPU's float64 ones, expf/rsqrtf within 2
// ulp).
const elemTol = 1e-5

func checkClose(t *testing.T, what string, got, want []float32, row int) {
	t.Helper()
	bad := 0
	for r0 := 0; r0 < len(want); r0 += row {
		var mx float64
		for _, v := range want[r0 : r0+row] {
			mx = max(mx, math.Abs(float64(v)))
		}
		for i := r0; i < r0+row; i++ {
			if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= elemTol*mx+1e-30) {
				if bad++; bad <= 5 {
					t.Errorf("%s: [%d] = %g, CPU %g", what, i, got[i], want[i])
				}
			}
		}
	}
}

func TestRMSNormConformance(t *testing.T) {
	b := openOrSkip(t)
	r := rand.New(rand.NewPCG(3, 4))
	for _, dim := range []int{1, 64, 1000, 4096, 5120} {
		for _, rows := range []int{1, 7} {
			x := randVec(r, rows*dim, 3)
			w := randVec(r, dim, 2)
			got := make([]float32, rows*dim)
			want := make([]float32, rows*dim)
			b.RMSNorm(got, x, w, 1e-6)
			runtime.CPU{}.RMSNorm(want, x, w, 1e-6)
			checkClose(t, fmt.Sprintf("rms_norm %dx%d", rows, dim), got, want, dim)
			// In place (y == x), as the graph calls it.
			b.RMSNorm(x, x, w, 1e-6)
			checkClose(t, fmt.Sprintf("rms_norm in place %dx%d", rows, dim), x, want, dim)
		}
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestSwiGLUConformance(t *testing.T) {
	b := openOrSkip(t)
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 255, 256, 257, 100003} {
		g, u := randVec(r, n, 30), randVec(r, n, 4)
		got, want := make([]float32, n), make([]float32, n)
		b.SwiGLU(got, g, u)
		runtime.CPU{}.SwiGLU(want, g, u)
		// Element-wise: relative to each value (the row is one element).
		checkClose(t, fmt.Sprintf("swiglu n=%d", n), got, want, 1)
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestMatMulManyVectors crosses CUDA's grid limit of 65535 vectors per
// launch, which the matvec splits (6 bits: a width the batched kernels do
// not take; gemm_test.go covers theirs).
func TestMatMulManyVectors(t *testing.T) {
	b := openOrSkip(t)
	r := rand.New(rand.NewPCG(9, 10))
	c := matCase{9, 64, 6, 32, mlxq.BF16}
	m := makeMatrix(t, r, c)
	n := maxGridY + 2
	x := randVec(r, n*c.cols, 1)
	got := make([]float32, n*c.rows)
	b.MatMul(m, got, x, n)
	checkMatMul(t, fmt.Sprintf("%v n=%d", c, n), m, x, got, n)
	if s := b.Stats(); s.Launches != 2 || s.Fallbacks != 0 {
		t.Fatalf("stats %+v, want 2 launches", s)
	}
}

func TestAllocFree(t *testing.T) {
	b := openOrSkip(t)
	m, err := b.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range m {
		if v != 0 {
			t.Fatalf("Alloc memory not zeroed at %d", i)
		}
	}
	if err := b.Free(make([]byte, 10)); err == nil {
		t.Error("Free of Go memory succeeded")
	}
	if err := b.Free(m); err != nil {
		t.Fatal(err)
	}
	if err := b.Free(m); err == nil {
		t.Error("double Free succeeded")
	}
	if _, err := b.Alloc(0); err == nil {
		t.Error("Alloc(0) succeeded")
	}
}

// TestNoSuchDevice: asking for a device the driver does not have is
// ErrNoDevice (what --backend cuda maps to exit 2).
func TestNoSuchDevice(t *testing.T) {
	openOrSkip(t)
	_, err := NewDevice(1 << 20)
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("NewDevice(1<<20): %v, want ErrNoDevice", err)
	}
	t.Logf("NewDevice(1<<20): %v", err)
}

// weights returns m's elements as floats ([Rows][Cols]).
func weights(m mlxq.Matrix) []float32 {
	if m.Bits > 0 {
		return m.Dequantize()
	}
	w := make([]float32, m.Rows*m.Cols)
	mlxq.DecodeFloats(w, m.Weight, m.Type)
	return w
}

// A decode step's shared expert rides as the routed experts' slot k for
// the shapes the models ship (the 35B's and Qwen3-Next's [512, 2048]
// 4-bit experts, 8 and 10 routed): sharedSlot must ask the split the
// gate/up launch uses (moeSplit). When it asked gemvSplit after that
// target moved to 1,024 simdgroups, the 35B's decode fell back to the
// shared expert's own two launches (+16 launches a token at 8 layers,
// 1,567 -> 1,482 tok/s on an H100 in the seventeenth session).
func TestSharedSlotAtDecode(t *testing.T) {
	q := func(rows, cols int) mlxq.Matrix {
		return mlxq.Matrix{Rows: rows, Cols: cols, Bits: 4, GroupSize: 64, Type: mlxq.BF16}
	}
	kern := [2]string{"moe_gateup_q4", "moe_down_q4"}
	for _, k := range []int{8, 10} {
		tab := &expertTable{shape: [3]mlxq.Matrix{q(512, 2048), q(512, 2048), q(2048, 512)}, kernels: kern}
		se := &sharedExpert{gate: q(512, 2048), down: q(2048, 512), kernels: kern}
		b := &Backend{}
		if !b.sharedSlot(tab, se, 1, k) {
			t.Errorf("k=%d: a decode step's shared expert is not slot k", k)
		}
		b.noSharedSlot = true
		if b.sharedSlot(tab, se, 1, k) {
			t.Errorf("k=%d: slot k with %s=0", k, sharedSlotEnv)
		}
	}
}
