package cuda

import (
	"testing"
	"time"
)

// BenchmarkIdleWaitGPU is what a wait for streams with nothing queued
// costs the host: syncAll after a completed wait, which asks the driver
// nothing (gpu.busy), against the same wait with both streams marked busy,
// which polls them (a cuStreamQuery each, inside the context). A decode
// step's EndPass makes such a wait right after the selection's.
func BenchmarkIdleWaitGPU(b *testing.B) {
	g, _ := probeDevice(b, "", "")
	g.busy = [2]bool{true, true}
	if err := g.syncAll(); err != nil {
		b.Fatal(err)
	}
	if g.busy != [2]bool{} {
		b.Fatalf("busy %v after a wait", g.busy)
	}
	const n = 20000
	per := func(mark bool) float64 {
		t0 := time.Now()
		for range n {
			if mark {
				g.busy = [2]bool{true, true}
			}
			if err := g.syncAll(); err != nil {
				b.Fatal(err)
			}
		}
		return float64(time.Since(t0).Nanoseconds()) / n / 1e3
	}
	for range b.N {
		idle, asked := per(false), per(true)
		b.ReportMetric(idle, "idle_us/wait")
		b.ReportMetric(asked, "asked_us/wait")
		b.Logf("a wait for both idle streams: %.3f us without asking the driver, %.3f us asking it (%s)", idle, asked, g.name())
	}
}
