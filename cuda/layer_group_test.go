package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// listSource serves a fixed list of experts of one layer.
type listSource struct{ ws []*nn.ExpertWeights }

func (s *listSource) Expert(layer, e int) (*nn.ExpertWeights, error) { return s.ws[e], nil }
func (s *listSource) Release(*nn.ExpertWeights)                      {}

// A chunk of many tokens runs its experts grouped: MoE.Run reads every
// expert, then three launches (gate and up as one grouped product, the GLU,
// the down product) whatever the number of experts, with the tiles the
// positions need (an expert of 140 slots: two), and the result is the
// per-expert path's bit for bit on the fake (its products are the CPU's
// either way). A short chunk and a format without a grouped kernel (3
// bits) keep the per-expert path.
func TestLayerGroupedExperts(t *testing.T) {
	t.Setenv(mappedUploadsEnv, "0") // the launches below: inputs uploaded by copies, not gather_rows
	r := rand.New(rand.NewPCG(81, 82))
	const E, H, K, layer = 5, 64, 2, 2
	for _, c := range []struct {
		bits, I, T int
		grouped    bool
	}{
		{4, 64, 140, true},
		{8, 192, 70, true},
		{4, 64, groupMinTokens - 1, false},
		{3, 64, 140, false},
	} {
		l, f := layerOf(t)
		src := &listSource{}
		for e := range E {
			src.ws = append(src.ws, &nn.ExpertWeights{Layer: layer, Expert: e,
				Gate: makeMatrix(t, r, matCase{c.I, H, c.bits, 32 * (1 + c.bits/8), mlxq.BF16}),
				Up:   makeMatrix(t, r, matCase{c.I, H, c.bits, 32 * (1 + c.bits/8), mlxq.BF16}),
				Down: makeMatrix(t, r, matCase{H, c.I, c.bits, 32 * (1 + c.bits/8), mlxq.BF16})})
		}
		rt := nn.NewRouting(c.T, K)
		for tt := range c.T {
			rt.Sel[tt*K], rt.Sel[tt*K+1] = 1, []int{0, 3, 4}[tt%3] // expert 2 never chosen
			if tt%4 == 0 {
				rt.Sel[tt*K], rt.Sel[tt*K+1] = rt.Sel[tt*K+1], rt.Sel[tt*K]
			}
			rt.Wts[tt*K], rt.Wts[tt*K+1] = float32(r.Float64()), float32(r.Float64())
		}
		x := randVec(r, c.T*H, 1)
		run := func(dev nn.Device) []float32 {
			t.Helper()
			out := l.Temp(c.T * H)
			moe := &nn.MoE{Device: dev, Experts: src, Act: nn.SiLUGate}
			if err := moe.Run(layer, put(t, l, x), c.T, H, rt, nil, out); err != nil {
				t.Fatal(err)
			}
			y := get(t, l, out)
			if err := l.EndPass(); err != nil {
				t.Fatal(err)
			}
			return y
		}
		// The per-expert path: the Layer behind a Device that is only that.
		want := run(struct{ nn.Device }{l})
		before := len(f.launches)
		got := run(l)
		launched := f.launches[before:]
		grouped := slices.Contains(launched, "gemm_group_q4") || slices.Contains(launched, "gemm_group_q8")
		if grouped != c.grouped || (b2u(grouped) != int(l.b.Stats().GroupedLayers)) {
			t.Fatalf("bits %d, I %d, T %d: grouped %v (stats %d), want %v; launches %v", c.bits, c.I, c.T, grouped, l.b.Stats().GroupedLayers, c.grouped, launched)
		}
		sameBits(t, "grouped vs per expert", got, want)
		if !c.grouped {
			continue
		}
		var kinds []string
		for _, k := range launched {
			if k != "combine" {
				kinds = append(kinds, k)
			}
		}
		kern := map[int]string{4: "gemm_group_q4", 8: "gemm_group_q8"}[c.bits]
		if !slices.Equal(kinds, []string{kern, "glu", kern}) {
			t.Fatalf("launches %v, want the grouped gate/up, glu, grouped down", launched)
		}
		// Tiles: expert 1 has T slots, experts 0, 3, 4 T/3 each.
		tiles := ceilDiv(c.T, gemmBM) + 3*ceilDiv(c.T/3, gemmBM)
		g := f.grids[len(f.grids)-len(launched):]
		if g[0] != [3]uint32{uint32(2 * tiles), uint32(ceilDiv(c.I, gemmBN)), 1} || g[2] != [3]uint32{uint32(tiles), uint32(ceilDiv(H, gemmBN)), 1} {
			t.Fatalf("grids %v for %d tiles", g, tiles)
		}
	}
}

// On the GPU, at Qwen3.6-35B's expert shapes: experts of 200 slots each
// (two tiles: 128 and 72) run per expert as gemm_q4/gemm_q8 (useGemm), so
// the grouped products must give the same bits.
func TestLayerGroupedExpertsGPU(t *testing.T) {
	b := openOrSkip(t)
	l := b.LayerDevice().(*Layer)
	r := rand.New(rand.NewPCG(83, 84))
	const E, H, I, T, K, layer = 3, 2048, 512, 300, 2, 1
	for _, q := range []struct{ bits, group int }{{4, 64}, {8, 64}} {
		src := &listSource{}
		for e := range E {
			src.ws = append(src.ws, &nn.ExpertWeights{Layer: layer, Expert: e,
				Gate: makeMatrix(t, r, matCase{I, H, q.bits, q.group, mlxq.BF16}),
				Up:   makeMatrix(t, r, matCase{I, H, q.bits, q.group, mlxq.BF16}),
				Down: makeMatrix(t, r, matCase{H, I, q.bits, q.group, mlxq.BF16})})
		}
		rt := nn.NewRouting(T, K)
		for tt := range T {
			rt.Sel[tt*K], rt.Sel[tt*K+1] = tt%E, (tt+1)%E
			rt.Wts[tt*K], rt.Wts[tt*K+1] = float32(r.Float64()), float32(r.Float64())
		}
		x := randVec(r, T*H, 1)
		run := func(dev nn.Device) []float32 {
			t.Helper()
			out := l.Temp(T * H)
			moe := &nn.MoE{Device: dev, Experts: src, Act: nn.SiLUGate}
			if err := moe.Run(layer, put(t, l, x), T, H, rt, nil, out); err != nil {
				t.Fatal(err)
			}
			y := get(t, l, out)
			if err := l.EndPass(); err != nil {
				t.Fatal(err)
			}
			return y
		}
		groups := b.Stats().GroupedLayers
		got := run(l)
		if b.Stats().GroupedLayers != groups+1 {
			t.Fatalf("q%d: the chunk's experts did not run grouped", q.bits)
		}
		want := run(struct{ nn.Device }{l})
		sameBits(t, "grouped vs per expert on the GPU", got, want)
		t.Logf("q%d g%d: %d tokens x %d experts of [%d, %d]: grouped products identical to per-expert gemm_q%d", q.bits, q.group, T, K, I, H, q.bits)
	}
}
