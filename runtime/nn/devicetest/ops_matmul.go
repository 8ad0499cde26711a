package devicetest

import (
	"fmt"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

var floatTypes = []mlxq.Float{mlxq.BF16, mlxq.F16, mlxq.F32}

// MatMul for every mlxq format (2..8 bits, groups 32/64/128, bf16/f16/f32
// scales) and dense F32/F16/BF16, n = 1 and n > 1, odd row counts, output
// and input at offsets inside larger tensors.
func testMatMul(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(2)
	var mats []refMat
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, g := range []int{32, 64, 128} {
			for _, ft := range floatTypes {
				mats = append(mats, randQuant(r, 7, 3*g, bits, g, ft))
			}
		}
	}
	for _, ft := range floatTypes {
		mats = append(mats, randDense(r, 9, 37, ft), randDense(r, 131, 300, ft))
	}
	// Larger products (row splits, multi-vector kernels).
	mats = append(mats, randQuant(r, 133, 640, 4, 64, mlxq.BF16), randQuant(r, 67, 1024, 8, 32, mlxq.F16),
		randQuant(r, 65, 384, 3, 128, mlxq.F32), randQuant(r, 257, 256, 6, 64, mlxq.BF16))
	worst := 0.0
	for _, rm := range mats {
		w, err := dev.Resident(rm.m)
		if err != nil {
			t.Fatalf("%s: Resident: %v", rm.desc, err)
		}
		for _, n := range []int{1, 2, 5, 17} {
			if n == 17 && rm.m.Rows < 60 {
				continue
			}
			R, C := rm.m.Rows, rm.m.Cols
			x := randF32(r, n*C, 1)
			// x and y at odd offsets of larger tensors.
			X := dev.Temp(n*C + 5)
			dev.Write(X.Slice(3, 3+n*C), x)
			Y := dev.Temp(n*R + 4)
			sentinel := []float32{11, 12, 13, 14}
			dev.Write(Y.Slice(n*R+1, n*R+4), sentinel[1:])
			dev.Write(Y.Slice(0, 1), sentinel[:1])
			dev.MatMul(w, Y.Slice(1, 1+n*R), X.Slice(3, 3+n*C), n)
			got := get(t, dev, Y)
			want, mag := rm.apply(x, n)
			what := fmt.Sprintf("%s n=%d", rm.desc, n)
			w, _ := check(t, what, got[1:1+n*R], want, mag, tol.MatMul)
			worst = max(worst, w)
			if got[0] != 11 || got[n*R+1] != 12 || got[n*R+3] != 14 {
				t.Fatalf("%s: MatMul wrote outside y", what)
			}
			endPass(t, dev)
		}
	}
	t.Logf("MatMul: %d matrices, max error %.3g × Σ|W x| (bound %.3g)", len(mats), worst, tol.MatMul)
}

var _ = nn.Mat{}
