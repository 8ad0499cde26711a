package nn_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// grouper is the strict device made an nn.ExpertGrouper: GroupExperts
// checks the group it gets against the routing and, when accept is set,
// computes it with the device's own ops, an expert's slots at a time.
type grouper struct {
	*devicetest.Strict
	t      *testing.T
	r      nn.Routing
	accept bool
	calls  int
}

func (g *grouper) GroupsExperts(T, K int) bool { return T >= 4 }

func (g *grouper) GroupExperts(e nn.ExpertGroup) bool {
	g.calls++
	P := e.T * e.K
	if len(e.First) != len(e.Mats)+1 || e.First[0] != 0 || e.First[len(e.Mats)] != P || len(e.Slots) != P {
		g.t.Fatalf("group: first %v for %d experts, %d slots of %d", e.First, len(e.Mats), len(e.Slots), P)
	}
	seen := make([]bool, P)
	for i := range e.Mats {
		run := e.Slots[e.First[i]:e.First[i+1]]
		if len(run) == 0 || !slices.IsSorted(run) {
			g.t.Fatalf("expert %d of the group: slots %v", i, run)
		}
		for _, s := range run {
			if seen[s] || g.r.Sel[s] != g.r.Sel[run[0]] {
				g.t.Fatalf("slot %d given twice, or to another expert (sel %d, %d)", s, g.r.Sel[s], g.r.Sel[run[0]])
			}
			seen[s] = true
		}
	}
	if !g.accept {
		return false
	}
	I := e.Mats[0].Gate.W.Rows
	for i, m := range e.Mats {
		slots := e.Slots[e.First[i]:e.First[i+1]]
		n := len(slots)
		rows := make([]int, n)
		for j, s := range slots {
			rows[j] = s / e.K
		}
		x, y, gt, up := g.Temp(n*e.H), g.Temp(n*e.H), g.Temp(n*I), g.Temp(n*I)
		g.GatherRows(x, e.X, rows, e.H)
		g.MatMul(m.Gate, gt, x, n)
		g.MatMul(m.Up, up, x, n)
		g.GLU(e.Act, gt, gt, up, n*I)
		g.MatMul(m.Down, y, gt, n)
		g.ScatterRows(e.Res, y, slots, e.H)
	}
	return true
}

// scribbler serves experts from copies it overwrites on Release, and
// counts the reads and releases.
type scribbler struct {
	ws             []*nn.ExpertWeights
	reads, release int
}

func (s *scribbler) Expert(l, e int) (*nn.ExpertWeights, error) {
	s.reads++
	w := *s.ws[e]
	for _, m := range []*mlxq.Matrix{&w.Gate, &w.Up, &w.Down} {
		m.Weight, m.Scales, m.Biases = slices.Clone(m.Weight), slices.Clone(m.Scales), slices.Clone(m.Biases)
	}
	return &w, nil
}

func (s *scribbler) Release(w *nn.ExpertWeights) {
	s.release++
	for _, m := range []mlxq.Matrix{w.Gate, w.Up, w.Down} {
		for _, b := range [][]byte{m.Weight, m.Scales, m.Biases} {
			for i := range b {
				b[i] = 0x5A
			}
		}
	}
}

// MoE.Run on an ExpertGrouper: every expert the chunk uses is read once and
// released before the group is queued, the group holds each slot once under
// its expert, and the result is the per-expert path's bit for bit, whether
// the device takes the group or declines it (then the same Mats run one by
// one). A chunk the device does not group never calls GroupExperts.
func TestMoERunGrouped(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const E, H, I, K, layer = 5, 64, 64, 2, 1
	q := func(rows, cols int) mlxq.Matrix {
		w := make([]float32, rows*cols)
		for i := range w {
			w[i] = float32(r.NormFloat64())
		}
		m, err := mlxq.Quantize(w, rows, cols, 4, 32, mlxq.BF16)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	src := &scribbler{}
	for e := range E {
		src.ws = append(src.ws, &nn.ExpertWeights{Layer: layer, Expert: e, Gate: q(I, H), Up: q(I, H), Down: q(H, I)})
	}
	for _, T := range []int{9, 3} {
		rt := nn.NewRouting(T, K)
		for tt := range T {
			rt.Sel[tt*K], rt.Sel[tt*K+1] = (tt*3)%E, (tt*3+1+tt%2)%E
			rt.Wts[tt*K], rt.Wts[tt*K+1] = float32(r.Float64()), float32(r.Float64())
		}
		used := map[int]bool{}
		for _, e := range rt.Sel {
			used[e] = true
		}
		x := make([]float32, T*H)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		run := func(dev nn.Device) []float32 {
			t.Helper()
			X, out := dev.Temp(T*H), dev.Temp(T*H)
			dev.Write(X, x)
			moe := &nn.MoE{Device: dev, Experts: src, Act: nn.SiLUGate}
			if err := moe.Run(layer, X, T, H, rt, nil, out); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, T*H)
			if err := dev.Read(y, out); err != nil {
				t.Fatal(err)
			}
			if err := dev.EndPass(); err != nil {
				t.Fatal(err)
			}
			return y
		}
		want := run(devicetest.NewStrict(nil))
		for _, accept := range []bool{false, true} {
			g := &grouper{Strict: devicetest.NewStrict(nil), t: t, r: rt, accept: accept}
			src.reads, src.release = 0, 0
			got := run(g)
			if !slices.Equal(got, want) {
				worst := 0.0
				for i := range got {
					worst = max(worst, math.Abs(float64(got[i]-want[i])))
				}
				t.Fatalf("T=%d accept=%v: the grouped run differs from the per-expert path (max abs %.3g)", T, accept, worst)
			}
			wantCalls := 0
			if T >= 4 {
				wantCalls = 1
			}
			if g.calls != wantCalls || src.reads != len(used) || src.release != len(used) {
				t.Fatalf("T=%d accept=%v: %d GroupExperts calls (want %d), %d reads and %d releases of %d experts", T, accept, g.calls, wantCalls, src.reads, src.release, len(used))
			}
		}
	}
}
