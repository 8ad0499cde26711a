package metal

import (
	"os"
	goruntime "runtime"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// The conformance suite's Ops run in TestKernels (runKernelCases), on the
// kernel tests' backend, so that its check that every kernel ran covers the
// layer device's kernels.

// TestConformanceModels runs every tiny model through the backend (its
// layer device) against the CPU backend with the conformance suite's
// bounds: logits, greedy tokens, chunked prefill against step-by-step
// decode, and a .qpack with a one-slot expert cache. Through the shim it
// takes about 4 minutes on a 2-core machine (some 130,000 launches, each
// sending its buffers through a pipe), so there it runs only with
// QPACK_METAL_MODELS=1 (TestTinyModels runs every architecture in CI);
// on a Mac it always runs.
func TestConformanceModels(t *testing.T) {
	if goruntime.GOOS != "darwin" && os.Getenv("QPACK_METAL_MODELS") == "" {
		t.Skip("slow through the shim: set QPACK_METAL_MODELS=1 (TestTinyModels covers every architecture)")
	}
	b := modelTestBackend(t)
	if b.LayerDevice() == nil {
		t.Skip("the device has no GPU addresses (macOS 13 or later needed)")
	}
	before := b.LayerDevice().(*Device).LayerStats()
	devicetest.Models(t, b)
	after := b.LayerDevice().(*Device).LayerStats()
	if after.Launches == before.Launches {
		t.Error("the models did not run on the layer device")
	}
	t.Logf("layer device: %d kernels in %d command buffers, %d ops on the CPU", after.Launches-before.Launches,
		after.Submits-before.Submits, after.HostOps-before.HostOps)
}
