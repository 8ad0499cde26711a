package main

import (
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
)

func TestSelectBackend(t *testing.T) {
	b, err := selectBackend("cpu")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(runtime.CPU); !ok {
		t.Fatalf("cpu gave %T", b)
	}
	if _, err := selectBackend("gpu"); err == nil || !strings.Contains(err.Error(), "want cpu or metal") {
		t.Fatalf("unknown backend: %v", err)
	}
	if goruntime.GOOS != "darwin" {
		_, err := selectBackend("metal")
		if err == nil || !strings.Contains(err.Error(), "needs macOS with an Apple GPU; use --backend cpu") {
			t.Fatalf("metal on %s: %v", goruntime.GOOS, err)
		}
	}
}

func TestLogitsBackendFlag(t *testing.T) {
	if goruntime.GOOS == "darwin" {
		t.Skip("metal may be available here")
	}
	out, err := runLogitsCLI(t, logitsModel, "--tokens", "1,2", "--backend", "metal")
	if err == nil || !strings.Contains(err.Error(), "use --backend cpu") {
		t.Fatalf("logits --backend metal on %s: err %v, output %s", goruntime.GOOS, err, out)
	}
	if ee, ok := err.(*exitError); !ok || ee.code != 2 {
		t.Fatalf("exit error %#v, want code 2", err)
	}
	out, err = runLogitsCLI(t, logitsModel, "--backend", "cpu", "--tokens", "1,2", "--json")
	if err != nil || !strings.Contains(out, "\"greedy\"") {
		t.Fatalf("logits --backend cpu: %v\n%s", err, out)
	}
}
