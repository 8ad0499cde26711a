package nn_test

import (
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// The reference device passes the conformance suite.
func TestHostDeviceConformance(t *testing.T) {
	devicetest.Ops(t, nn.HostDevice{}, devicetest.DefaultTolerances())
}

// The strict device passes it too.
func TestStrictConformance(t *testing.T) {
	devicetest.Ops(t, devicetest.NewStrict(nil), devicetest.DefaultTolerances())
}
