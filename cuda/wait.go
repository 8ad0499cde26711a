package cuda

import (
	"fmt"
	"strconv"
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

// A wait first polls: the device's query (cuStreamQuery, cuEventQuery) in
// the calling goroutine for up to spinFor, and only then blocks in
// bounded's goroutine. A blocking wait costs a goroutine, a timer and a
// wake-up on top of the driver's own wait: on the H100 machine an
// EndPass's wait for streams that were already idle took 14 µs, a decode
// step's every one (twentieth session's timeline). A decode step's wait
// for its selection is ~0.5 ms, so the poll ends it as soon as the GPU
// does; a longer one (a prefill chunk) blocks after spinFor. With fewer
// than spinMinProcs Go processors a wait blocks at once, as before.

// spinEnv sets spinFor in microseconds (0: no polling, the blocking wait
// alone).
const spinEnv = "QPACK_CUDA_SPIN_US"

// spinDefault is spinFor's default.
const spinDefault = 2 * time.Millisecond

// spinMinProcs is the fewest Go processors (GOMAXPROCS) with which a wait
// polls by default: the poll holds one while it lasts, and on a machine of
// two or three cores the goroutines reading experts from disk for the next
// layers need them more than the wait needs the microseconds.
const spinMinProcs = 4

// spinFor parses spinEnv's value: a count of microseconds, else the
// default (none below spinMinProcs processors, procs being GOMAXPROCS).
func spinFor(v string, procs int) time.Duration {
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Microsecond
	}
	if procs < spinMinProcs {
		return 0
	}
	return spinDefault
}

// spinUntil calls ready until it reports true or an error, or spin has
// passed (false, nil: the caller then waits blocking).
func spinUntil(spin time.Duration, ready func() (bool, error)) (bool, error) {
	if spin <= 0 {
		return false, nil
	}
	deadline := time.Now().Add(spin)
	for {
		ok, err := ready()
		if ok || err != nil {
			return ok, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
	}
}
