package main

import (
	"errors"
	goruntime "runtime"
	"strings"
	"testing"
)

// On Linux every model-running command refuses --backend metal with exit
// code 2 and a message that says what to use instead; an unknown backend is
// refused too.
func TestBackendFlag(t *testing.T) {
	model := "../../testdata/tiny/qwen3_next-q4g64"
	for _, args := range [][]string{
		{"generate", model, "--prompt", "hi", "--max-new", "2", "--backend", "BACKEND"},
		{"chat", model, "hi", "--max-new", "2", "--backend", "BACKEND"},
		{"logits", model, "--tokens", "1,2", "--backend", "BACKEND"},
	} {
		for _, be := range []string{"metal", "tpu"} {
			if be == "metal" && goruntime.GOOS == "darwin" {
				continue
			}
			a := append([]string(nil), args...)
			a[len(a)-1] = be
			out, err := runCLI(t, a...)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 {
				t.Errorf("%s --backend %s: got %v (want exit code 2)\n%s", a[0], be, err, out)
				continue
			}
			want := "use --backend cpu"
			if be == "tpu" {
				want = "want cpu or metal"
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s --backend %s: error %q lacks %q", a[0], be, err, want)
			}
		}
	}
	// The CPU backend runs.
	if out, err := runCLI(t, "generate", model, "--prompt", "hi", "--max-new", "2", "--backend", "cpu", "--json"); err != nil {
		t.Errorf("--backend cpu: %v\n%s", err, out)
	}
}
