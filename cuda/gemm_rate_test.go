package cuda

import "testing"

// launchClock is the fake device with a clock: each launch inside timed
// adds 2 ms.
type launchClock struct {
	*fakeDev
	timedLaunches int
	inTime        bool
}

func (f *launchClock) launch(fn uintptr, grid, block [3]uint32, p []byte) error {
	if f.inTime {
		f.timedLaunches++
	}
	return f.fakeDev.launch(fn, grid, block, p)
}

func (f *launchClock) timed(fn func() error) (float32, error) {
	f.inTime, f.timedLaunches = true, 0
	err := fn()
	f.inTime = false
	return 2 * float32(f.timedLaunches), err
}

// MeasureMatMulRate times the baseline kernel only (three products after
// two warm-ups, gemm_base every time), counts 2·n³ FLOP per product, and
// frees what it allocated.
func TestMeasureMatMulRate(t *testing.T) {
	f := &launchClock{fakeDev: newFake(t)}
	f.gemmLaunchOnly = true // an 8192³ product on the CPU would take minutes
	b, err := newBackend(f)
	if err != nil {
		t.Fatal(err)
	}
	rate, err := b.MeasureMatMulRate()
	if err != nil {
		t.Fatal(err)
	}
	const n = float64(matMulRateDim)
	if want := 2 * n * n * n * 3 / (2e-3 * float64(f.timedLaunches)); f.timedLaunches != 3 || rate != want {
		t.Errorf("rate %g over %d timed launches, want %g over 3", rate, f.timedLaunches, want)
	}
	for _, k := range f.launches {
		if k != "gemm_base" {
			t.Errorf("launched %s", k)
		}
	}
	if len(f.launches) != 5 {
		t.Errorf("%d launches, want 5 (2 warm-up, 3 timed)", len(f.launches))
	}
	if err := b.Close(); err != nil { // fails if a buffer is still allocated
		t.Error(err)
	}
	if _, err := b.MeasureMatMulRate(); err == nil {
		t.Error("a closed backend measured")
	}
}
