package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// RoutedExperts (nn.ExpertRouter, optional): once the device holds every
// expert of a layer (handed to Expert), RouteExperts gives Route followed
// by MoE.Run's result (the same experts in the same top-k order, weights
// renormalised or not, Gemma's per-expert scale) within the bounds, and
// the same bits twice; with one expert missing it queues nothing and says
// so; a NaN among a token's logits makes the next EndPass fail (never a
// result), and the device works again after it.
func testRoutedExperts(t *testing.T, dev nn.Device, tol Tolerances) {
	rt, ok := dev.(nn.ExpertRouter)
	if !ok {
		t.Skipf("%s routes on the host only (not an nn.ExpertRouter)", dev.Name())
	}
	r := rng(19)
	const H, I, layer = 64, 128, 3
	for _, c := range []struct {
		bits, group int
		ft          mlxq.Float
		T, K        int
		norm, scale bool
		act         nn.Activation
		shared      int // 0: none; else a sigmoid-gated shared expert of these bits (group 64)
		E           int // experts in the layer; 0: 6
	}{
		{4, 32, mlxq.BF16, 1, 2, true, false, nn.SiLUGate, 4, 0},
		{4, 64, mlxq.F16, 3, 4, false, true, nn.GELUTanhGate, 0, 0},
		{8, 64, mlxq.BF16, 2, 3, true, false, nn.SiLUGate, 8, 0},
		{3, 32, mlxq.BF16, 2, 2, true, true, nn.SiLUGate, 0, 0},
		{0, 0, mlxq.BF16, 1, 3, true, false, nn.GELUTanhGate, 0, 0},
		{4, 64, mlxq.BF16, 1, 2, true, false, nn.SiLUGate, 8, 0}, // the shared expert quantized otherwise
		// Eight and ten routed experts and a shared one of their shape: a
		// decode step's nine and eleven slots (the 35B's, Qwen3-Next's).
		{4, 64, mlxq.BF16, 1, 8, true, false, nn.SiLUGate, 4, 10},
		{4, 64, mlxq.BF16, 2, 10, true, false, nn.SiLUGate, 4, 12},
	} {
		E := c.E
		if E == 0 {
			E = 6
		}
		name := fmt.Sprintf("RouteExperts q%dg%d %v T=%d k=%d norm=%v scale=%v shared=%d", c.bits, c.group, c.ft, c.T, c.K, c.norm, c.scale, c.shared)
		mk := func(rows, cols int) refMat {
			if c.bits == 0 {
				return randDense(r, rows, cols, c.ft)
			}
			return randQuant(r, rows, cols, c.bits, c.group, c.ft)
		}
		src := &testSource{}
		experts := make([]*expertFixture, E)
		for e := range experts {
			experts[e] = newExpert(layer, e, mk(I, H), mk(I, H), mk(H, I))
		}
		// All but the last: RouteExperts must decline, queueing nothing.
		for _, e := range experts[:E-1] {
			if _, err := dev.Expert(src, e.w); err != nil {
				t.Fatalf("%s: Expert: %v", name, err)
			}
		}
		logits := make([]float32, c.T*E)
		for tt := range c.T {
			for i, p := range r.Perm(E) {
				logits[tt*E+i] = float32(p)*0.5 - 1 // distinct, well apart
			}
		}
		x := randF32(r, c.T*H, 1)
		scale := randRange(r, E, 0.5, 2)
		spec := nn.RoutedSpec{Src: src, Layer: layer, X: put(dev, x), T: c.T, E: E, H: H, K: c.K, Norm: c.norm, Act: c.act}
		if c.scale {
			sd, err := dev.Constant(scale)
			if err != nil {
				t.Fatal(err)
			}
			spec.Scale, spec.ScaleDev = scale, sd
		}
		var shared *expertFixture
		sgl := randF32(r, c.T, 2)
		if c.shared > 0 {
			q := func(rows, cols int) refMat { return randQuant(r, rows, cols, c.shared, 64, mlxq.BF16) }
			shared = newExpert(layer, -1, q(I, H), q(I, H), q(H, I))
			var mats nn.ExpertMats
			var err error
			for _, p := range []struct {
				dst *nn.Mat
				m   refMat
			}{{&mats.Gate, shared.gate}, {&mats.Up, shared.up}, {&mats.Down, shared.down}} {
				if *p.dst, err = dev.Resident(p.m.m); err != nil {
					t.Fatal(err)
				}
			}
			spec.Shared = &mats
		}
		spec.Logits = put(dev, logits)
		sentinel := make([]float32, c.T*H)
		for i := range sentinel {
			sentinel[i] = 7
		}
		spec.Out = put(dev, sentinel)
		if shared != nil {
			spec.SharedGate = put(dev, sgl)
		}
		if rt.RouteExperts(spec) {
			t.Fatalf("%s: routed with expert %d of the layer never handed to the device", name, E-1)
		}
		if miss := rt.MissingExperts(src, layer, E); miss != nil && (len(miss) != 1 || miss[0] != E-1) {
			t.Fatalf("%s: MissingExperts %v, want [%d] (or nil)", name, miss, E-1)
		}
		exact(t, name+": output after a declined RouteExperts", get(t, dev, spec.Out), sentinel)
		endPass(t, dev)

		if _, err := dev.Expert(src, experts[E-1].w); err != nil {
			t.Fatalf("%s: Expert: %v", name, err)
		}
		// The reference: softmax top-k of the logits, the scale, and the
		// float64 experts.
		ref := nn.NewRouting(c.T, c.K)
		nn.RouteSoftmaxTopK(ref, append([]float32(nil), logits...), c.T, E, c.norm)
		want, mag := make([]float64, c.T*H), make([]float64, c.T*H)
		for tt := range c.T {
			p := softmax64(f64(logits[tt*E : (tt+1)*E]))
			var sum float64
			for j := range c.K {
				sum += p[ref.Sel[tt*c.K+j]]
			}
			for j := range c.K {
				e := ref.Sel[tt*c.K+j]
				w := p[e]
				if c.norm {
					w /= sum
				}
				if c.scale {
					w *= float64(scale[e])
				}
				y, m := experts[e].refAct(x[tt*H:(tt+1)*H], c.act)
				for i := range H {
					want[tt*H+i] += w * y[i]
					mag[tt*H+i] += math.Abs(w) * m[i]
				}
			}
			if shared != nil {
				sg := sigmoid64(float64(sgl[tt]))
				y, m := shared.refAct(x[tt*H:(tt+1)*H], c.act)
				for i := range H {
					want[tt*H+i] += sg * y[i]
					mag[tt*H+i] += sg * m[i]
				}
			}
		}
		bound := tol.MatMul + 4*tol.Elementwise
		run := func() []float32 {
			spec.Logits, spec.X = put(dev, logits), put(dev, x)
			if shared != nil {
				spec.SharedGate = put(dev, sgl)
			}
			spec.Out = view(dev, c.T*H)
			if !rt.RouteExperts(spec) {
				return nil
			}
			out := get(t, dev, spec.Out)
			endPass(t, dev)
			return out
		}
		first := run()
		if first == nil {
			// Allowed (the shapes may not suit the device's kernels);
			// a device's own test says where it must route.
			t.Logf("%s: declined with every expert of the layer on the device", name)
			continue
		}
		within(t, name, first, want, mag, bound)
		exact(t, name+" run again", run(), first)

		// A NaN among token 0's logits: the pass fails.
		bad := append([]float32(nil), logits...)
		bad[1] = float32(math.NaN())
		spec.Logits, spec.X = put(dev, bad), put(dev, x)
		if shared != nil {
			spec.SharedGate = put(dev, sgl)
		}
		spec.Out = view(dev, c.T*H)
		if rt.RouteExperts(spec) {
			got := make([]float32, c.T*H)
			rerr := dev.Read(got, spec.Out)
			if err := dev.EndPass(); err == nil && rerr == nil {
				t.Fatalf("%s: a NaN router logit gave a result and no error", name)
			}
		} else {
			endPass(t, dev)
		}
		exact(t, name+" after the failed pass", run(), first)
	}
}

// refAct is refOf the expert with activation act: down(act(gate·x)·up·x)
// for one row, and the bound's scale of the down product.
func (e *expertFixture) refAct(x []float32, act nn.Activation) (y, mag []float64) {
	g, _ := e.gate.apply(x, 1)
	u, _ := e.up.apply(x, 1)
	h := make([]float32, len(g))
	for i := range h {
		a := silu64(g[i])
		if act == nn.GELUTanhGate {
			a = geluTanh64(g[i])
		}
		h[i] = float32(a * u[i])
	}
	return e.down.apply(h, 1)
}
