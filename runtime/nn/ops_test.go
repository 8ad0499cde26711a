package nn

import (
	"math"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestRMSNormByHand(t *testing.T) {
	// x = [3, 4]: mean(x²) = 12.5, 1/sqrt(12.5) = 0.28284271...
	x := []float32{3, 4}
	w := []float32{1, 2}
	y := make([]float32, 2)
	RMSNorm(y, x, w, 0)
	if !near(float64(y[0]), 0.848528137, 1e-6) || !near(float64(y[1]), 2.262741700, 1e-6) {
		t.Fatalf("rmsNorm = %v, want [0.8485 2.2627]", y)
	}
	// eps enters inside the root: x = [1,1], eps = 3 → 1/sqrt(4) = 0.5.
	RMSNorm(y, []float32{1, 1}, []float32{1, 1}, 3)
	if y[0] != 0.5 || y[1] != 0.5 {
		t.Fatalf("rmsNorm with eps = %v, want [0.5 0.5]", y)
	}
	// rows
	out := make([]float32, 4)
	RMSNormRows(out, []float32{3, 4, 1, 1}, []float32{1, 1}, 0)
	if !near(float64(out[1]), 4/math.Sqrt(12.5), 1e-6) || !near(float64(out[3]), 1, 1e-6) {
		t.Fatalf("rmsNormRows = %v", out)
	}
}

func TestL2Normalize(t *testing.T) {
	x := []float32{3, 4}
	L2Normalize(x, 0)
	if !near(float64(x[0]), 0.6, 1e-7) || !near(float64(x[1]), 0.8, 1e-7) {
		t.Fatalf("l2Normalize = %v", x)
	}
	// eps is added to the sum of squares, not to the mean: [0,0.001] with
	// eps 1e-6 → 0.001/sqrt(1e-6+1e-6).
	x = []float32{0, 0.001}
	L2Normalize(x, 1e-6)
	if !near(float64(x[1]), 0.001/math.Sqrt(2e-6), 1e-6) {
		t.Fatalf("l2Normalize small = %v, want %v", x[1], 0.001/math.Sqrt(2e-6))
	}
}

func TestActivations(t *testing.T) {
	if !near(float64(Sigmoid(0)), 0.5, 0) || !near(float64(Sigmoid(2)), 0.880797078, 1e-7) {
		t.Fatal("sigmoid")
	}
	if !near(float64(SiLU(1)), 0.731058579, 1e-7) || !near(float64(SiLU(-1)), -0.268941421, 1e-7) {
		t.Fatal("silu")
	}
	if !near(float64(Softplus(0)), math.Ln2, 1e-7) || Softplus(25) != 25 || !near(float64(Softplus(-3)), 0.048587352, 1e-8) {
		t.Fatalf("softplus: %v %v %v", Softplus(0), Softplus(25), Softplus(-3))
	}
	d := make([]float32, 2)
	SwiGLU(d, []float32{1, -1}, []float32{2, 3})
	if !near(float64(d[0]), 2*0.731058579, 1e-6) || !near(float64(d[1]), 3*-0.268941421, 1e-6) {
		t.Fatalf("swiGLU = %v", d)
	}
}

func TestSoftmaxTopK(t *testing.T) {
	x := []float32{1, 2, 3}
	Softmax(x)
	// e^1, e^2, e^3 normalised: 0.09003057, 0.24472847, 0.66524096
	want := []float64{0.09003057, 0.24472847, 0.66524096}
	for i := range x {
		if !near(float64(x[i]), want[i], 1e-7) {
			t.Fatalf("softmax = %v, want %v", x, want)
		}
	}
	big := []float32{1000, 1000}
	Softmax(big)
	if big[0] != 0.5 || big[1] != 0.5 {
		t.Fatalf("softmax overflow: %v", big)
	}

	p := []float32{0.1, 0.5, 0.05, 0.5, 0.3, 0.05}
	idx := make([]int, 3)
	TopK(idx, p)
	if idx[0] != 1 || idx[1] != 3 || idx[2] != 4 {
		t.Fatalf("topK = %v, want [1 3 4]", idx)
	}
	idx = make([]int, 6)
	TopK(idx, p)
	wantIdx := []int{1, 3, 4, 0, 2, 5}
	for i := range idx {
		if idx[i] != wantIdx[i] {
			t.Fatalf("topK all = %v, want %v", idx, wantIdx)
		}
	}
	if Argmax([]float32{1, 5, 5, 2}) != 1 {
		t.Fatal("argmax")
	}
}

func TestRopeByHand(t *testing.T) {
	// rotary 4 of head 6, theta 100: invFreq = [1, 100^(-1/2) = 0.1].
	r := NewRoPE(4, 100)
	if r.InvFreq[0] != 1 || !near(float64(r.InvFreq[1]), 0.1, 1e-8) {
		t.Fatalf("invFreq = %v", r.InvFreq)
	}
	x := []float32{1, 2, 3, 4, 5, 6}
	r.Apply(x, 0)
	for i, v := range []float32{1, 2, 3, 4, 5, 6} {
		if x[i] != v {
			t.Fatalf("pos 0 changed x: %v", x)
		}
	}
	r.Apply(x, 2)
	// pair (0,2) by angle 2, pair (1,3) by angle 0.2; dims 4,5 untouched.
	c0, s0 := math.Cos(2), math.Sin(2)
	c1, s1 := math.Cos(0.2), math.Sin(0.2)
	want := []float64{1*c0 - 3*s0, 2*c1 - 4*s1, 3*c0 + 1*s0, 4*c1 + 2*s1, 5, 6}
	for i := range x {
		if !near(float64(x[i]), want[i], 1e-6) {
			t.Fatalf("rope = %v, want %v", x, want)
		}
	}
	// A rotation keeps the norm and composes: pos 2 then pos 3 == pos 5.
	a := []float32{0.3, -1.2, 0.7, 2.5}
	b := append([]float32(nil), a...)
	r.Apply(a, 2)
	r.Apply(a, 3)
	r.Apply(b, 5)
	for i := range a {
		if !near(float64(a[i]), float64(b[i]), 1e-5) {
			t.Fatalf("rope composition: %v vs %v", a, b)
		}
	}
}
