package devicetest

import (
	"math"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// within fails t unless |got[i] − want[i]| ≤ tol·scale[i] for every i
// (scale nil: 1), and logs the worst ratio.
func within(t *testing.T, what string, got []float32, want, scale []float64, tol float64) {
	t.Helper()
	worst, worstAbs := check(t, what, got, want, scale, tol)
	t.Logf("%s: max error %.3g of the bound's scale (bound %.3g), max abs %.3g", what, worst, tol, worstAbs)
}

// check is within without the log: it returns the worst ratio and the
// worst absolute error.
func check(t *testing.T, what string, got []float32, want, scale []float64, tol float64) (float64, float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, at := 0.0, -1
	var worstAbs float64
	for i := range got {
		s := 1.0
		if scale != nil {
			s = scale[i]
		}
		if math.IsNaN(float64(got[i])) || math.IsInf(float64(got[i]), 0) {
			t.Fatalf("%s: element %d is %g, want %g", what, i, got[i], want[i])
		}
		d := math.Abs(float64(got[i]) - want[i])
		worstAbs = max(worstAbs, d)
		switch {
		case s > 0 && d/s > worst:
			worst, at = d/s, i
		case s == 0 && d > 0:
			t.Fatalf("%s: element %d is %g, want exactly %g", what, i, got[i], want[i])
		}
	}
	if worst > tol {
		t.Fatalf("%s: element %d is %g, want %g (error %.3g × scale %.3g > %.3g)", what, at, got[at], want[at], worst, scale1(scale, at), tol)
	}
	return worst, worstAbs
}

func scale1(s []float64, i int) float64 {
	if s == nil {
		return 1
	}
	return s[i]
}

// same returns n copies of v.
func same(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// relScale is the element-wise scale: |ref| with a floor of 1% of the
// largest |ref| (and of tiny, for an all-zero reference).
func relScale(want []float64) []float64 {
	floor := max(0.01*maxAbs64(want), 1e-30)
	out := make([]float64, len(want))
	for i, v := range want {
		out[i] = max(math.Abs(v), floor)
	}
	return out
}

// rowScale is, per element, the largest |ref| of its row of width w
// (rows at stride w).
func rowScale(want []float64, w int) []float64 {
	out := make([]float64, len(want))
	for r := 0; r*w < len(want); r++ {
		m := max(maxAbs64(want[r*w:min((r+1)*w, len(want))]), 1e-30)
		for i := r * w; i < min((r+1)*w, len(want)); i++ {
			out[i] = m
		}
	}
	return out
}

// exact fails t unless got equals want bit for bit.
func exact(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %g, want %g exactly", what, i, got[i], want[i])
		}
	}
}

// put returns a view holding x, at an offset inside a larger Temp (so
// every op sees tensors with Off > 0).
func put(dev nn.Device, x []float32) nn.Tensor {
	d := view(dev, len(x))
	dev.Write(d, x)
	return d
}

// view returns n zeroed floats at offset 3 of a Temp of n+7.
func view(dev nn.Device, n int) nn.Tensor { return dev.Temp(n+7).Slice(3, 3+n) }

// get reads a tensor back.
func get(t *testing.T, dev nn.Device, x nn.Tensor) []float32 {
	t.Helper()
	out := make([]float32, x.N)
	if err := dev.Read(out, x); err != nil {
		t.Fatalf("%s: Read: %v", dev.Name(), err)
	}
	return out
}

// endPass ends the pass, failing on a device error.
func endPass(t *testing.T, dev nn.Device) {
	t.Helper()
	if err := dev.EndPass(); err != nil {
		t.Fatalf("%s: EndPass: %v", dev.Name(), err)
	}
}
