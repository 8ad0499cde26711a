package cuda

import (
	"fmt"
	"time"
)

// syncPollEnv: 0 makes every wait for the device block in the driver at
// once (the A/B switch of the polled wait); a Go duration ("500us") sets
// how long a wait polls first.
const syncPollEnv = "QPACK_CUDA_SYNC_POLL"

// syncPollDefault is how long a wait for the device polls (cuStreamQuery,
// cuEventQuery) in the waiting goroutine before it blocks in the driver
// on a goroutine of its own (bounded). A decode step's wait (~0.7 ms at
// the 35B's dims on an H100) ends inside it, and the host goes on without
// the hand-over from the waiting goroutine back to the caller (a
// goroutine, a channel and a timer, and a sleeping thread woken: the
// host's time from the GPU's last op to its next submission); a longer
// wait (a prefill chunk) blocks after it, as before. The CPU spins while
// it polls, as the driver's own wait does by default (CU_CTX_SCHED_AUTO
// spins while a process has fewer contexts than cores).
const syncPollDefault = 2 * time.Millisecond

// syncPoll is the polling time that getenv's QPACK_CUDA_SYNC_POLL asks
// for: syncPollDefault when unset or not a duration, 0 for "0".
func syncPoll(getenv func(string) string) time.Duration {
	v := getenv(syncPollEnv)
	if v == "0" {
		return 0
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d
	}
	return syncPollDefault
}

// pollWait calls query until it reports done or an error, or until limit
// has passed since the first call (done false: the caller then waits in
// the driver, bounded). query is called at least once.
func pollWait(query func() (bool, error), limit time.Duration) (bool, error) {
	start := time.Now()
	for {
		if done, err := query(); done || err != nil {
			return done, err
		}
		if time.Since(start) >= limit {
			return false, nil
		}
	}
}

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
