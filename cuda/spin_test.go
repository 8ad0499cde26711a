package cuda

import (
	"errors"
	"testing"
	"time"
)

func TestSpinFor(t *testing.T) {
	for v, want := range map[string]time.Duration{"": spinDefault, "0": 0, "250": 250 * time.Microsecond, "-1": spinDefault, "x": spinDefault} {
		if got := spinFor(v, 16); got != want {
			t.Errorf("spinFor(%q, 16 processors) = %v, want %v", v, got, want)
		}
	}
	// Two processors: no polling unless asked for.
	if got := spinFor("", 2); got != 0 {
		t.Errorf("spinFor(\"\", 2 processors) = %v, want 0", got)
	}
	if got := spinFor("300", 2); got != 300*time.Microsecond {
		t.Errorf("spinFor(\"300\", 2 processors) = %v, want 300µs", got)
	}
}

// spinUntil polls until the query is done, fails, or the spin has passed;
// a spin of 0 polls nothing (the blocking wait alone).
func TestSpinUntil(t *testing.T) {
	calls := 0
	ok, err := spinUntil(time.Second, func() (bool, error) { calls++; return calls == 3, nil })
	if !ok || err != nil || calls != 3 {
		t.Errorf("done on the third poll: %v, %v after %d polls", ok, err, calls)
	}
	bad := errors.New("injected")
	calls = 0
	ok, err = spinUntil(time.Second, func() (bool, error) { calls++; return false, bad })
	if ok || err != bad || calls != 1 {
		t.Errorf("a failing query: %v, %v after %d polls, want its error at once", ok, err, calls)
	}
	t0 := time.Now()
	ok, err = spinUntil(2*time.Millisecond, func() (bool, error) { return false, nil })
	if d := time.Since(t0); ok || err != nil || d < 2*time.Millisecond || d > time.Second {
		t.Errorf("never done: %v, %v after %v, want false, nil after the 2ms spin", ok, err, d)
	}
	calls = 0
	if ok, err := spinUntil(0, func() (bool, error) { calls++; return true, nil }); ok || err != nil || calls != 0 {
		t.Errorf("no spin: %v, %v after %d polls, want no poll", ok, err, calls)
	}
}
