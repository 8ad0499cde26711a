package main

import (
	"encoding/json"
	"errors"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/cuda"
	"github.com/qpack-go/qpack/metal"
)

// gpuOpens reports whether the named GPU backend opens on this machine
// (the CLI tests of the no-device path skip where it does).
func gpuOpens(t *testing.T, name string) bool {
	t.Helper()
	b, _, err := gpuOpeners[name]()
	if err != nil {
		if !errors.Is(err, cuda.ErrNoDevice) && !errors.Is(err, metal.ErrUnsupported) {
			t.Logf("%s: %v", name, err)
		}
		return false
	}
	closeBackend(b)
	return true
}

// Every model-running command refuses a GPU backend that is not there with
// exit code 2 and a one-line message that says what to use instead, and an
// unknown backend with the list of choices, before loading anything.
func TestBackendFlag(t *testing.T) {
	model := "../../testdata/tiny/qwen3_next-q4g64"
	cmds := [][]string{
		{"generate", model, "--prompt", "hi", "--max-new", "2", "--backend", "BACKEND"},
		{"generate", "--backend", "BACKEND", model, "--prompt", "hi", "--max-new", "2"},
		{"chat", model, "hi", "--max-new", "2", "--backend", "BACKEND"},
		{"logits", model, "--tokens", "1,2", "--backend", "BACKEND"},
		{"logits", "--backend", "BACKEND", model, "--tokens", "1,2"},
		{"serve", model, "--port", "0", "--backend", "BACKEND"},
	}
	missing := map[string]bool{"tpu": true}
	for _, gpu := range []string{"metal", "cuda"} {
		missing[gpu] = !gpuOpens(t, gpu)
	}
	for _, args := range cmds {
		for _, be := range []string{"metal", "cuda", "tpu"} {
			if !missing[be] {
				continue
			}
			a := append([]string(nil), args...)
			for i := range a {
				if a[i] == "BACKEND" {
					a[i] = be
				}
			}
			stdout, stderr, code := runMain(t, a...)
			if code != exitUsage {
				t.Errorf("%s --backend %s: exit %d (want 2)\n%s%s", a[0], be, code, stdout, stderr)
				continue
			}
			want := "use --backend cpu"
			if be == "tpu" {
				want = "want cpu, metal, cuda or auto"
			}
			if !strings.Contains(stderr, "--backend") || !strings.Contains(stderr, want) {
				t.Errorf("%s --backend %s: stderr %q lacks %q", a[0], be, stderr, want)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
				t.Errorf("%s --backend %s: %d lines on stderr, want one:\n%s", a[0], be, n+1, stderr)
			}
			if stdout != "" {
				t.Errorf("%s --backend %s: stdout %q", a[0], be, stdout)
			}
		}
	}
}

// --backend auto without a GPU runs on the CPU and says so in --json, in
// the summary and in the log; --backend cpu says cpu.
func TestBackendAutoFallsBack(t *testing.T) {
	gpu := autoOrder(goruntime.GOOS)
	if gpu != "" && gpuOpens(t, gpu) {
		t.Skipf("%s opens here: auto picks it", gpu)
	}
	model := "../../testdata/tiny/qwen3_next-q4g64"
	type withBackend struct {
		Backend *backendInfo `json:"backend"`
		Turns   []struct {
			Backend *backendInfo `json:"backend"`
		} `json:"turns"`
	}
	for _, be := range []string{"auto", "cpu"} {
		for _, args := range [][]string{
			{"generate", model, "--prompt", "hi", "--max-new", "2", "--json", "--backend", be},
			{"chat", model, "hi", "--max-new", "2", "--json", "--backend", be},
			{"logits", model, "--tokens", "1,2", "--json", "--backend", be},
		} {
			stdout, stderr, code := runMain(t, args...)
			if code != 0 {
				t.Errorf("%s --backend %s: exit %d\n%s", args[0], be, code, stderr)
				continue
			}
			var got withBackend
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Errorf("%s --backend %s: %v\n%s", args[0], be, err, stdout)
				continue
			}
			info := got.Backend
			if args[0] == "chat" && len(got.Turns) > 0 {
				info = got.Turns[0].Backend
			}
			if info == nil || info.Name != "cpu" {
				t.Errorf("%s --backend %s: JSON backend %+v, want cpu\n%s", args[0], be, info, stdout)
			}
			if be == "auto" && !strings.Contains(stderr, `msg="backend auto: cpu"`) {
				t.Errorf("%s --backend auto: the log does not say cpu was picked:\n%s", args[0], stderr)
			}
		}
	}
	_, stderr, code := runMain(t, "generate", model, "--prompt", "hi", "--max-new", "2", "--backend", "auto")
	if code != 0 || !strings.Contains(stderr, "\nbackend: cpu\n") {
		t.Errorf("generate --backend auto: exit %d, the summary does not say cpu:\n%s", code, stderr)
	}
	_, stderr, code = runMain(t, "logits", model, "--tokens", "1,2", "--backend", "auto")
	if code != 0 || !strings.Contains(stderr, "backend: cpu\n") {
		t.Errorf("logits --backend auto: exit %d, stderr does not say cpu:\n%s", code, stderr)
	}
}

// The help of every model-running command lists the choices once.
func TestBackendHelp(t *testing.T) {
	for _, cmd := range []string{"generate", "chat", "logits", "serve"} {
		stdout, stderr, code := runMain(t, cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d\n%s", cmd, code, stderr)
		}
		if n := strings.Count(stdout, backendChoices); n != 1 {
			t.Errorf("%s --help lists %q %d times:\n%s", cmd, backendChoices, n, stdout)
		}
		for _, be := range []string{"cuda: NVIDIA GPU", "auto: metal on macOS or cuda on Linux"} {
			if !strings.Contains(stdout, be) {
				t.Errorf("%s --help lacks %q", cmd, be)
			}
		}
	}
}
