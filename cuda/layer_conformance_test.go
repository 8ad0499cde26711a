package cuda

import (
	"fmt"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// The nn.Device conformance suite on the fake device, on the kernel path
// (the fake's kernels are the host's arithmetic: this checks what the Layer
// passes them) and on the host path.
func TestDeviceConformanceFake(t *testing.T) {
	for _, kernels := range []bool{true, false} {
		t.Run(map[bool]string{true: "kernels", false: "host"}[kernels], func(t *testing.T) {
			b, _ := fakeBackend(t)
			b.Layer().kernels = kernels
			devicetest.Ops(t, b.LayerDevice(), devicetest.DefaultTolerances())
		})
	}
}

func TestModelsConformanceFake(t *testing.T) {
	b, _ := fakeBackend(t)
	devicetest.Models(t, b)
}

// The suite on the GPU: the real kernels within the CUDA bounds.
func TestDeviceConformanceGPU(t *testing.T) {
	b := openOrSkip(t)
	devicetest.Ops(t, b.LayerDevice(), devicetest.DefaultTolerances())
	s := b.Stats()
	t.Logf("stats: %+v", s)
	if s.HostOps != 0 {
		t.Errorf("%d ops ran on the host path on the GPU", s.HostOps)
	}
	if s.RoutedLayers == 0 {
		t.Error("RoutedExperts never routed on the GPU")
	}
	// The matvecs with their chunks split over 2 and 8 simdgroups (gemvSplit
	// picks by shape, and most of the suite's small shapes get 1).
	// With split 2, attention without attention_tile too (chunks of 4
	// tokens or more take it by default).
	for _, split := range []int{2, 8} {
		t.Run(fmt.Sprintf("split%d", split), func(t *testing.T) {
			b.splitOverride = split
			b.attnTileOff = split == 2
			defer func() { b.splitOverride, b.attnTileOff = 0, false }()
			devicetest.Ops(t, b.LayerDevice(), devicetest.DefaultTolerances())
		})
	}
}

func TestModelsConformanceGPU(t *testing.T) {
	b := openOrSkip(t)
	devicetest.Models(t, b)
	t.Logf("stats: %+v", b.Stats())
}
