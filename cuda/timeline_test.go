package cuda

import (
	"slices"
	"strings"
	"testing"
)

// clockFake is the graph fake with a GPU clock for timing events: every
// kernel, copy or memset the GPU runs takes 1 µs (a graph's nodes one each),
// and each wait of the host for the stream leaves the GPU idle for 30 µs
// (the host's work before its next queue). record stamps an event with the
// clock; elapsed is the difference of two stamps.
type clockFake struct {
	*graphFake
	us      float64
	stamp   map[event]float64
	ran     int // ops the GPU ran (launched directly or as graph nodes)
	syncs   int
	capture bool
}

func (c *clockFake) tick() {
	if !c.active {
		c.us++
		c.ran++
	}
}
func (c *clockFake) launch(fn uintptr, grid, block [3]uint32, p []byte) error {
	c.tick()
	return c.graphFake.launch(fn, grid, block, p)
}
func (c *clockFake) htod(dst devptr, src []byte) error {
	c.tick()
	return c.graphFake.htod(dst, src)
}
func (c *clockFake) dtod(dst, src devptr, n int) error {
	c.tick()
	return c.graphFake.dtod(dst, src, n)
}
func (c *clockFake) memset(dst devptr, n int) error {
	c.tick()
	return c.graphFake.memset(dst, n)
}
func (c *clockFake) graphLaunch(exec uintptr) error {
	n := len(c.execs[exec])
	c.us += float64(n)
	c.ran += n
	return c.graphFake.graphLaunch(exec)
}
func (c *clockFake) sync() error {
	c.us += 30
	c.syncs++
	return c.graphFake.sync()
}
func (c *clockFake) record(e event, s stream) error {
	c.stamp[e] = c.us
	return c.graphFake.record(e, s)
}
func (c *clockFake) newTimingEvent() (event, error) { return c.newEvent() }
func (c *clockFake) elapsed(from, to event) (float32, error) {
	if !c.liveEv[from] || !c.liveEv[to] {
		c.t.Fatalf("elapsed between events %d and %d, not both live", from, to)
	}
	return float32(c.stamp[to]-c.stamp[from]) / 1000, nil
}

// The submission timeline over a decode: every queue the recorder submits
// is timed (its ops' clock time inside, the idle time between), graphs stay
// on, and Close frees every event.
func TestTimelineFake(t *testing.T) {
	t.Setenv(profileEnv, profileGraphs)
	t.Setenv(mappedUploadsEnv, "0") // the labels below: the embedding row by a copy
	c := &clockFake{graphFake: newGraphFake(t), stamp: map[event]float64{}}
	// Closed after the models loadBoth loads, on an open backend; Close
	// frees every event (the fake checks).
	b := testBackend(t, c)
	if b.prof != nil || b.tl == nil {
		t.Fatal("QPACK_CUDA_PROFILE=graphs: want the timeline, not the kernel profiler")
	}
	decodeCompare(t, b, "qwen3_next-q4g64", 2) // warm: shapes seen, graphs captured
	b.ResetProfile()
	ran0, syncs0, st0 := c.ran, c.syncs, b.Stats()
	decodeCompare(t, b, "qwen3_next-q4g64", 6)
	p := b.Profile() // collects: one more sync
	st := b.Stats()
	tl := b.tl
	graphs := int(st.GraphLaunches - st0.GraphLaunches)
	if graphs == 0 || tl.graphLaunches != graphs {
		t.Fatalf("timeline counted %d graph launches, the recorder %d", tl.graphLaunches, graphs)
	}
	if tl.queues <= tl.graphLaunches {
		t.Fatalf("%d queues for %d graph launches: the op-by-op queues (a model's first ops) are missing", tl.queues, tl.graphLaunches)
	}
	// Every op the GPU ran in the period ran inside a timed queue, but the
	// downloads (dtoh: no clock tick) and the ops loadBoth's upload queued.
	if want := float64(c.ran-ran0) / 1000; tl.inside > want*(1+1e-5) || tl.inside < want/2 {
		t.Fatalf("inside the queues %.6f ms, the GPU ran %.6f ms of ops", tl.inside, want)
	}
	// Each host wait between two queues shows as a 30 µs gap (bin 20-100).
	syncs := c.syncs - syncs0
	if tl.gapN[3] == 0 || tl.gapN[3] > syncs || tl.gapN[4] != 0 {
		t.Fatalf("gaps %v for %d syncs", tl.gapN, syncs)
	}
	if got, want := tl.between, tl.gapMS[0]+tl.gapMS[1]+tl.gapMS[2]+tl.gapMS[3]+tl.gapMS[4]; got != want {
		t.Fatalf("between %.6f ms, the bins sum to %.6f", got, want)
	}
	// Each step's wait for its logits is followed by the next step's
	// queue: the host's time from one to the other is counted for each.
	if tl.afterWaits < 6 || tl.toSubmit < tl.toFirstOp || tl.maxToSubmit <= 0 {
		t.Fatalf("host after waits: %d (6 steps), %v to the first op, %v to the submission (at most %v)",
			tl.afterWaits, tl.toFirstOp, tl.toSubmit, tl.maxToSubmit)
	}
	// The host's path from each step's first wait (its logits' download)
	// to the next step's first submission (its early start: layer 0's
	// first ops) passes the pass's end, the next step's Forward (marked by
	// the runtime through Backend.Mark), its embedding row and its first
	// launch, in that order.
	const first = "memset htod rms_norm_rows gemv_q4_set"
	path := tl.paths[first]
	if path == nil || path.n < 5 {
		t.Fatalf("the host's path before %q: %+v, want one a step", first, path)
	}
	points := []string{"EndPass called", "a memset queued", "EndPass returns", "the graph's Forward called", "Write called", "an htod queued", "a launch queued"}
	at := make([]float64, 0, len(points)+1)
	for _, name := range points {
		if path.count[name] != path.n {
			t.Fatalf("%d of %d paths before %q passed %q", path.count[name], path.n, first, name)
		}
		at = append(at, path.mean(name))
	}
	at = append(at, float64(path.submit.Nanoseconds())/1000/float64(path.n))
	if !slices.IsSorted(at) {
		t.Fatalf("the host's path out of order: %v at %v µs, then submitted", points, at)
	}
	if !strings.Contains(p, "cuda submission timeline:") || !strings.Contains(p, "gaps of 20-100 us") || !strings.Contains(p, "the host after a wait") ||
		!strings.Contains(p, "EndPass returns (") || !strings.Contains(p, "the host's path from the first wait to the submission of") ||
		!strings.Contains(p, "in the gap before each: ") || !strings.Contains(p, " route_topk") {
		t.Fatalf("timeline report:\n%s", p)
	}
	t.Logf("\n%s", p)
}

// A queue's label names its ops in order, a run of one name once with its
// count, and a kernel it cannot name by its function's address.
func TestQueueLabel(t *testing.T) {
	names := map[uintptr]string{1: "rms_norm_rows", 2: "gemv_q4"}
	ops := []recOp{{kind: opMemset}, {kind: opHtoD}, {kind: opHtoD}, {kind: opHtoD}, {kind: opLaunch, fn: 1},
		{kind: opLaunch, fn: 2}, {kind: opLaunch, fn: 2}, {kind: opDtoD}, {kind: opLaunch, fn: 9}}
	if got, want := queueLabel(ops, names), "memset htod x3 rms_norm_rows gemv_q4 x2 dtod fn0x9"; got != want {
		t.Errorf("queueLabel = %q, want %q", got, want)
	}
	if got := queueLabel(nil, names); got != "" {
		t.Errorf("queueLabel of no ops = %q", got)
	}
}
