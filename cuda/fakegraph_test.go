package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"unsafe"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// graphFake is the fake device with CUDA graphs as the driver has them for
// stream capture: between beginCapture and endCapture the compute stream's
// submissions are recorded into a graph instead of running (copies read
// their source when the graph runs), each call adding one node in a
// chain; an instantiated graph runs its nodes in order at each launch;
// setKernelParams changes a kernel node of an executable for its later
// launches. fail, when set, is returned by the graph function named.
type graphFake struct {
	*fakeDev
	capture []fakeNode // nil: not capturing
	active  bool
	graphs  map[uintptr][]fakeNode
	execs   map[uintptr][]fakeNode
	next    uintptr
	fail    map[string]error
	runs    int            // graph launches
	sets    map[string]int // setKernelParams calls by kernel, when not nil
	// stale: executables with a copy or memset node whose memory was freed
	// since (the driver's rule: launching one crashed the process on the
	// GPU, record.go's memFree); launching one fails the test.
	stale map[uintptr]string
}

type fakeNode struct {
	op     recOp
	params []byte
	host   []byte
}

func newGraphFake(t testing.TB) *graphFake {
	f := newFake(t)
	f.reuse = true // as the driver does, so that a freed address comes back in a later queue's shape
	return &graphFake{fakeDev: f, graphs: map[uintptr][]fakeNode{}, execs: map[uintptr][]fakeNode{}, next: 1, fail: map[string]error{},
		stale: map[uintptr]string{}}
}

// memFree and hostFree mark the executables whose copy or memset nodes
// reach the memory freed.
func (g *graphFake) memFree(p devptr) error {
	n := g.sizes[p]
	g.markStale(func(nd *fakeNode) bool {
		in := func(q devptr) bool { return q < p+devptr(n) && p < q+devptr(nd.op.n) }
		return nd.op.kind != opLaunch && (in(nd.op.dst) || nd.op.kind == opDtoD && in(nd.op.src))
	}, fmt.Sprintf("device memory %#x", p))
	return g.fakeDev.memFree(p)
}

func (g *graphFake) hostFree(b []byte) error {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	g.markStale(func(nd *fakeNode) bool {
		if nd.op.kind != opHtoD || len(nd.host) == 0 {
			return false
		}
		h := uintptr(unsafe.Pointer(&nd.host[0]))
		return h < lo+uintptr(len(b)) && lo < h+uintptr(len(nd.host))
	}, fmt.Sprintf("pinned memory %#x", lo))
	return g.fakeDev.hostFree(b)
}

func (g *graphFake) markStale(reaches func(*fakeNode) bool, what string) {
	for id, nodes := range g.execs {
		for i := range nodes {
			if reaches(&nodes[i]) {
				g.stale[id] = what
				break
			}
		}
	}
}

var _ graphDevice = (*graphFake)(nil)

func (g *graphFake) add(n fakeNode) { g.capture = append(g.capture, n) }

func (g *graphFake) launch(fn uintptr, grid, block [3]uint32, p []byte) error {
	if g.active {
		g.add(fakeNode{op: recOp{kind: opLaunch, fn: fn, grid: grid, block: block}, params: append([]byte(nil), p...)})
		return nil
	}
	return g.fakeDev.launch(fn, grid, block, p)
}

func (g *graphFake) htod(dst devptr, src []byte) error {
	if g.active {
		g.add(fakeNode{op: recOp{kind: opHtoD, dst: dst, n: len(src)}, host: src})
		return nil
	}
	return g.fakeDev.htod(dst, src)
}

func (g *graphFake) dtod(dst, src devptr, n int) error {
	if g.active {
		g.add(fakeNode{op: recOp{kind: opDtoD, dst: dst, src: src, n: n}})
		return nil
	}
	return g.fakeDev.dtod(dst, src, n)
}

func (g *graphFake) memset(dst devptr, n int) error {
	if g.active {
		g.add(fakeNode{op: recOp{kind: opMemset, dst: dst, n: n}})
		return nil
	}
	return g.fakeDev.memset(dst, n)
}

