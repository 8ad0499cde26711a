package cuda

import (
	"strings"
	"testing"
)

// timerFake is the fake device with timing events: every kernel takes
// 2 µs.
type timerFake struct{ *fakeDev }

func (f timerFake) newTimingEvent() (event, error) { return f.newEvent() }
func (f timerFake) elapsed(from, to event) (float32, error) {
	if !f.liveEv[from] || !f.liveEv[to] {
		f.t.Fatalf("elapsed between events %d and %d, not both live", from, to)
	}
	return 0.002, nil
}

func TestProfilerFake(t *testing.T) {
	t.Setenv(profileEnv, "1")
	f := timerFake{newFake(t)}
	// Closed after the models loadBoth loads, on an open backend; Close
	// frees every event (the fake checks).
	b := testBackend(t, f)
	if b.prof == nil {
		t.Fatal("no profiler with " + profileEnv + "=1")
	}
	if _, ok := b.dev.(*recorder); ok {
		t.Fatal("graphs on while profiling")
	}
	decodeCompare(t, b, "qwen3_next-q4g64", 3)
	p := b.Profile()
	n := b.Stats().Launches
	// The compute stream's copies and memsets are timed too (a step's
	// embedding row, its arena's reset).
	if !strings.Contains(p, "gemv_q4") || !strings.Contains(p, "route_topk") || !strings.Contains(p, "the fastest launch took 2.00 us") ||
		!strings.Contains(p, "\n  htod ") || !strings.Contains(p, "\n  memset ") {
		t.Fatalf("profile lacks the kernels run:\n%s", p)
	}
	t.Logf("%d launches:\n%s", n, p)
}
