// Package bounded holds the test helper that turns a hang into a failure.
package bounded

import (
	"testing"
	"time"
)

// Within fails tb if fn has not returned after d: a regression that blocks
// (an open(2) of a FIFO, a read that never ends) fails the test instead of
// hanging the run.
func Within(tb testing.TB, d time.Duration, what string, fn func()) {
	tb.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		tb.Fatalf("%s: blocked for %s", what, d)
	}
}