// The calls a capture may not make (they would wait or order other work).
func (g *graphFake) sync() error {
	if g.active {
		g.t.Fatal("sync during a capture")
	}
	return g.fakeDev.sync()
}

func (g *graphFake) dtoh(dst []byte, src devptr) error {
	if g.active {
		g.t.Fatal("dtoh during a capture")
	}
	return g.fakeDev.dtoh(dst, src)
}

func (g *graphFake) beginCapture() error {
	if err := g.fail["beginCapture"]; err != nil {
		return err
	}
	if g.active {
		g.t.Fatal("nested capture")
	}
	g.active, g.capture = true, []fakeNode{}
	return nil
}

func (g *graphFake) lastNode() (uintptr, error) {
	if !g.active || len(g.capture) == 0 {
		g.t.Fatal("lastNode outside a capture or before its first node")
	}
	return uintptr(len(g.capture)), g.fail["lastNode"]
}

func (g *graphFake) endCapture() (uintptr, error) {
	if !g.active {
		g.t.Fatal("endCapture without a capture")
	}
	g.active = false
	id := g.next
	g.next++
	g.graphs[id] = g.capture
	g.capture = nil
	return id, g.fail["endCapture"]
}

func (g *graphFake) instantiate(graph uintptr) (uintptr, error) {
	if err := g.fail["instantiate"]; err != nil {
		return 0, err
	}
	nodes, ok := g.graphs[graph]
	if !ok {
		g.t.Fatalf("instantiate of graph %d, not there", graph)
	}
	id := g.next
	g.next++
	g.execs[id] = append([]fakeNode(nil), nodes...)
	return id, nil
}

func (g *graphFake) execUpdate(exec, graph uintptr) (bool, error) {
	return false, errors.New("not faked")
}

