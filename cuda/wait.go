package cuda

import (
	"fmt"
	"log/slog"
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

// A wait for the compute stream (a download's) first polls it on the
// calling goroutine (cuStreamQuery, about a microsecond a call) for up to
// pollEnv's duration, then blocks through bounded. A decode step waits for
// its logits a few hundred microseconds; bounded's goroutine, timer and
// channel hand the result back later than the poll sees it, and the GPU
// is idle until the host has sampled and queued the next step. Polling
// spins one core, as the driver's own wait does with one context on a
// machine of several cores (CU_CTX_SCHED_AUTO spins then).
const (
	pollEnv     = "QPACK_CUDA_SYNC_POLL" // a Go duration; 0 turns polling off
	defaultPoll = 2 * time.Millisecond
)

// pollFor reads pollEnv (unset or invalid: defaultPoll, the latter logged).
func pollFor(getenv func(string) string) time.Duration {
	v := getenv(pollEnv)
	if v == "" {
		return defaultPoll
	}
	if v == "0" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > time.Second {
		slog.Warn("cuda: ignoring "+pollEnv+" (want a duration from 0 to 1s, such as 500us)", "value", v)
		return defaultPoll
	}
	return d
}
