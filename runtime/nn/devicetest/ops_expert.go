package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// expertFixture is a routed expert laid out in one buffer the way an
// expert source hands it out.
type expertFixture struct {
	w              *nn.ExpertWeights
	gate, up, down refMat
}

func newExpert(layer, expert int, gate, up, down refMat) *expertFixture {
	buf := make([]byte, gate.m.Bytes()+up.m.Bytes()+down.m.Bytes())
	w := &nn.ExpertWeights{Layer: layer, Expert: expert, Buf: buf}
	off := 0
	w.Gate, off = into(gate.m, buf, off)
	w.Up, off = into(up.m, buf, off)
	w.Down, _ = into(down.m, buf, off)
	return &expertFixture{w: w, gate: gate, up: up, down: down}
}

// ref is down(silu(gate·x)·up·x) for n rows, and the bound's scale of the
// down product (Σ|W h|, with h the reference hidden activations).
func (e *expertFixture) ref(x []float32, n int) (y, mag []float64) {
	g, _ := e.gate.apply(x, n)
	u, _ := e.up.apply(x, n)
	h := make([]float32, len(g))
	for i := range h {
		h[i] = float32(silu64(g[i]) * u[i])
	}
	return e.down.apply(h, n)
}

// queue queues the expert's GLU over x's n rows with mats into a new Temp.
func queueExpert(dev nn.Device, mats nn.ExpertMats, x nn.Tensor, n int) nn.Tensor {
	I, H := mats.Gate.W.Rows, mats.Down.W.Rows
	g, u, y := view(dev, n*I), view(dev, n*I), view(dev, n*H)
	dev.MatMul(mats.Gate, g, x, n)
	dev.MatMul(mats.Up, u, x, n)
	dev.GLU(nn.SiLUGate, g, g, u, n*I)
	dev.MatMul(mats.Down, y, g, n)
	return y
}

// The expert rule: the source overwrites an ExpertWeights' bytes right
// after the work using it is queued (Release, then the slot reused for
// another expert); the result must not change. A device cache
// (CachedExpert) must then give the same expert, not the new bytes.
func testExpert(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(17)
	const H, I = 64, 128
	for _, q := range []struct{ bits, group int }{{4, 32}, {8, 64}, {0, 0}} {
		mk := func(rows, cols int) refMat {
			if q.bits == 0 {
				return randDense(r, rows, cols, mlxq.BF16)
			}
			return randQuant(r, rows, cols, q.bits, q.group, mlxq.BF16)
		}
		e := newExpert(3, 5+q.bits, mk(I, H), mk(I, H), mk(H, I))
		other := newExpert(3, 6, mk(I, H), mk(I, H), mk(H, I))
		const n = 3
		x := randF32(r, n*H, 1)
		want, mag := e.ref(x, n)
		// Expert's MatMul bound: the GLU's rounding enters the down
		// product; allow it on top of the MatMul bound.
		bound := tol.MatMul + 4*tol.Elementwise
		name := fmt.Sprintf("expert q%dg%d", q.bits, q.group)

		src, elsewhere := &testSource{}, &testSource{}
		mats, err := dev.Expert(src, e.w)
		if err != nil {
			t.Fatalf("%s: Expert: %v", name, err)
		}
		y := queueExpert(dev, mats, put(dev, x), n)
		copy(e.w.Buf, other.w.Buf) // Release; the slot now holds another expert
		within(t, name+" with its bytes overwritten after queuing", get(t, dev, y), want, mag, bound)
		endPass(t, dev)

		if _, ok := dev.CachedExpert(elsewhere, 3, 5+q.bits); ok {
			t.Fatalf("%s: the device's cache serves another source's expert (another model's)", name)
		}
		if cm, ok := dev.CachedExpert(src, 3, 5+q.bits); ok {
			y := queueExpert(dev, cm, put(dev, x), n)
			within(t, name+" from the device's cache", get(t, dev, y), want, mag, bound)
			endPass(t, dev)
		} else {
			t.Logf("%s: the device keeps no cache of experts (CachedExpert false)", name)
		}

		// A dense weight made Resident is used in place of the expert's
		// matrices: the same products.
		g, err := dev.Resident(e.gate.m)
		if err != nil {
			t.Fatal(err)
		}
		G := dev.Temp(n * I)
		dev.MatMul(g, G, put(dev, x), n)
		gw, gm := e.gate.apply(x, n)
		within(t, name+" gate through Resident", get(t, dev, G), gw, gm, tol.MatMul)
		endPass(t, dev)
	}
	_ = math.Abs
}

// Determinism: the same call on the same inputs twice gives the same
// bits (MatMul over n > 1, RMSNorm, attention, DeltaNet, routing).
func testDeterminism(t *testing.T, dev nn.Device, _ Tolerances) {
	r := rng(18)
	rm := randQuant(r, 129, 512, 4, 64, mlxq.BF16)
	dn := newDNShape(r, 2, 4, 16, 16, 4)
	dw := dnResident(t, dev, dn)
	dIn := newDNInputs(r, dn, 6)
	ac := attnCases[5]
	kw, vw := ac.widths()
	qkv := [3][]float32{randF32(r, 7*ac.d.Heads*ac.d.QStride, 1), randF32(r, 7*kw, 1), randF32(r, 7*vw, 1)}
	x := randF32(r, 9*512, 1)
	norm := randRange(r, 512, 0.5, 1.5)
	logits := randF32(r, 7*16, 3)
	once := func() [][]float32 {
		var out [][]float32
		w, err := dev.Resident(rm.m)
		if err != nil {
			t.Fatal(err)
		}
		Y := dev.Temp(9 * 129)
		dev.MatMul(w, Y, put(dev, x), 9)
		out = append(out, get(t, dev, Y))
		N := dev.Temp(9 * 512)
		nw, err := dev.Constant(norm)
		if err != nil {
			t.Fatal(err)
		}
		dev.RMSNorm(N, put(dev, x), nw, nn.NormSpec{Rows: 9, Width: 512, Eps: 1e-6})
		out = append(out, get(t, dev, N))
		kv, err := dev.NewKV(kw, vw, ac.window)
		if err != nil {
			t.Fatal(err)
		}
		O := dev.Temp(7 * ac.d.Heads * ac.d.HeadDim)
		dev.Attention(kv, O, put(dev, qkv[0]), put(dev, qkv[1]), put(dev, qkv[2]), 7, ac.d)
		out = append(out, get(t, dev, O))
		st, err := dev.NewTensors((dn.K-1)*dn.C(), dn.Nv*dn.Dk*dn.Dv)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, dnRun(t, dev, dn, dw, st, dIn, 6), get(t, dev, st.Tensor(1)))
		rt := nn.NewRouting(7, 4)
		if err := dev.Route(rt, put(dev, logits), 7, 16, true); err != nil {
			t.Fatal(err)
		}
		out = append(out, rt.Wts)
		endPass(t, dev)
		return out
	}
	a, b := once(), once()
	for i, name := range []string{"MatMul", "RMSNorm", "Attention", "DeltaNet Y", "DeltaNet state", "Route weights"} {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				t.Fatalf("%s is not deterministic: element %d is %g, then %g", name, j, a[i][j], b[i][j])
			}
		}
	}
}

// testSource is an expert source identity for the device's expert cache;
// the suite hands experts to the device itself, so it is never asked.
type testSource struct{ _ byte }

func (*testSource) Expert(layer, expert int) (*nn.ExpertWeights, error) {
	panic("devicetest: testSource.Expert called")
}

func (*testSource) Release(*nn.ExpertWeights) {}
