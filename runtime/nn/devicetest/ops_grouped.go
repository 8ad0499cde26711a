package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// fixtureSource hands out copies of its experts' bytes and scribbles over
// each copy on Release, so a device that keeps reading an expert's source
// buffer after Expert returned computes garbage.
type fixtureSource struct {
	experts []*expertFixture
	reads   int
}

func (s *fixtureSource) Expert(layer, expert int) (*nn.ExpertWeights, error) {
	if expert < 0 || expert >= len(s.experts) || s.experts[expert].w.Layer != layer {
		return nil, fmt.Errorf("devicetest: no expert %d of layer %d", expert, layer)
	}
	f := s.experts[expert].w
	buf := append([]byte(nil), f.Buf...)
	w := &nn.ExpertWeights{Layer: layer, Expert: expert, Buf: buf}
	off := 0
	w.Gate, off = into(f.Gate, buf, off)
	w.Up, off = into(f.Up, buf, off)
	w.Down, _ = into(f.Down, buf, off)
	s.reads++
	return w, nil
}

func (s *fixtureSource) Release(w *nn.ExpertWeights) {
	for i := range w.Buf {
		w.Buf[i] = 0xA5
	}
}

// GroupedExperts (nn.ExpertGrouper, optional): MoE.Run over a chunk the
// device groups (every expert read first, one GroupExperts) gives the
// float64 experts' weighted sums within the batched products' bound, with
// an expert of more slots than one tile holds (T > 128 tokens all choosing
// it), experts of one slot, experts never chosen, and each source buffer
// scribbled over on Release; the same bits twice; a second run served from
// the device's cache (no reads) gives the same bits; and a format the
// device declines (3 bits) still gives the right result through the
// per-expert path.
func testGroupedExperts(t *testing.T, dev nn.Device, tol Tolerances) {
	gr, ok := dev.(nn.ExpertGrouper)
	if !ok {
		t.Skipf("%s runs experts one by one (not an nn.ExpertGrouper)", dev.Name())
	}
	r := rng(23)
	const E, H, I, T, K, layer = 7, 64, 192, 150, 3, 4
	if !gr.GroupsExperts(T, K) {
		t.Skipf("%s does not group a chunk of %d tokens", dev.Name(), T)
	}
	for _, c := range []struct {
		bits, group int
		ft          mlxq.Float
		act         nn.Activation
	}{
		{4, 32, mlxq.BF16, nn.SiLUGate},
		{8, 64, mlxq.F16, nn.GELUTanhGate},
		{4, 64, mlxq.F32, nn.SiLUGate},
		{3, 32, mlxq.BF16, nn.SiLUGate},
	} {
		name := fmt.Sprintf("GroupedExperts q%dg%d %v T=%d k=%d", c.bits, c.group, c.ft, T, K)
		src := &fixtureSource{}
		for e := range E {
			src.experts = append(src.experts, newExpert(layer, e, randQuant(r, I, H, c.bits, c.group, c.ft),
				randQuant(r, I, H, c.bits, c.group, c.ft), randQuant(r, H, I, c.bits, c.group, c.ft)))
		}
		// Every token chooses expert 2 (150 slots: two tiles), then one
		// of experts 0, 3, 4, 5 in turn, then expert 6 for token 7 only
		// and expert 1 for the others; no token chooses none.
		rt := nn.NewRouting(T, K)
		for tt := range T {
			sel := []int{2, []int{0, 3, 4, 5}[tt%4], 1}
			if tt == 7 {
				sel[2] = 6
			}
			if tt%5 == 0 {
				sel[0], sel[1] = sel[1], sel[0] // the top-k order is the token's own
			}
			for j, e := range sel {
				rt.Sel[tt*K+j] = e
				rt.Wts[tt*K+j] = float32(0.2 + 0.3*r.Float64())
			}
		}
		x := randF32(r, T*H, 1)
		want, mag := make([]float64, T*H), make([]float64, T*H)
		for tt := range T {
			for j := range K {
				e, w := rt.Sel[tt*K+j], float64(rt.Wts[tt*K+j])
				y, m := src.experts[e].refAct(x[tt*H:(tt+1)*H], c.act)
				for i := range H {
					want[tt*H+i] += w * y[i]
					mag[tt*H+i] += math.Abs(w) * m[i]
				}
			}
		}
		moe := nn.MoE{Device: dev, Experts: src, Act: c.act}
		run := func() []float32 {
			out := view(dev, T*H)
			dev.Write(out, make([]float32, T*H))
			if err := moe.Run(layer, put(dev, x), T, H, rt, nil, out); err != nil {
				t.Fatalf("%s: MoE.Run: %v", name, err)
			}
			got := get(t, dev, out)
			endPass(t, dev)
			return got
		}
		first := run()
		bound := 2*tol.Batched + 4*tol.Elementwise
		within(t, name, first, want, mag, bound)
		reads := src.reads
		exact(t, name+" run again", run(), first)
		if src.reads > reads {
			t.Logf("%s: the second run read %d experts again (the device keeps no cache of them)", name, src.reads-reads)
		}
	}
}
