package cuda

import (
	"fmt"
	"os"
	"testing"
)

// BenchmarkPersistentPhasesGPU prints, for phases of 0 bytes to 16 MiB
// (32 phases, each its own slice of a buffer far larger than the L2): the
// GPU time a phase as one kernel each on the stream, as one kernel each in
// a graph with programmatic dependent launches, and inside one persistent
// launch (a group or two a multiprocessor) with a grid barrier after each;
// and each against the phase's HBM time (its bytes ÷ the copy bandwidth
// measured in the same run). At 0 bytes the persistent figure is the cost
// of one barrier.
func BenchmarkPersistentPhasesGPU(b *testing.B) {
	g, sms := probeDevice(b, probeSource, "probe.cu")
	fPhase, err := g.function("probe_phase")
	if err != nil {
		b.Fatal(err)
	}
	fPersist, err := g.function("probe_persistent")
	if err != nil {
		b.Fatal(err)
	}
	const phases = 32
	const maxPhase = 16 << 20
	src, err := g.memAlloc(phases * maxPhase)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(src)
	sink, err := g.memAlloc(4 * 4 * sms)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(sink)
	bar, err := g.memAlloc(256)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(bar)
	if err := g.memset(src, phases*maxPhase); err != nil {
		b.Fatal(err)
	}
	bw := probeCopyBandwidth(b, g, src, phases*maxPhase)
	b.Logf("device %s: copy bandwidth %.0f GB/s; %d phases a run, the best of 5 runs", g.name(), bw/1e9, phases)
	best := func(run func() (float32, error)) float64 {
		return bestRun(b, run) * 1000 / phases // µs a phase
	}
	kernels := func(n4, grid int) (float32, error) {
		return g.timed(func() error {
			for ph := range phases {
				if err := g.launch(fPhase, [3]uint32{uint32(grid), 1, 1}, [3]uint32{256, 1, 1},
					probeParams(src, sink, bar, n4, phases, ph)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	graph := func(n4, grid int) (float32, error) {
		if err := g.beginCapture(); err != nil {
			return 0, err
		}
		for ph := range phases {
			if err := g.launch(fPhase, [3]uint32{uint32(grid), 1, 1}, [3]uint32{256, 1, 1},
				probeParams(src, sink, bar, n4, phases, ph)); err != nil {
				g.endCapture()
				return 0, err
			}
		}
		gr, err := g.endCapture()
		if err != nil {
			return 0, err
		}
		defer g.destroyGraph(gr)
		exec, err := g.instantiate(gr)
		if err != nil {
			return 0, err
		}
		defer g.destroyExec(exec)
		if err := g.graphLaunch(exec); err != nil { // the upload
			return 0, err
		}
		return g.timed(func() error { return g.graphLaunch(exec) })
	}
	out, _, err := g.hostAlloc(8) // the barrier's two words, read back after each run
	if err != nil {
		b.Fatal(err)
	}
	defer g.hostFree(out)
	persistent := func(n4, grid int) (float32, error) {
		if err := g.memset(bar, 256); err != nil {
			return 0, err
		}
		ms, err := g.timed(func() error {
			return g.launch(fPersist, [3]uint32{uint32(grid), 1, 1}, [3]uint32{256, 1, 1},
				probeParams(src, sink, bar, n4, phases, 0))
		})
		if err != nil {
			return 0, err
		}
		if err := g.dtoh(out, bar); err != nil {
			return 0, err
		}
		if err := g.sync(); err != nil {
			return 0, err
		}
		arrived := uint32(out[0]) | uint32(out[1])<<8 | uint32(out[2])<<16 | uint32(out[3])<<24
		if out[4]|out[5]|out[6]|out[7] != 0 || int(arrived) != phases*grid {
			return 0, fmt.Errorf("grid barrier: %d arrivals of %d, timeouts %v (groups not co-resident?)", arrived, phases*grid, out[4:8])
		}
		return ms, nil
	}
	for range b.N {
		b.Logf("%9s %8s | %-22s | %-22s | %-22s | %-22s", "phase", "HBM us", "kernels (stream)", "kernels (graph, PDL)", "persistent, 1/SM", "persistent, 2/SM")
		for _, size := range []int{0, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20} {
			n4 := size / 16
			hbm := float64(size) / bw * 1e6 // bw counts bytes read and written alike
			col := func(us float64) string {
				if size == 0 {
					return fmt.Sprintf("%7.2f us", us)
				}
				return fmt.Sprintf("%7.2f us %5.2fx", us, hbm/us)
			}
			k := best(func() (float32, error) { return kernels(n4, 2*sms) })
			gp := best(func() (float32, error) { return graph(n4, 2*sms) })
			p1 := best(func() (float32, error) { return persistent(n4, sms) })
			p2 := best(func() (float32, error) { return persistent(n4, 2*sms) })
			b.Logf("%9d %8.2f | %-22s | %-22s | %-22s | %-22s", size, hbm, col(k), col(gp), col(p1), col(p2))
			if size == 0 {
				b.ReportMetric(p2, "barrier_us")
				b.ReportMetric(gp, "graph_kernel_us")
			}
			if size == 4<<20 {
				b.ReportMetric(hbm/p2, "persistent_4MiB_x")
				b.ReportMetric(hbm/gp, "graph_4MiB_x")
			}
		}
	}
}

// probeCopyBandwidth measures the device's copy bandwidth in bytes a
// second, read and written counted alike (as MeasureCopyBandwidth): 8
// copies of the first min(n, 1 GiB) bytes at src, after 2 to warm up.
func probeCopyBandwidth(b *testing.B, g *gpu, src devptr, n int) float64 {
	b.Helper()
	n = min(n, 1<<30)
	dst, err := g.memAlloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(dst)
	for range 2 {
		if err := g.dtod(dst, src, n); err != nil {
			b.Fatal(err)
		}
	}
	ms, err := g.timed(func() error {
		for range 8 {
			if err := g.dtod(dst, src, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || !(ms > 0) {
		b.Fatalf("copy bandwidth: %v (%g ms)", err, ms)
	}
	return 2 * float64(n) * 8 / (float64(ms) / 1e3)
}

// bestRun is the fastest of 5 runs of run (its milliseconds) after one
// that warms up.
func bestRun(b *testing.B, run func() (float32, error)) float64 {
	b.Helper()
	m := float32(0)
	for i := range 6 {
		v, err := run()
		if err != nil {
			b.Fatal(err)
		}
		if i > 0 && (m == 0 || v < m) {
			m = v
		}
	}
	return float64(m)
}

// probeDevice opens the first device for a probe benchmark alone (skipping
// without one unless QPACK_CUDA_REQUIRE is set), compiles the probe's own
// source into it (none when src is empty) and returns it with its
// multiprocessor count; the device is closed when the benchmark ends.
func probeDevice(b *testing.B, src, name string) (*gpu, int) {
	b.Helper()
	d, err := openDevice(0)
	if err != nil {
		if os.Getenv("QPACK_CUDA_REQUIRE") == "" {
			b.Skipf("no CUDA device: %v", err)
		}
		b.Fatal(err)
	}
	b.Cleanup(func() { d.close() })
	g, ok := d.(*gpu)
	if !ok {
		b.Skip("not a driver device")
	}
	sms, err := multiprocessors(g.name())
	if err != nil {
		b.Fatal(err)
	}
	if src == "" {
		return g, sms
	}
	if _, log, err := g.compile(src, name); err != nil {
		b.Fatalf("%s: %v\n%s", name, err, log)
	}
	return g, sms
}
