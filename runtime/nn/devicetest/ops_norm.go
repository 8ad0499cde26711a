package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// RMSNorm: every NormKind, odd and even widths, one row and several,
// contiguous and strided rows, in place and not; the floats between strided
// rows are left alone.
func testRMSNorm(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(3)
	kinds := []nn.NormKind{nn.NormWeight, nn.NormOffset, nn.NormUnit}
	for _, kind := range kinds {
		for _, width := range []int{37, 64} {
			for _, rows := range []int{1, 5} {
				for _, c := range []struct{ xs, ys int }{{0, 0}, {width + 3, width + 5}, {width + 7, 0}} {
					for _, inPlace := range []bool{false, true} {
						if inPlace && c.xs != c.ys {
							continue
						}
						xs, ys := max(c.xs, width), max(c.ys, width)
						x := randF32(r, (rows-1)*xs+width+2, 2)
						w, W := normWeightOf(t, dev, r, kind, width)
						X := put(dev, x)
						Y := X
						yInit := make([]float32, (rows-1)*ys+width+2)
						for i := range yInit {
							yInit[i] = 9
						}
						if !inPlace {
							Y = put(dev, yInit)
						} else {
							yInit = append([]float32(nil), x...)
						}
						const eps = 1e-6
						dev.RMSNorm(Y, X, W, nn.NormSpec{Rows: rows, Width: width, XStride: c.xs, YStride: c.ys, Eps: eps, Kind: kind})
						got := get(t, dev, Y)
						what := fmt.Sprintf("kind=%d width=%d rows=%d xs=%d ys=%d inplace=%v", kind, width, rows, c.xs, c.ys, inPlace)
						checkNormRows(t, what, got, yInit, x, rows, width, xs, ys, w, kind, eps, tol.Norm)
						endPass(t, dev)
					}
				}
			}
		}
	}
	t.Logf("RMSNorm: all kinds, strides and aliasing within %.3g of each row's max", tol.Norm)
}

// normWeightOf draws a norm weight for kind (none for NormUnit: nil and
// an empty tensor) and makes it a Constant of dev.
func normWeightOf(t *testing.T, dev nn.Device, r *rand.Rand, kind nn.NormKind, width int) ([]float32, nn.Tensor) {
	t.Helper()
	var w []float32
	switch kind {
	case nn.NormWeight:
		w = randRange(r, width, 0.5, 1.5)
	case nn.NormOffset:
		w = randF32(r, width, 0.5)
	default:
		return nil, nn.Tensor{}
	}
	W, err := dev.Constant(w)
	if err != nil {
		t.Fatal(err)
	}
	return w, W
}

// checkNormRows checks y (got; init: its contents before the op) against
// the float64 RMSNorm of rows rows of width of x at stride xs, with kind's
// weight w: each row within tol of its largest |value|, and nothing written
// between y's rows (at stride ys) or after the last.
func checkNormRows(t *testing.T, what string, got, init, x []float32, rows, width, xs, ys int, w []float32, kind nn.NormKind, eps, tol float64) {
	t.Helper()
	var gotRows []float32
	var want []float64
	for row := range rows {
		xr := f64(x[row*xs : row*xs+width])
		inv := rms64(xr, eps)
		for i, v := range xr {
			f := v * inv
			switch kind {
			case nn.NormWeight:
				f *= float64(w[i])
			case nn.NormOffset:
				f *= 1 + float64(w[i])
			}
			want = append(want, f)
		}
		gotRows = append(gotRows, got[row*ys:row*ys+width]...)
		end := (row + 1) * ys
		if row == rows-1 {
			end = len(got)
		}
		for i := row*ys + width; i < end; i++ {
			if got[i] != init[i] {
				t.Fatalf("%s: wrote y[%d] outside its rows", what, i)
			}
		}
	}
	check(t, what, gotRows, want, rowScale(want, width), tol)
}

// refRoPE rotates head vectors as RoPE documents: pair i by
// angle = float32(pos)·InvFreq[i] (the float32 product transformers
// computes), cos and sin in float64.
func refRoPE(x []float32, rp *nn.RoPE, s nn.RoPESpec) []float64 {
	out := f64(x)
	for row := range s.Rows {
		pos := s.Pos0 + row/s.PerPos
		h := out[row*s.Stride:]
		for i, f := range rp.InvFreq {
			ang := float64(float32(pos) * f)
			c, sn := math.Cos(ang), math.Sin(ang)
			i0, i1 := i, i+rp.Half
			if rp.Interleaved {
				i0, i1 = 2*i, 2*i+1
			}
			a, b := h[i0], h[i1]
			h[i0] = a*c - b*sn
			h[i1] = b*c + a*sn
		}
	}
	return out
}

// RoPE: NeoX over the whole head, partial, proportional, interleaved;
// several heads per token, strides above the head dim (the rest of the
// stride is untouched), positions from 0 and far.
func testRoPE(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(4)
	const hd = 24
	inter := &nn.RoPE{InvFreq: make([]float32, 6), Interleaved: true}
	for i := range inter.InvFreq {
		inter.InvFreq[i] = float32(math.Pow(10000, -float64(2*i)/12))
	}
	ropes := []struct {
		name string
		r    *nn.RoPE
	}{
		{"neox", nn.NewRoPE(hd, 1e6)},
		{"partial", nn.NewRoPE(8, 1e4)},
		{"proportional", nn.NewProportionalRoPE(hd, 4, 1e6, 2)},
		{"interleaved", inter},
	}
	// The constructors' frequencies against their float64 definitions.
	for i := range hd / 2 {
		want := math.Pow(1e6, -float64(2*i)/hd)
		if d := math.Abs(float64(ropes[0].r.InvFreq[i]) - want); d > 1e-6*want {
			t.Fatalf("NewRoPE inverse frequency %d: %g, want %g", i, ropes[0].r.InvFreq[i], want)
		}
	}
	for _, rc := range ropes {
		for _, c := range []struct{ T, per, stride, pos0 int }{{1, 4, hd, 0}, {3, 4, hd, 7}, {5, 2, 2 * hd, 0}, {2, 3, hd + 5, 1000}} {
			rows := c.T * c.per
			x := randF32(r, (rows-1)*c.stride+hd, 1)
			X := put(dev, x)
			s := nn.RoPESpec{Rows: rows, PerPos: c.per, Stride: c.stride, Pos0: c.pos0}
			dev.RoPE(X, rc.r, s)
			got := get(t, dev, X)
			want := refRoPE(x, rc.r, s)
			// Scale: each head's largest |x|.
			scale := make([]float64, len(want))
			for row := range rows {
				m := maxAbs64(f64(x[row*c.stride : row*c.stride+hd]))
				for i := row * c.stride; i < min(len(scale), (row+1)*c.stride); i++ {
					scale[i] = m
				}
			}
			within(t, fmt.Sprintf("%s T=%d heads=%d stride=%d pos0=%d", rc.name, c.T, c.per, c.stride, c.pos0), got, want, scale, tol.Elementwise)
			endPass(t, dev)
		}
	}
}
