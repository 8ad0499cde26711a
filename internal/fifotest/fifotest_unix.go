//go:build unix

package fifotest

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/qpack-go/qpack/internal/regfile"
)

// Timeout is how long Refused waits for the loader.
const Timeout = 10 * time.Second

// Make creates a FIFO at path.
func Make(t testing.TB, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo %s: %v", path, err)
	}
}

// Refused runs load, which must read the FIFO at fifo, and fails the test
// unless load returns within Timeout with an error saying the path is not a
// regular file (a *regfile.NotRegularError in its chain). A load that
// blocks is unblocked by opening the FIFO for writing, so the test fails
// rather than hangs.
func Refused(t testing.TB, fifo string, load func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- load() }()
	select {
	case err := <-done:
		var nr *regfile.NotRegularError
		if err == nil || !errors.As(err, &nr) {
			t.Errorf("%s: got %v, want a not-a-regular-file error", fifo, err)
		}
	case <-time.After(Timeout):
		t.Errorf("%s: the loader blocked on the FIFO for %v", fifo, Timeout)
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		select {
		case <-done:
		case <-time.After(Timeout):
		}
	}
}
