package cuda

import (
	"fmt"
	"time"
)

// syncTimeout bounds every wait for the device (stream and event
// synchronization): a kernel that never finishes makes the wait an error
// instead of hanging the process. A forward pass's queued work takes far
// less on any GPU this package runs on.
var syncTimeout = 5 * time.Minute

// bounded runs wait, a blocking driver call, and returns its error, or an
// error once timeout has passed. The call is then left running in its
// goroutine (the device is broken; the backend returns errors from then
// on rather than a result).
func bounded(what string, timeout time.Duration, wait func() error) error {
	done := make(chan error, 1)
	go func() { done <- wait() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("cuda: %s did not finish within %v (a kernel that does not end?)", what, timeout)
	}
}