func (g *graphFake) graphLaunch(exec uintptr) error {
	if err := g.fail["graphLaunch"]; err != nil {
		return err
	}
	nodes, ok := g.execs[exec]
	if !ok {
		g.t.Fatalf("launch of exec %d, not there", exec)
	}
	if what, ok := g.stale[exec]; ok {
		g.t.Fatalf("launch of exec %d, whose copy or memset node reaches %s, freed since", exec, what)
	}
	g.runs++
	for _, n := range nodes {
		var err error
		switch n.op.kind {
		case opLaunch:
			err = g.fakeDev.launch(n.op.fn, n.op.grid, n.op.block, n.params)
		case opHtoD:
			err = g.fakeDev.htod(n.op.dst, n.host)
		case opDtoD:
			err = g.fakeDev.dtod(n.op.dst, n.op.src, n.op.n)
		case opMemset:
			err = g.fakeDev.memset(n.op.dst, n.op.n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (g *graphFake) graphNodes(graph uintptr) (int, error) { return len(g.graphs[graph]), nil }

func (g *graphFake) setKernelParams(exec, node, fn uintptr, grid, block [3]uint32, params []byte) error {
	if err := g.fail["setKernelParams"]; err != nil {
		return err
	}
	nodes := g.execs[exec]
	if node < 1 || int(node) > len(nodes) {
		g.t.Fatalf("setKernelParams of node %d of %d", node, len(nodes))
	}
	n := &nodes[node-1]
	if n.op.kind != opLaunch || n.op.fn != fn || n.op.grid != grid || n.op.block != block || len(n.params) != len(params) {
		g.t.Fatalf("setKernelParams changes node %d's kernel, grid or parameter size", node)
	}
	n.params = append([]byte(nil), params...)
	if g.sets != nil {
		g.sets[kernelNames[fn-1]]++
	}
	return nil
}

func (g *graphFake) destroyGraph(graph uintptr) error {
	if _, ok := g.graphs[graph]; !ok {
		return fmt.Errorf("destroy of graph %d, not there", graph)
	}
	delete(g.graphs, graph)
	return nil
}

func (g *graphFake) destroyExec(exec uintptr) error {
	if _, ok := g.execs[exec]; !ok {
		return fmt.Errorf("destroy of exec %d, not there", exec)
	}
	delete(g.execs, exec)
	delete(g.stale, exec)
	return nil
}

func (g *graphFake) close() error {
	if len(g.graphs)+len(g.execs) != 0 {
		return fmt.Errorf("closed with %d graphs and %d execs live", len(g.graphs), len(g.execs))
	}
	return g.fakeDev.close()
}

func graphBackend(t *testing.T) (*Backend, *graphFake) {
	g := newGraphFake(t)
	b := testBackend(t, g)
	if _, ok := b.dev.(*recorder); !ok {
		t.Fatal("a device with graphs got no recorder")
	}
	return b, g
}

// decodeCompare decodes steps tokens of a tiny model on b and on the CPU
// and fails unless every step's logits are the same bits.
func decodeCompare(t *testing.T, b *Backend, name string, steps int) {
	t.Helper()
	ref, m := loadBoth(t, name, b)
	rs, st := ref.NewState(), m.NewState()
	for i := range steps {
		stepBoth(t, fmt.Sprintf("%s step %d", name, i), m, st, ref, rs, []int{(7*i + 3) % m.Config.Vocab})
	}
}

// stepBoth decodes tok with want (state ws) and then with got (gs), and
// fails unless their logits are the same bits.
func stepBoth(t *testing.T, label string, got *runtime.Model, gs *runtime.State, want *runtime.Model, ws *runtime.State, tok []int) {
	t.Helper()
	w, err := want.Forward(ws, tok, nil)
	if err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	g, err := got.Forward(gs, tok, nil)
	if err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	sameBits(t, label, g, w)
}

// residentDecode decodes 24 tokens (token i: (mul·i + add) mod the
// vocabulary) of a tiny model on b after routeEveryExpert (a resident
// decode: the layers route on the device), each step against the CPU bit
// for bit, and returns the graph launches a step and the captures over
// the last 16 steps (the first 8 capture).
func residentDecode(t *testing.T, b *Backend, name string, mul, add int) (perStep float64, captures int64) {
	t.Helper()
	ref, m := loadBoth(t, name, b)
	rs, st := ref.NewState(), m.NewState()
	routeEveryExpert(t, ref, rs)
	routeEveryExpert(t, m, st)
	var s0 Stats
	for i := range 24 {
		if i == 8 {
			s0 = b.Stats()
		}
		stepBoth(t, fmt.Sprintf("%s step %d", name, i), m, st, ref, rs, []int{(mul*i + add) % m.Config.Vocab})
	}
	s := b.Stats()
	return float64(s.GraphLaunches-s0.GraphLaunches) / 16, int64(s.GraphCaptures - s0.GraphCaptures)
}

// Every tiny model through the recorder: bit for bit the CPU's logits and
// hidden states (compareTiny), and long decodes replayed as graphs.
func TestRecorderTinyModelsFake(t *testing.T) {
	b, g := graphBackend(t)
	compareTiny(t, func(*testing.T) *Backend { return b }, func(string) float64 { return 0 })
	for _, name := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q8g64", "gemma4-q4g32", "gemma4-nokeqv-f32"} {
		s0 := b.Stats()
		decodeCompare(t, b, name, 40)
		s := b.Stats()
		launches, captures := s.GraphLaunches-s0.GraphLaunches, s.GraphCaptures-s0.GraphCaptures
		t.Logf("%s: %d graph launches (%d nodes), %d captures", name, launches, s.GraphNodes-s0.GraphNodes, captures)
		if launches < 20 || captures > launches/2 {
			t.Errorf("%s: decode not replayed: %d graph launches, %d captures", name, launches, captures)
		}
	}
	if s := b.Stats(); g.runs != int(s.GraphLaunches) {
		t.Errorf("%d graph runs, %d counted", g.runs, s.GraphLaunches)
	}
}

// A failing graph function switches graphs off without losing the queue:
// the results stay the CPU's, and no graph is left.
func TestRecorderFailuresFake(t *testing.T) {
	for _, fn := range []string{"beginCapture", "lastNode", "endCapture", "instantiate", "graphLaunch", "setKernelParams"} {
		t.Run(fn, func(t *testing.T) {
			b, g := graphBackend(t)
			g.fail[fn] = errors.New("injected")
			decodeCompare(t, b, "qwen3_next-q4g64", 30)
			r := b.dev.(*recorder)
			if r.on {
				t.Errorf("graphs still on after %s failed", fn)
			}
			if len(g.graphs)+len(g.execs) != 0 {
				t.Errorf("%d graphs, %d execs left after switching off", len(g.graphs), len(g.execs))
			}
		})
	}
}

// On the GPU: decoding through graph replays gives the same bits as
// submitting kernel by kernel (the same kernels with the same parameters).
func TestGraphsGPU(t *testing.T) {
	with := openOrSkip(t)
	without, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer without.Close()
	r, ok := with.dev.(*recorder)
	if !ok {
		t.Fatal("no recorder on the GPU backend (a driver without graph functions, or " + graphsEnv + "=0)")
	}
	if r2, ok := without.dev.(*recorder); ok {
		r2.on = false
	}
	for _, name := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q8g64", "gemma4-q4g32"} {
		dir := filepath.Join(tinyDir, name)
		a, err := runtime.Load(dir, &runtime.LoadOptions{Backend: with})
		if err != nil {
			t.Fatal(err)
		}
		b, err := runtime.Load(dir, &runtime.LoadOptions{Backend: without})
		if err != nil {
			t.Fatal(err)
		}
		s0 := with.Stats()
		sa, sb := a.NewState(), b.NewState()
		for i := range 48 {
			stepBoth(t, fmt.Sprintf("%s step %d", name, i), a, sa, b, sb, []int{(5*i + 1) % a.Config.Vocab})
		}
		s := with.Stats()
		t.Logf("%s: %d graph launches (%d nodes), %d captures over 48 steps", name, s.GraphLaunches-s0.GraphLaunches,
			s.GraphNodes-s0.GraphNodes, s.GraphCaptures-s0.GraphCaptures)
		if s.GraphLaunches-s0.GraphLaunches < 24 {
			t.Errorf("%s: decode not replayed as graphs", name)
		}
		a.Close()
		b.Close()
	}
	if !r.on {
		t.Error("graphs were switched off on the GPU (see the log)")
	}
}

// The conformance suite's model half through the recorder: .qpack
// containers with a one-slot expert cache (expert copies between the
// graphs), speculation, every expert resident.
func TestRecorderModelsConformanceFake(t *testing.T) {
	b, _ := graphBackend(t)
	devicetest.Models(t, b)
	t.Logf("stats %+v", b.Stats())
	if b.Stats().GraphLaunches == 0 {
		t.Error("no graph launched")
	}
}

// routeEveryExpert feeds a 128-token prompt that routes to every expert
// of a tiny model, so that the device expert cache holds them all and its
// layers route on the device from then on (a resident decode).
func routeEveryExpert(t testing.TB, m *runtime.Model, st *runtime.State) {
	t.Helper()
	prompt := make([]int, 128)
	for i := range prompt {
		prompt[i] = (31*i + 5) % m.Config.Vocab
	}
	if _, err := m.Forward(st, prompt, nil); err != nil {
		t.Fatal(err)
	}
}

// Each layer replays a graph of its own: once a decode has captured them,
// a step's replays set only the parameters that move with the position
// (RoPE's, also where it is fused with the norm before it, and
// attention's), not every node of a graph shared by the
// layers of one shape (what the recorder did before, ~70 parameter sets a
// token on these models, each a driver call on the GPU).
func TestRecorderLayerGraphsFake(t *testing.T) {
	for _, name := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q8g64", "gemma4-q4g32"} {
		t.Run(name, func(t *testing.T) {
			b, g := graphBackend(t)
			_, m := loadBoth(t, name, b)
			st := m.NewState()
			// On the host path the experts' products take the chosen
			// experts' addresses, which move with the token.
			routeEveryExpert(t, m, st)
			for i := range 48 {
				if i == 16 {
					g.sets = map[string]int{}
				}
				if _, err := m.Forward(st, []int{(5*i + 2) % m.Config.Vocab}, nil); err != nil {
					t.Fatal(err)
				}
			}
			for k, n := range g.sets {
				if k != "rope" && k != "rms_norm_rope" && k != "attention" && k != "attention_gqa" {
					t.Errorf("%d parameter sets of %s over 32 decode steps", n, k)
				}
			}
			if g.sets["attention"]+g.sets["attention_gqa"] == 0 {
				t.Error("no attention parameters set: the positions did not move?")
			}
			t.Logf("parameters set over 32 steps: %v", g.sets)
		})
	}
}

// Layers grouped into one submission (QPACK_CUDA_FLUSH_LAYERS): a resident
// decode (every expert in the device cache, routed on the device) gives the
// CPU's bits, and fewer graph launches a step, down to one queue a step
// ("step") submitted when the logits are read.
func TestRecorderFlushLayersFake(t *testing.T) {
	for _, name := range []string{"qwen3_next-q4g64", "gemma4-q4g32"} {
		perStep := map[int]float64{}
		for _, every := range []int{1, 2, flushEveryFor("step")} {
			b, _ := graphBackend(t)
			b.flushEvery = every
			b.dev.(*recorder).early = false // one queue a step, not two
			var captures int64
			perStep[every], captures = residentDecode(t, b, name, 5, 2)
			t.Logf("%s, flush every %d: %.2f graph launches a step, %d captures over 16 steps", name, every, perStep[every], captures)
		}
		one, two, step := perStep[1], perStep[2], perStep[flushEveryFor("step")]
		if !(two < one) || !(step < two) || step > 1 {
			t.Errorf("%s: graph launches a step %.2f (every layer), %.2f (every 2), %.2f (a step): not fewer, or a step not one queue", name, one, two, step)
		}
	}
}

// The early start: after a sync (a decode step's logits read), the queue
// goes to the GPU as soon as it holds earlyOps ops. A resident decode gives
// the CPU's bits with it on and off, and one graph launch a step more
// with it on (a step's first layer in two parts), each part replayed.
func TestRecorderEarlyStartFake(t *testing.T) {
	for _, name := range []string{"qwen3_next-q4g64", "gemma4-q4g32"} {
		perStep := map[bool]float64{}
		for _, early := range []bool{false, true} {
			b, _ := graphBackend(t)
			r := b.dev.(*recorder)
			if !r.early {
				t.Fatal("the early start is off by default")
			}
			r.early = early
			var captures int64
			perStep[early], captures = residentDecode(t, b, name, 3, 1)
			if captures != 0 {
				t.Errorf("%s, early %v: %d captures in steps 8-23: a part not replayed", name, early, captures)
			}
		}
		if perStep[true] != perStep[false]+1 {
			t.Errorf("%s: %.2f graph launches a step with the early start, %.2f without: want one more", name, perStep[true], perStep[false])
		}
		// One by one (QPACK_CUDA_EARLY=op): the first ops go as launches
		// of their own, the rest of the first layer as its graph.
		t.Setenv(earlyEnv, "op")
		b, _ := graphBackend(t)
		r := b.dev.(*recorder)
		if !r.early || !r.oneByOne {
			t.Fatalf("QPACK_CUDA_EARLY=op: early %v, one by one %v", r.early, r.oneByOne)
		}
		graphs0 := b.stats.GraphLaunches
		l0 := b.stats.Launches
		opByOp, captures := residentDecode(t, b, name, 3, 1)
		if captures != 0 {
			t.Errorf("%s, one by one: %d captures in steps 8-23: a part not replayed", name, captures)
		}
		if opByOp != perStep[false] {
			t.Errorf("%s: %.2f graph launches a step with the early start one by one, %.2f without it: want as many", name, opByOp, perStep[false])
		}
		if b.stats.GraphLaunches == graphs0 || b.stats.Launches == l0 {
			t.Errorf("%s, one by one: no graphs or no launches", name)
		}
		t.Setenv(earlyEnv, "")
	}
}

func TestFlushEveryFor(t *testing.T) {
	for v, want := range map[string]int{"": 2, "1": 1, "2": 2, "3": 3, "0": 2, "-2": 2, "x": 2, "step": math.MaxInt} {
		if got := flushEveryFor(v); got != want {
			t.Errorf("flushEveryFor(%q) = %d, want %d", v, got, want)
		}
	}
}

// A second conversation over the positions of the first (a state reset):
// the queues whose identity moves with the position (gemma4's layer 0
// after the early start's split begins with its RoPE) replay a graph of
// their shape with the positions set, instead of capturing a graph for
// each step they come back at (identPasses); every step still the CPU's
// bits.
func TestRecorderPositionsAgainFake(t *testing.T) {
	for _, name := range []string{"gemma4-q4g32", "qwen3_5_moe-q8g64"} {
		t.Run(name, func(t *testing.T) {
			b, _ := graphBackend(t)
			ref, m := loadBoth(t, name, b)
			rs, st := ref.NewState(), m.NewState()
			routeEveryExpert(t, ref, rs)
			routeEveryExpert(t, m, st)
			p0 := st.Pos()
			var first int64
			for round := range 2 {
				c0 := b.Stats().GraphCaptures
				for i := range 24 {
					stepBoth(t, fmt.Sprintf("%s round %d step %d", name, round, i), m, st, ref, rs, []int{(7*i + 3) % m.Config.Vocab})
				}
				caps := b.Stats().GraphCaptures - c0
				t.Logf("round %d: %d captures over 24 steps", round, caps)
				if round == 0 {
					first = caps
				} else if caps > 2 {
					t.Errorf("the positions again: %d captures over 24 steps (the first time: %d)", caps, first)
				}
				// Back to the prompt's end, as a new conversation with the
				// same prompt would be.
				for _, s := range []*runtime.State{rs, st} {
					s.Reset()
				}
				routeEveryExpert(t, ref, rs)
				routeEveryExpert(t, m, st)
				if st.Pos() != p0 || rs.Pos() != p0 {
					t.Fatalf("after the reset: positions %d and %d, want %d", st.Pos(), rs.Pos(), p0)
				}
			}
		})
	}
}

// graphsAfterFree repeats a queue whose copy and memset nodes write a
// vector that is freed after each pass and allocated again (the driver,
// like the fake, hands the same address back, so the queue's shape comes
// back too): its graph must be destroyed with the memory, never replayed
// (on the GPU a replay crashed the process inside cuGraphLaunch, twenty-
// seventh session). Each round's selection is checked.
func graphsAfterFree(t *testing.T, b *Backend) {
	l := b.Layer()
	r := rand.New(rand.NewPCG(5, 6))
	const n, k = 40000, 200 // above mappedWriteMax: an htod, not a kernel's read of staging
	s0 := b.Stats()
	for round := range 6 {
		x := devicetest.SelectLogits(r, n, round%devicetest.SelectKinds)
		xt, err := l.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		l.Write(xt, x)
		var sel nn.TopLogits
		ok, err := l.SelectTop(&sel, xt, n, k)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		checkSelection(t, fmt.Sprintf("round %d", round), &sel, ok, x, k)
		if err := l.EndPass(); err != nil {
			t.Fatal(err)
		}
		l.Free(xt)
	}
	if s := b.Stats(); s.GraphLaunches == s0.GraphLaunches {
		t.Error("no graph launched")
	}
}

func TestGraphsAfterFreeFake(t *testing.T) {
	b, g := graphBackend(t)
	graphsAfterFree(t, b)
	if len(g.stale) != 0 {
		t.Errorf("%d executables left whose memory was freed", len(g.stale))
	}
}

func TestGraphsAfterFreeGPU(t *testing.T) {
	b := openOrSkip(t)
	if _, ok := b.dev.(*recorder); !ok {
		t.Fatal("no recorder on the GPU backend")
	}
	graphsAfterFree(t, b)
}

// reaches: a copy or memset node's device range (a dtod's source too),
// an htod's pinned source when host memory is freed, never a kernel's.
func TestGraphReaches(t *testing.T) {
	host := make([]byte, 64)
	h := uintptr(unsafe.Pointer(&host[0]))
	g := &recGraph{ops: []recOp{
		{kind: opLaunch, dst: 0x1000, n: 0x100},
		{kind: opMemset, dst: 0x2000, n: 0x100},
		{kind: opDtoD, dst: 0x3000, src: 0x4000, n: 0x10},
		{kind: opHtoD, dst: 0x5000, host: host[16:32], n: 16},
	}}
	for _, c := range []struct {
		lo, hi uintptr
		host   bool
		want   bool
	}{
		{0x1000, 0x1100, false, false}, // a kernel's
		{0x20ff, 0x2100, false, true},  // the memset's last byte
		{0x2100, 0x2200, false, false}, // just after it
		{0x1f00, 0x2000, false, false}, // just before it
		{0x4008, 0x4009, false, true},  // the dtod's source
		{0x3000, 0x3001, false, true},  // its destination
		{0x5000, 0x5010, false, true},  // the htod's destination
		{h, h + 16, true, false},       // pinned memory before its source
		{h, h + 17, true, true},        // its first byte
		{h + 32, h + 64, true, false},  // after it
		{0x2000, 0x2100, true, false},  // host memory: device ranges aside
	} {
		if got := g.reaches(c.lo, c.hi, c.host); got != c.want {
			t.Errorf("reaches(%#x, %#x, host %v) = %v, want %v", c.lo, c.hi, c.host, got, c.want)
		}
	}
}

// A server's pattern through the recorder: sessions whose states and
// snapshots come and go (the garbage collector frees them, the next pass
// drains the frees, and the fake, as the driver does, hands the addresses
// to the next ones), each step the CPU's bits, and no graph launched after
// memory its copy or memset nodes reach was freed (the fake fails such a
// launch).
func TestGraphsStatesComeAndGoFake(t *testing.T) {
	for _, name := range []string{"qwen3_next-q4g64", "gemma4-q4g32"} {
		t.Run(name, func(t *testing.T) {
			b, g := graphBackend(t)
			ref, m := loadBoth(t, name, b)
			tok := func(i int) []int { return []int{(7*i + 3) % m.Config.Vocab} }
			var keep *runtime.Snapshot // a snapshot and its reference, from the session before
			var keepRef *runtime.Snapshot
			for session := range 4 {
				st, rs := m.NewState(), ref.NewState()
				if keep != nil && session%2 == 1 {
					if err := st.Restore(keep); err != nil {
						t.Fatal(err)
					}
					if err := rs.Restore(keepRef); err != nil {
						t.Fatal(err)
					}
				}
				for i := range 10 {
					stepBoth(t, fmt.Sprintf("session %d step %d", session, i), m, st, ref, rs, tok(session+i))
					if i == 5 {
						keep, keepRef = st.Snapshot(), rs.Snapshot()
					}
				}
				st, rs = nil, nil
				goruntime.GC()
				goruntime.GC() // cleanups run after the first
			}
			if b.Stats().GraphLaunches == 0 {
				t.Error("no graph launched")
			}
			if len(g.stale) != 0 {
				t.Errorf("%d executables left whose memory was freed", len(g.stale))
			}
		})
	}
}
