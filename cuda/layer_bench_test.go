package cuda

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/qpack-go/qpack/runtime"
)

// perOpBackend hides the Layer: the model runs on the host device with
// this backend's per-op MatMul, RMSNorm and SwiGLU (the path before the
// Layer).
type perOpBackend struct {
	runtime.Backend
	runtime.Allocator
}

// BenchmarkLayerDecodeGPU decodes tiny models token by token on the Layer,
// on the per-op path of the same backend, and on the CPU backend, in the
// same run, and reports tokens per second and the Layer's ratios to the two
// baselines. Tiny models measure the per-token overhead (launches, waits),
// not bandwidth.
func BenchmarkLayerDecodeGPU(b *testing.B) { benchDecode(b, openOrSkip(b)) }

func benchDecode(b *testing.B, be *Backend) {
	const steps = 64
	for _, name := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q4g32", "gemma4-q4g32"} {
		b.Run(name, func(b *testing.B) {
			dir := filepath.Join(tinyDir, name)
			rate := func(backend runtime.Backend) float64 {
				var opt *runtime.LoadOptions
				if backend != nil {
					opt = &runtime.LoadOptions{Backend: backend}
				}
				m, err := runtime.Load(dir, opt)
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				st := m.NewState()
				if _, err := m.Forward(st, []int{1, 2, 3, 4}, nil); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				for i := range steps {
					if _, err := m.Forward(st, []int{5 + i%7}, nil); err != nil {
						b.Fatal(err)
					}
				}
				return steps / time.Since(start).Seconds()
			}
			var layer, perOp, cpu float64
			for range b.N {
				layer = rate(be)
				perOp = rate(perOpBackend{be, be})
				cpu = rate(nil)
			}
			b.ReportMetric(layer, "layer_tok/s")
			b.ReportMetric(perOp, "perop_tok/s")
			b.ReportMetric(cpu, "cpu_tok/s")
			b.ReportMetric(layer/perOp, "x_perop")
			b.ReportMetric(layer/cpu, "x_cpu")
			b.Logf("%s: layer %.0f tok/s, per-op %.0f tok/s (x%.2f), cpu %.0f tok/s (x%.2f); stats %+v",
				name, layer, perOp, layer/perOp, cpu, layer/cpu, be.Stats())
		})
	}
}
