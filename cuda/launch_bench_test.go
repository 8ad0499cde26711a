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
	b.ReportMetric(us(hostBare), "host_us/launch")
	b.ReportMetric(float64(gpuBare)*1000/n, "gpu_us/launch")
	b.ReportMetric(us(hostLayer), "host_us/layer_op")
	b.ReportMetric(float64(gpuLayer)*1000/n, "gpu_us/layer_op")
	b.Logf("%d launches: bare %.2f us each on the host, %.2f us on the GPU; as Layer ops %.2f / %.2f us",
		n, us(hostBare), float64(gpuBare)*1000/n, us(hostLayer), float64(gpuLayer)*1000/n)
}
