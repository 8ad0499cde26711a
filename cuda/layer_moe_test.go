package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// Routing on the device follows the expert cache: a layer routes there
// only while every one of its experts is cached; its table is built once
// per version of the cache and rebuilt after a change (a slot evicted and
// refilled at another address), and the result is the host path's (Route,
// then MoE.Run over the cached experts) bit for bit on the fake.
func TestLayerRoutedExpertsTable(t *testing.T) {
	l, _ := layerOf(t)
	b := l.b
	r := rand.New(rand.NewPCG(71, 72))
	const E, H, I, K, layer = 4, 64, 32, 2, 5
	ws := make([]*nn.ExpertWeights, E)
	for e := range ws {
		ws[e] = &nn.ExpertWeights{Layer: layer, Expert: e,
			Gate: makeMatrix(t, r, matCase{I, H, 4, 32, mlxq.BF16}), Up: makeMatrix(t, r, matCase{I, H, 4, 32, mlxq.BF16}),
			Down: makeMatrix(t, r, matCase{H, I, 4, 32, mlxq.BF16})}
	}
	size := 2*matBytes(ws[0].Gate) + matBytes(ws[0].Down)
	b.SetExpertCacheBytes(int64(E) * size)
	for _, w := range ws {
		if _, err := l.Expert(testSrc, w); err != nil {
			t.Fatal(err)
		}
	}
	logits := randVec(r, E, 2)
	x := randVec(r, H, 1)
	spec := func(src nn.ExpertSource, T int) nn.RoutedSpec {
		return nn.RoutedSpec{Src: src, Layer: layer, Logits: put(t, l, append(logits, make([]float32, (T-1)*E)...)),
			X: put(t, l, append(x, make([]float32, (T-1)*H)...)), Out: l.Temp(T * H), T: T, E: E, H: H, K: K, Norm: true, Act: nn.SiLUGate}
	}
	routed := func() []float32 {
		t.Helper()
		s := spec(testSrc, 1)
		if !l.RouteExperts(s) {
			t.Fatal("declined with every expert cached")
		}
		out := get(t, l, s.Out)
		if err := l.EndPass(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The host path over the same cached experts.
	s := spec(testSrc, 1)
	rt := nn.NewRouting(1, K)
	if err := l.Route(rt, s.Logits, 1, E, true); err != nil {
		t.Fatal(err)
	}
	moe := &nn.MoE{Device: l, Experts: testSrc, Act: nn.SiLUGate}
	if err := moe.Run(layer, s.X, 1, H, rt, nil, s.Out); err != nil {
		t.Fatal(err)
	}
	want := get(t, l, s.Out)
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
	if !l.RoutesLayer(testSrc, layer, E) || l.RoutesLayer(testSrc, layer+1, E) {
		t.Fatal("RoutesLayer disagrees with the cache")
	}
	sameBits(t, "routed on the device vs the host path", routed(), want)
	tab := l.tables[tableKey{testSrc, layer}]
	v := tab.version
	sameBits(t, "again (the same table)", routed(), want)
	if l.tables[tableKey{testSrc, layer}] != tab || tab.version != v {
		t.Fatal("the table was rebuilt without a change of the cache")
	}
	if got := b.Stats().RoutedLayers; got != 2 {
		t.Fatalf("%d layers routed, want 2", got)
	}
	// Not routed: another source's layer, another layer, a chunk too long.
	for _, c := range []nn.RoutedSpec{spec(&nullSource{}, 1), func() nn.RoutedSpec { s := spec(testSrc, 1); s.Layer = layer + 1; return s }(),
		spec(testSrc, routedMaxTokens+1)} {
		if l.RouteExperts(c) {
			t.Fatalf("routed layer %d of %T with T=%d", c.Layer, c.Src, c.T)
		}
	}
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
	// A smaller budget evicts one expert at EndPass: the host path again.
	b.SetExpertCacheBytes(int64(E-1) * size)
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
	if l.RouteExperts(spec(testSrc, 1)) {
		t.Fatal("routed with an expert evicted")
	}
	if miss := l.MissingExperts(testSrc, layer, E); miss != nil {
		t.Fatalf("missing %v offered without room in the budget", miss)
	}
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
	// Back (into another slot): a rebuilt table, the same result.
	b.SetExpertCacheBytes(int64(E) * size)
	miss := l.MissingExperts(testSrc, layer, E)
	if len(miss) != 1 {
		t.Fatalf("missing %v with room for one expert", miss)
	}
	if _, ok := l.CachedExpert(testSrc, layer, miss[0]); ok {
		t.Fatalf("expert %d is cached, but said missing", miss[0])
	}
	if _, err := l.Expert(testSrc, ws[miss[0]]); err != nil {
		t.Fatal(err)
	}
	if miss := l.MissingExperts(testSrc, layer, E); miss != nil {
		t.Fatalf("missing %v with every expert cached", miss)
	}
	if miss := l.MissingExperts(testSrc, layer+1, E); miss != nil {
		t.Fatalf("missing %v of a layer never seen", miss)
	}
	if miss := l.MissingExperts(testSrc, layer, E+2); miss != nil {
		t.Fatalf("missing %v offered with a third of the layer not cached", miss)
	}
	sameBits(t, "after the expert came back", routed(), want)
	if tab.version == v {
		t.Fatal("the table was not rebuilt after the cache changed")
	}
}

// A sigmoid-gated shared expert of the routed experts' shapes runs as
// every token's slot k of their two launches (sharedSlot), four launches
// a layer becoming two; with QPACK_CUDA_SHARED_SLOT=0 (noSharedSlot) it
// runs in two of its own. Both are the host path's bits on the fake
// (Route, the shared MLP, MoE.Run, AddGated), for one token and for
// several; a shared expert of another width keeps its own launches.
func TestLayerSharedExpertSlot(t *testing.T) {
	l, f := layerOf(t)
	b := l.b
	r := rand.New(rand.NewPCG(73, 74))
	const E, H, I, K, layer = 5, 64, 32, 2, 3
	mat := func(rows, cols int) mlxq.Matrix { return makeMatrix(t, r, matCase{rows, cols, 4, 32, mlxq.BF16}) }
	ws := make([]*nn.ExpertWeights, E)
	for e := range ws {
		ws[e] = &nn.ExpertWeights{Layer: layer, Expert: e, Gate: mat(I, H), Up: mat(I, H), Down: mat(H, I)}
	}
	b.SetExpertCacheBytes(int64(E) * (2*matBytes(ws[0].Gate) + matBytes(ws[0].Down)))
	for _, w := range ws {
		if _, err := l.Expert(testSrc, w); err != nil {
			t.Fatal(err)
		}
	}
	resident := func(m mlxq.Matrix) nn.Mat {
		d, err := l.Resident(m)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	sharedOf := func(I int) *nn.ExpertMats {
		return &nn.ExpertMats{Gate: resident(mat(I, H)), Up: resident(mat(I, H)), Down: resident(mat(H, I))}
	}
	same, wider := sharedOf(I), sharedOf(2*I)
	for _, c := range []struct {
		name    string
		shared  *nn.ExpertMats
		T       int
		off     bool
		wantMoE int // moe_* launches
	}{
		{"one token, shared slot", same, 1, false, 2},
		{"one token, own launches (QPACK_CUDA_SHARED_SLOT=0)", same, 1, true, 4},
		{"three tokens, shared slot", same, 3, false, 2},
		{"three tokens, own launches", same, 3, true, 4},
		{"a wider shared expert", wider, 2, false, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			b.noSharedSlot = c.off
			defer func() { b.noSharedSlot = false }()
			T := c.T
			logits, x, gate := randVec(r, T*E, 2), randVec(r, T*H, 1), randVec(r, T, 2)
			spec := func() nn.RoutedSpec {
				return nn.RoutedSpec{Src: testSrc, Layer: layer, Logits: put(t, l, logits), X: put(t, l, x), Out: l.Temp(T * H),
					T: T, E: E, H: H, K: K, Norm: true, Act: nn.SiLUGate, Shared: c.shared, SharedGate: put(t, l, gate)}
			}
			// The host path.
			s := spec()
			rt := nn.NewRouting(T, K)
			if err := l.Route(rt, s.Logits, T, E, true); err != nil {
				t.Fatal(err)
			}
			sh := l.Temp(T * H)
			g, u := l.Temp(T*c.shared.Gate.W.Rows), l.Temp(T*c.shared.Gate.W.Rows)
			l.MatMul(c.shared.Gate, g, s.X, T)
			l.MatMul(c.shared.Up, u, s.X, T)
			l.GLU(nn.SiLUGate, g, g, u, T*c.shared.Gate.W.Rows)
			l.MatMul(c.shared.Down, sh, g, T)
			moe := &nn.MoE{Device: l, Experts: testSrc, Act: nn.SiLUGate}
			if err := moe.Run(layer, s.X, T, H, rt, nil, s.Out); err != nil {
				t.Fatal(err)
			}
			l.AddGated(s.Out, sh, s.SharedGate, T, H)
			want := get(t, l, s.Out)
			if err := l.EndPass(); err != nil {
				t.Fatal(err)
			}
			// On the device.
			s = spec()
			n0 := len(f.launches)
			if !l.RouteExperts(s) {
				t.Fatal("declined with every expert cached")
			}
			got := get(t, l, s.Out)
			if err := l.EndPass(); err != nil {
				t.Fatal(err)
			}
			moeLaunches := 0
			for _, k := range f.launches[n0:] {
				if strings.HasPrefix(k, "moe_") {
					moeLaunches++
				}
			}
			if moeLaunches != c.wantMoE {
				t.Errorf("%d moe launches (%v), want %d", moeLaunches, f.launches[n0:], c.wantMoE)
			}
			sameBits(t, c.name, got, want)
		})
	}
}

// A token whose router logits hold a NaN chooses no expert: the MoE
// kernels store layer+1 into the fault word, and that pass's EndPass
// returns an error naming the layer. The word is mapped host memory, so
// EndPass reads it without a download; it is cleared, so the next pass
// is clean.
func TestLayerRoutedFault(t *testing.T) {
	l, f := layerOf(t)
	r := rand.New(rand.NewPCG(73, 74))
	const E, H, I, K, layer = 4, 64, 32, 2, 7
	for e := range E {
		w := &nn.ExpertWeights{Layer: layer, Expert: e,
			Gate: makeMatrix(t, r, matCase{I, H, 4, 32, mlxq.BF16}), Up: makeMatrix(t, r, matCase{I, H, 4, 32, mlxq.BF16}),
			Down: makeMatrix(t, r, matCase{H, I, 4, 32, mlxq.BF16})}
		if e == 0 {
			l.b.SetExpertCacheBytes(int64(E) * (2*matBytes(w.Gate) + matBytes(w.Down)))
		}
		if _, err := l.Expert(testSrc, w); err != nil {
			t.Fatal(err)
		}
	}
	pass := func(logits []float32) error {
		t.Helper()
		const T = 2
		s := nn.RoutedSpec{Src: testSrc, Layer: layer, Logits: put(t, l, logits), X: put(t, l, randVec(r, T*H, 1)),
			Out: l.Temp(T * H), T: T, E: E, H: H, K: K, Norm: true, Act: nn.SiLUGate}
		if !l.RouteExperts(s) {
			t.Fatal("declined with every expert cached")
		}
		f.log, f.calls = true, nil
		defer func() { f.log = false }()
		err := l.EndPass()
		for _, c := range f.calls {
			if strings.HasPrefix(c, "dtoh") {
				t.Errorf("EndPass downloaded (%q): the fault word is read in place", c)
			}
		}
		return err
	}
	bad := randVec(r, 2*E, 2)
	bad[E+1] = float32(math.NaN()) // the second token's
	err := pass(bad)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("layer %d", layer)) || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("a NaN router logit: EndPass returned %v, want an error naming layer %d and the NaN", err, layer)
	}
	if err := pass(randVec(r, 2*E, 2)); err != nil {
		t.Fatalf("the pass after the fault: %v (the word was not cleared)", err)
	}
}

