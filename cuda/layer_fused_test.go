package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The fused ops' launches on the fake device: products of one format share
// one gemv_*_set launch (at most four per launch, the rest in the next),
// other formats and batched products go to their own kernels, and the
// results are MatMul's bit for bit; AddRMSNorm is one add_rms_norm_rows.
func TestFusedLaunches(t *testing.T) {
	b, f := fakeBackend(t)
	l := b.Layer()
	r := rand.New(rand.NewPCG(5, 6))
	const C = 256
	mat := func(rows, bits, group int) nn.Mat {
		w := make([]float32, rows*C)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		m, err := mlxq.Quantize(w, rows, C, bits, group, mlxq.BF16)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Resident(m)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	q4 := []nn.Mat{mat(40, 4, 64), mat(33, 4, 64), mat(1, 4, 64), mat(64, 4, 64), mat(7, 4, 64)}
	q8 := mat(20, 8, 64)
	q4g32 := mat(9, 4, 32)
	ws := append(append([]nn.Mat{}, q4...), q8, q4g32)
	x := make([]float32, 2*C)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, n := range []int{1, 2} {
		X := l.Temp(n * C)
		l.Write(X, x[:n*C])
		ps := make([]nn.Product, len(ws))
		ys := make([]nn.Tensor, len(ws))
		for i, w := range ws {
			ys[i] = l.Temp(n * w.W.Rows)
			ps[i] = nn.Product{W: w, Y: ys[i]}
		}
		f.launches = nil
		nn.MatMuls(l, X, n, ps...)
		got := slices.Clone(f.launches)
		// Five q4 g64 products: a set of four and a set of one (which is
		// a plain gemv); q8 and q4 g32 alone: plain gemvs.
		want := []string{"gemv_q4_set", "gemv_q4", "gemv_q8", "gemv_q4"}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("n=%d: launches %v, want %v (any order)", n, f.launches, want)
		}
		for i, w := range ws {
			one := l.Temp(n * w.W.Rows)
			l.MatMul(w, one, X, n)
			a, c := make([]float32, one.N), make([]float32, one.N)
			if err := l.Read(a, ys[i]); err != nil {
				t.Fatal(err)
			}
			if err := l.Read(c, one); err != nil {
				t.Fatal(err)
			}
			sameBits(t, "MatMuls product", a, c)
		}
		if err := l.EndPass(); err != nil {
			t.Fatal(err)
		}
	}
	// AddRMSNorm: one launch.
	X, R, Y := l.Temp(3*C), l.Temp(3*C), l.Temp(3*C)
	l.Write(X, append(x, x[:C]...))
	l.Write(R, append(x[C:], x...))
	w, err := l.Constant(x[:C])
	if err != nil {
		t.Fatal(err)
	}
	f.launches = nil
	nn.AddRMSNorm(l, X, R, Y, w, nn.NormSpec{Rows: 3, Width: C, Eps: 1e-6})
	if !slices.Equal(f.launches, []string{"add_rms_norm_rows"}) {
		t.Errorf("AddRMSNorm launches %v", f.launches)
	}
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
}
