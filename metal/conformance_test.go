package metal

import (
	"testing"

	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// TestConformanceOps runs the nn.Device conformance suite
// (runtime/nn/devicetest) against the backend's layer device: on Linux
// through the C++ shim (every kernel of the layer path, the shared bodies
// included, plus the host fallbacks), on a Mac on the GPU.
func TestConformanceOps(t *testing.T) {
	b := kernelTestBackend(t)
	dev := b.LayerDevice()
	if dev == nil {
		t.Skip("the device has no GPU addresses (macOS 13 or later needed)")
	}
	devicetest.Ops(t, dev, devicetest.DefaultTolerances())
	if err := dev.EndPass(); err != nil {
		t.Fatal(err)
	}
	st := dev.(*Device).LayerStats()
	t.Logf("layer device: %+v", st)
}
