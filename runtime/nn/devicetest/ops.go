package devicetest

import (
	"math/rand/v2"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// Ops checks every Device method of dev against the references of this
// package (see the package doc), within tol (zero fields: defaults). Each
// group of checks is a subtest; every subtest ends its pass (EndPass) and
// fails on a device error.
func Ops(t *testing.T, dev nn.Device, tol Tolerances) {
	tol = tol.filled()
	t.Logf("device %s, tolerances %+v", dev.Name(), tol)
	run := func(name string, f opCheck) { runOp(t, dev, tol, name, f) }
	run("Memory", testMemory)
	run("Temp", testTemp)
	run("MatMul", testMatMul)
	run("RMSNorm", testRMSNorm)
	run("AddRMSNorm", testAddRMSNorm)
	run("MatMuls", testMatMuls)
	run("RoPE", testRoPE)
	run("Attention", testAttention)
	run("KVState", testKVState)
	run("TensorState", testTensorState)
	run("DeltaNet", testDeltaNet)
	run("Gather", testGather)
	run("GatherScatterRows", testRows)
	run("GLU", testGLU)
	run("SigmoidMul", testSigmoidMul)
	run("AddScaleSoftcap", testAddScale)
	run("AddGated", testAddGated)
	run("Combine", testCombine)
	run("Route", testRoute)
	run("SelectTop", testSelectTop)
	run("Expert", testExpert)
	run("RoutedExperts", testRoutedExperts)
	run("GroupedExperts", testGroupedExperts)
	run("Determinism", testDeterminism)
}

// opCheck is one group of Ops' checks.
type opCheck func(t *testing.T, dev nn.Device, tol Tolerances)

// runOp runs f as the subtest name, ending its pass (EndPass) and failing
// on a device error.
func runOp(t *testing.T, dev nn.Device, tol Tolerances, name string, f opCheck) {
	t.Run(name, func(t *testing.T) {
		defer func() {
			if err := dev.EndPass(); err != nil {
				t.Errorf("%s: EndPass: %v", dev.Name(), err)
			}
		}()
		f(t, dev, tol)
	})
}

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// Write/Read/Copy round trips, Alloc zeroed, views through Slice.
func testMemory(t *testing.T, dev nn.Device, _ Tolerances) {
	r := rng(1)
	a, err := dev.Alloc(53)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(a)
	if got := get(t, dev, a); !allZero(got) {
		t.Fatalf("Alloc is not zeroed: %v", got)
	}
	src := randF32(r, 20, 1)
	keep := append([]float32(nil), src...)
	dev.Write(a.Slice(10, 30), src)
	for i := range src { // the device must have taken its copy
		src[i] = -7
	}
	want := make([]float32, 53)
	copy(want[10:], keep)
	exact(t, "Write then Read", get(t, dev, a), want)

	// A partial Write (len(src) < dst.N) leaves the rest.
	dev.Write(a.Slice(40, 53), []float32{1, 2, 3})
	copy(want[40:], []float32{1, 2, 3})
	exact(t, "partial Write", get(t, dev, a), want)

	b, err := dev.Alloc(31)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Free(b)
	dev.Copy(b.Slice(3, 31), a.Slice(10, 30)) // dst longer than src
	wb := make([]float32, 31)
	copy(wb[3:], keep)
	exact(t, "Copy", get(t, dev, b), wb)
	part := make([]float32, 20)
	if err := dev.Read(part, b.Slice(3, 23)); err != nil {
		t.Fatal(err)
	}
	exact(t, "Read of a view", part, keep)

	// Write, Copy and Read queued in order: the Read sees the later Write.
	tmp := dev.Temp(20)
	dev.Copy(tmp, a.Slice(10, 30))
	dev.Write(a.Slice(10, 30), make([]float32, 20))
	exact(t, "Copy before a Write", get(t, dev, tmp), keep)
	endPass(t, dev)
}

func allZero(x []float32) bool {
	for _, v := range x {
		if v != 0 {
			return false
		}
	}
	return true
}

// Temp is zeroed, also when it reuses the memory of an earlier pass.
func testTemp(t *testing.T, dev nn.Device, _ Tolerances) {
	for pass := range 3 {
		a, b := dev.Temp(1000), dev.Temp(37)
		if got := get(t, dev, a); !allZero(got) {
			t.Fatalf("pass %d: Temp(1000) not zeroed", pass)
		}
		if got := get(t, dev, b); !allZero(got) {
			t.Fatalf("pass %d: Temp(37) not zeroed", pass)
		}
		ones := make([]float32, 1000)
		for i := range ones {
			ones[i] = 1
		}
		dev.Write(a, ones)
		dev.Write(b, ones[:37])
		endPass(t, dev)
	}
	if err := dev.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}
