//go:build darwin

package metal

import (
	"errors"
	"sync"
	"testing"
)

// On macOS the shared test cases (cases_test.go: every kernel against
// float64 references and the CPU backend, the memory paths, and the six
// tiny models end to end against the CPU backend) run on the real GPU.
// Nothing here has run in this project's CI, which has no Mac; see
// README.md.

var darwinShared struct {
	once sync.Once
	be   *Backend
	err  error
}

func kernelTestBackend(t *testing.T) *Backend {
	t.Helper()
	darwinShared.once.Do(func() { darwinShared.be, darwinShared.err = New() })
	if errors.Is(darwinShared.err, ErrUnsupported) {
		t.Skipf("no Metal device: %v", darwinShared.err)
	}
	if darwinShared.err != nil {
		t.Fatal(darwinShared.err)
	}
	failOnFallback(t, darwinShared.be)
	return darwinShared.be
}

func modelTestBackend(t *testing.T) *Backend { return kernelTestBackend(t) }

func TestDevice(t *testing.T) {
	b := kernelTestBackend(t)
	if b.Name() == "" {
		t.Error("the device has no name")
	}
	t.Logf("Metal device: %s", b.Name())
}
