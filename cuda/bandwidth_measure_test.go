package cuda

import "testing"

// timedFake is the fake device with a clock: each dtod inside timed adds
// a fixed time.
type timedFake struct {
	*fakeDev
	copies int
	inTime bool
}

func (f *timedFake) dtod(dst, src devptr, n int) error {
	if f.inTime {
		f.copies++
	}
	return f.fakeDev.dtod(dst, src, n)
}

func (f *timedFake) timed(fn func() error) (float32, error) {
	f.inTime, f.copies = true, 0
	err := fn()
	f.inTime = false
	return 0.5 * float32(f.copies), err // 0.5 ms per copy
}

// MeasureCopyBandwidth counts bytes read plus written over the timed copies
// only (not the warm-up), frees its buffers, and refuses a zero time and
// bad arguments.
func TestMeasureCopyBandwidth(t *testing.T) {
	f := &timedFake{fakeDev: newFake(t)}
	b, err := newBackend(f)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); err != nil { // fails if a buffer is still allocated
			t.Error(err)
		}
	}()
	bw, err := b.MeasureCopyBandwidth(1<<20, 4)
	if err != nil {
		t.Fatal(err)
	}
	// 4 copies of 1 MiB in 2 ms: 2·4 MiB / 2 ms.
	if want := 2 * 4 * float64(1<<20) / 2e-3; bw != want {
		t.Errorf("bandwidth %g, want %g", bw, want)
	}
	if len(f.dev) != 0 {
		t.Errorf("%d device buffers left", len(f.dev))
	}
	if _, err := b.MeasureCopyBandwidth(0, 4); err == nil {
		t.Error("n = 0 accepted")
	}
	z, err := newBackend(newFake(t)) // its timed reports 0 ms
	if err != nil {
		t.Fatal(err)
	}
	if _, err := z.MeasureCopyBandwidth(4096, 2); err == nil {
		t.Error("a zero time gave a bandwidth")
	}
	z.Close()
	if _, err := z.MeasureCopyBandwidth(4096, 2); err == nil {
		t.Error("measured on a closed backend")
	}
}
