package cuda

import (
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/runtime"
)

// BenchmarkLayerHostFake decodes a tiny model token by token on the Layer
// over the fake device with CUDA graphs and kernels that compute nothing:
// what is left is the host's cost of a step (the graph's ops, the Layer's
// checks and parameter blocks, the recorder's queue, its comparison with
// the captured graph and the parameters it sets), the part of a real
// decode step that the GPU waits for at the step's start and that bounds
// the step once the kernels are faster than it. Reported per token and
// per queued kernel.
func BenchmarkLayerHostFake(bb *testing.B) {
	for _, name := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q4g32", "gemma4-q4g32"} {
		bb.Run(name, func(bb *testing.B) {
			g := newGraphFake(bb)
			b := testBackend(bb, g)
			m, err := runtime.Load(filepath.Join(tinyDir, name), &runtime.LoadOptions{Backend: b})
			if err != nil {
				bb.Fatal(err)
			}
			defer m.Close()
			st := m.NewState()
			step := func(i int) {
				if st.Pos() >= 512 {
					st.Reset()
				}
				if _, err := m.Forward(st, []int{(7*i + 3) % m.Config.Vocab}, nil); err != nil {
					bb.Fatal(err)
				}
			}
			// The layers route on the device (computed, so that the
			// routing is real), then steps until the graphs are captured.
			routeEveryExpert(bb, m, st)
			g.noKernels = true
			for i := range 16 {
				step(i)
			}
			r0 := b.stats.RoutedLayers
			g.sets = map[string]int{}
			l0, c0 := b.stats.Launches, b.stats.GraphCaptures
			bb.ResetTimer()
			for i := range bb.N {
				step(i)
			}
			bb.StopTimer()
			if b.stats.RoutedLayers == r0 && m.Config.Experts > 0 {
				bb.Errorf("no layer routed on the device: the host waited for every routing")
			}
			sets := 0
			for _, c := range g.sets {
				sets += c
			}
			bb.ReportMetric(float64(sets)/float64(bb.N), "params-set/token")
			bb.Logf("kernel parameters set on replay: %v", g.sets)
			n := float64(b.stats.Launches-l0) / float64(bb.N)
			bb.ReportMetric(n, "kernels/token")
			bb.ReportMetric(float64(b.stats.GraphCaptures-c0)/float64(bb.N), "captures/token")
			bb.ReportMetric(float64(bb.Elapsed().Nanoseconds())/float64(bb.N)/1e3, "µs/token")
			bb.ReportMetric(float64(bb.Elapsed().Nanoseconds())/float64(bb.N)/n/1e3, "µs/kernel")
		})
	}
}

// BenchmarkRecorderFind: a decode step's flush finding its layer's graph
// among a real model's: 40 layers of one shape (13 ops each), its own the
// least recently used (a step ago). Reported per find.
func BenchmarkRecorderFind(bb *testing.B) {
	const layers, nops, psize = 40, 13, 96
	ops := make([]recOp, nops)
	for i := range ops {
		ops[i] = recOp{kind: opLaunch, fn: uintptr(i + 1), grid: [3]uint32{64, 1, 1}, block: [3]uint32{256, 1, 1}, p0: i * psize, p1: (i + 1) * psize}
	}
	h := shapeHash(ops)
	r := &recorder{}
	params := make([][]byte, layers)
	for l := range layers {
		params[l] = make([]byte, nops*psize)
		for i := range params[l] {
			params[l][i] = byte(l*7 + i)
		}
		id := identHash(h, ops, params[l])
		r.graphs = append(r.graphs, &recGraph{hash: h, ident: id, ops: ops, params: params[l]})
	}
	bb.ResetTimer()
	for i := range bb.N {
		l := (i + 1) % layers // the one after the most recent: the least recently used
		p := params[layers-1-l]
		if g := r.find(h, identHash(h, ops, p), ops, p); g == nil || &g.params[0] != &p[0] {
			bb.Fatal("found another layer's graph")
		}
	}
}
