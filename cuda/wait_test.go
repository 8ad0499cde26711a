package cuda

import (
	"testing"
	"time"
)

func TestPollFor(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
	}{
		{"", defaultPoll}, {"0", 0}, {"0s", 0}, {"500us", 500 * time.Microsecond}, {"1s", time.Second},
		{"2s", defaultPoll}, {"-1ms", defaultPoll}, {"fast", defaultPoll}, {"5", defaultPoll},
	} {
		got := pollFor(func(k string) string {
			if k != pollEnv {
				t.Fatalf("read %s", k)
			}
			return c.v
		})
		if got != c.want {
			t.Errorf("%s=%q: %v, want %v", pollEnv, c.v, got, c.want)
		}
	}
}