// A routed layer's table marks its experts used in the cache's LRU order
// in turn: each use touches the next ceil(E/touchEvery) slots, so every
// slot is touched once in touchEvery uses and no use walks them all (all
// layers walking their E slots on the same step stalled the GPU).
func TestExpertTableTouchesInTurn(t *testing.T) {
	l, _ := layerOf(t)
	r := rand.New(rand.NewPCG(73, 74))
	const E, H, I, layer = 40, 64, 32, 3
	var size int64
	for e := range E {
		w := &nn.ExpertWeights{Layer: layer, Expert: e,
			Gate: makeMatrix(t, r, matCase{I, H, 4, 32, mlxq.BF16}), Up: makeMatrix(t, r, matCase{I, H, 4, 32, mlxq.BF16}),
			Down: makeMatrix(t, r, matCase{H, I, 4, 32, mlxq.BF16})}
		size = 2*matBytes(w.Gate) + matBytes(w.Down)
		if e == 0 {
			l.b.SetExpertCacheBytes(int64(E) * size)
		}
		if _, err := l.Expert(testSrc, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
	l.lock()
	defer l.unlock()
	c := &l.experts
	tab, ok := l.expertTable(testSrc, layer, E)
	if !ok || len(tab.slots) != E {
		t.Fatalf("no table of %d slots", E)
	}
	per := (E + touchEvery - 1) / touchEvery
	touched := func() int {
		n := 0
		for e := range E {
			if c.slots[expertKey{src: testSrc, layer: layer, expert: e}].gen == c.gen {
				n++
			}
		}
		return n
	}
	c.flush() // a new generation: nothing touched in it yet
	for use := 1; use <= touchEvery; use++ {
		if again, ok := l.expertTable(testSrc, layer, E); !ok || again != tab {
			t.Fatal("the table was rebuilt")
		}
		if got, want := touched(), min(use*per, E); got != want {
			t.Fatalf("after %d uses %d slots touched, want %d", use, got, want)
		}
	}
}
