package cuda

import (
	"testing"
	"time"
)

// BenchmarkLaunchGPU measures what one tiny kernel (scale over 256 floats)
// costs when n of them are queued back to back: the host's time to queue
// them (the bare launch, and through a Layer op with its lock and checks)
// and the GPU's time between events around them. GPU time close to the
// host's says the host's launches bound the stream; GPU time above it is
// the device's own time per small kernel.
func BenchmarkLaunchGPU(b *testing.B) {
	be := openOrSkip(b)
	// The driver's own costs: without the recorder (which would queue the
	// launches and replay them as graphs).
	if r, ok := be.dev.(*recorder); ok {
		if err := r.flush(); err != nil {
			b.Fatal(err)
		}
		be.dev = r.d
		defer func() { be.dev = r }()
	}
	l := be.Layer()
	x := l.Temp(256)
	p := addr(x, 256)
	const n = 4000
	var hostBare, hostLayer time.Duration
	var gpuBare, gpuLayer float32
	for range b.N {
		var err error
		be.mu.Lock()
		gpuBare, err = be.dev.timed(func() error {
			t0 := time.Now()
			for range n {
				if err := be.kScale(p, 1, 256); err != nil {
					return err
				}
			}
			hostBare = time.Since(t0)
			return nil
		})
		be.mu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
		gpuLayer, err = be.dev.timed(func() error {
			t0 := time.Now()
			for range n {
				l.Scale(x, 1, 256)
			}
			hostLayer = time.Since(t0)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.EndPass(); err != nil {
			b.Fatal(err)
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	if gr, ok := be.dev.(grapher); ok {
		benchGraph(b, be, gr, p, n)
	}
	b.ReportMetric(us(hostBare), "host_us/launch")
	b.ReportMetric(float64(gpuBare)*1000/n, "gpu_us/launch")
	b.ReportMetric(us(hostLayer), "host_us/layer_op")
	b.ReportMetric(float64(gpuLayer)*1000/n, "gpu_us/layer_op")
	b.Logf("%d launches: bare %.2f us each on the host, %.2f us on the GPU; as Layer ops %.2f / %.2f us",
		n, us(hostBare), float64(gpuBare)*1000/n, us(hostLayer), float64(gpuLayer)*1000/n)
}

// benchGraph: the same n launches captured into a CUDA graph (host time
// per captured launch), instantiated, captured again with other
// parameters and updated in place, then launched as one graph (host time,
// GPU time per node).
func benchGraph(b *testing.B, be *Backend, gr grapher, p devptr, n int) {
	be.mu.Lock()
	defer be.mu.Unlock()
	capture := func(scale float32) (uintptr, time.Duration) {
		t0 := time.Now()
		if err := gr.beginCapture(); err != nil {
			b.Fatal(err)
		}
		for range n {
			if err := be.kScale(p, scale, 256); err != nil {
				b.Fatal(err)
			}
		}
		g, err := gr.endCapture()
		if err != nil {
			b.Fatal(err)
		}
		return g, time.Since(t0)
	}
	g1, capT := capture(1)
	nodes, err := gr.graphNodes(g1)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	exec, err := gr.instantiate(g1)
	if err != nil {
		b.Fatal(err)
	}
	instT := time.Since(t0)
	g2, cap2T := capture(0.5)
	t0 = time.Now()
	ok, err := gr.execUpdate(exec, g2)
	if err != nil || !ok {
		b.Fatalf("execUpdate: %v %v", ok, err)
	}
	updT := time.Since(t0)
	var launchT time.Duration
	gpu, err := be.dev.timed(func() error {
		t := time.Now()
		err := gr.graphLaunch(exec)
		launchT = time.Since(t)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, g := range []uintptr{g1, g2} {
		if err := gr.destroyGraph(g); err != nil {
			b.Fatal(err)
		}
	}
	if err := gr.destroyExec(exec); err != nil {
		b.Fatal(err)
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(n) }
	b.ReportMetric(per(capT), "capture_us/launch")
	b.ReportMetric(float64(gpu)*1000/float64(n), "gpu_us/graph_node")
	b.Logf("graph of %d nodes: capture %.2f us per launch (again: %.2f), instantiate %v, update %v, launch %v on the host; %.2f us per node on the GPU",
		nodes, per(capT), per(cap2T), instT, updT, launchT, float64(gpu)*1000/float64(n))
}
