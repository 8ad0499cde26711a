package devicetest

import (
	"fmt"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The fused ops (nn/fused.go) through their helpers, so a device that
// implements them is checked on its fused path and every other device on
// the fallback.

// AddRMSNorm: every NormKind, one row and several, y contiguous and
// strided; x holds x+r afterwards (float32 sums, exactly), y the norm of
// that sum within the norm bound, and nothing outside y's rows is written.
func testAddRMSNorm(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(11)
	_, fused := dev.(nn.ResidualNormer)
	for _, kind := range []nn.NormKind{nn.NormWeight, nn.NormOffset, nn.NormUnit} {
		for _, width := range []int{37, 256} {
			for _, rows := range []int{1, 6} {
				for _, ystride := range []int{0, width + 5} {
					ys := max(ystride, width)
					n := rows * width
					x, res := randF32(r, n, 2), randF32(r, n, 2)
					w, W := normWeightOf(t, dev, r, kind, width)
					X, R := put(dev, x), put(dev, res)
					yInit := make([]float32, (rows-1)*ys+width+3)
					for i := range yInit {
						yInit[i] = 9
					}
					Y := put(dev, yInit)
					const eps = 1e-6
					nn.AddRMSNorm(dev, X, R, Y, W, nn.NormSpec{Rows: rows, Width: width, YStride: ystride, Eps: eps, Kind: kind})
					gotX, gotY := get(t, dev, X), get(t, dev, Y)
					what := fmt.Sprintf("kind=%d width=%d rows=%d ystride=%d", kind, width, rows, ystride)
					sum := make([]float32, n)
					for i := range sum {
						sum[i] = x[i] + res[i]
					}
					exact(t, what+": x+r", gotX, sum)
					checkNormRows(t, what, gotY, yInit, sum, rows, width, width, ys, w, kind, eps, tol.Norm)
					endPass(t, dev)
				}
			}
		}
	}
	t.Logf("AddRMSNorm (fused on the device: %v): all kinds and y strides, x+r exact, norms within %.3g", fused, tol.Norm)
}

// MatMuls: products of one input sharing a launch where the device fuses
// them, in every combination a graph makes (widths and formats alike, one
// of another format among them, a one-row product), n = 1, 3 and 17, the
// outputs at offsets with a sentinel float between them.
func testMatMuls(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(12)
	_, fused := dev.(nn.SharedMatMuler)
	const C = 256
	sets := []struct {
		name string
		mats []refMat
	}{
		{"q4 qkv", []refMat{randQuant(r, 96, C, 4, 64, mlxq.BF16), randQuant(r, 32, C, 4, 64, mlxq.BF16), randQuant(r, 32, C, 4, 64, mlxq.BF16)}},
		{"q4 deltanet", []refMat{randQuant(r, 130, C, 4, 64, mlxq.BF16), randQuant(r, 64, C, 4, 64, mlxq.BF16),
			randQuant(r, 4, C, 4, 64, mlxq.BF16), randQuant(r, 4, C, 4, 64, mlxq.BF16)}},
		{"q8 router and gate", []refMat{randQuant(r, 40, C, 8, 64, mlxq.BF16), randQuant(r, 1, C, 8, 64, mlxq.BF16)}},
		{"mixed", []refMat{randQuant(r, 33, C, 4, 32, mlxq.F16), randQuant(r, 17, C, 8, 64, mlxq.BF16),
			randQuant(r, 9, C, 4, 64, mlxq.BF16), randDense(r, 5, C, mlxq.BF16), randQuant(r, 7, C, 3, 64, mlxq.F32),
			randQuant(r, 12, C, 4, 32, mlxq.F16)}},
		{"one", []refMat{randQuant(r, 20, C, 4, 64, mlxq.BF16)}},
	}
	worst := 0.0
	for _, set := range sets {
		ws := make([]nn.Mat, len(set.mats))
		for i, rm := range set.mats {
			var err error
			if ws[i], err = dev.Resident(rm.m); err != nil {
				t.Fatalf("%s: Resident: %v", rm.desc, err)
			}
		}
		for _, n := range []int{1, 3, 17} {
			x := randF32(r, n*C, 1)
			X := put(dev, x)
			// The outputs one after another in one Temp, a sentinel
			// before each and after the last.
			total := 1
			for _, rm := range set.mats {
				total += n*rm.m.Rows + 1
			}
			Y := dev.Temp(total)
			init := make([]float32, total)
			for i := range init {
				init[i] = -7
			}
			dev.Write(Y, init)
			ps := make([]nn.Product, len(set.mats))
			off := 1
			for i, rm := range set.mats {
				ps[i] = nn.Product{W: ws[i], Y: Y.Slice(off, off+n*rm.m.Rows)}
				off += n*rm.m.Rows + 1
			}
			nn.MatMuls(dev, X, n, ps...)
			got := get(t, dev, Y)
			off = 1
			for i, rm := range set.mats {
				what := fmt.Sprintf("%s n=%d product %d (%s)", set.name, n, i, rm.desc)
				if got[off-1] != -7 {
					t.Fatalf("%s: MatMuls wrote the float before its output", what)
				}
				want, mag := rm.apply(x, n)
				w, _ := check(t, what, got[off:off+n*rm.m.Rows], want, mag, tol.MatMul)
				worst = max(worst, w)
				off += n*rm.m.Rows + 1
			}
			if got[total-1] != -7 {
				t.Fatalf("%s n=%d: MatMuls wrote past the last output", set.name, n)
			}
			endPass(t, dev)
		}
	}
	t.Logf("MatMuls (fused on the device: %v): max error %.3g × Σ|W x| (bound %.3g)", fused, worst, tol.MatMul)
}
