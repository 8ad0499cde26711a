package cuda

import (
	"errors"
	"testing"
	"time"
)

// pollWait stops at the first done or error, and gives up (not done, no
// error) once its limit has passed, having asked at least once.
func TestPollWait(t *testing.T) {
	calls := 0
	done, err := pollWait(func() (bool, error) { calls++; return calls == 3, nil }, time.Minute)
	if !done || err != nil || calls != 3 {
		t.Errorf("done on the third query: done %v, err %v after %d queries", done, err, calls)
	}
	boom := errors.New("boom")
	calls = 0
	done, err = pollWait(func() (bool, error) { calls++; return true, boom }, time.Minute)
	if !errors.Is(err, boom) || calls != 1 {
		t.Errorf("an error: done %v, err %v after %d queries", done, err, calls)
	}
	calls = 0
	start := time.Now()
	done, err = pollWait(func() (bool, error) { calls++; return false, nil }, 2*time.Millisecond)
	if done || err != nil || calls < 1 || time.Since(start) < 2*time.Millisecond {
		t.Errorf("never done: done %v, err %v after %d queries in %v", done, err, calls, time.Since(start))
	}
	calls = 0
	if done, _ := pollWait(func() (bool, error) { calls++; return true, nil }, 0); !done || calls != 1 {
		t.Errorf("a zero limit still asks once: done %v after %d queries", done, calls)
	}
}

func TestSyncPoll(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"": syncPollDefault, "0": 0, "500us": 500 * time.Microsecond, "5ms": 5 * time.Millisecond,
		"fast": syncPollDefault, "-1ms": syncPollDefault,
	} {
		if got := syncPoll(func(k string) string {
			if k != syncPollEnv {
				t.Errorf("syncPoll read %s", k)
			}
			return v
		}); got != want {
			t.Errorf("%s=%q: %v, want %v", syncPollEnv, v, got, want)
		}
	}
}
