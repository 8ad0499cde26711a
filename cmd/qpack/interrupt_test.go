package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// qpackBinary builds the command once per test run.
func qpackBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the qpack binary")
	}
	if goruntime.GOOS == "windows" {
		t.Skip("sends SIGINT to a child process")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "qpack-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "qpack")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = errors.New(string(out))
		}
	})
	if binErr != nil {
		t.Fatalf("building qpack: %v", binErr)
	}
	return binPath
}

// endlessModel is the tiny checkpoint without EOS ids and with a context
// long enough that a generation runs until it is interrupted.
func endlessModel(t *testing.T) string {
	return copyModel(t, func(dir string) {
		editJSON(t, dir, "generation_config.json", func(m map[string]any) { delete(m, "eos_token_id") })
		editJSON(t, dir, "config.json", func(m map[string]any) {
			delete(m, "eos_token_id")
			m["max_position_embeddings"] = 1 << 22
		})
	})
}

// syncBuffer is a bytes.Buffer safe for one writer and polling readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls until buf holds want (after from bytes), or fails after
// the deadline.
func waitFor(t *testing.T, buf *syncBuffer, from int, want string, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		s := buf.String()
		if i := strings.Index(s[min(from, len(s)):], want); i >= 0 {
			return from + i + len(want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %q within %v; output so far:\n%s", want, d, buf.String())
	return 0
}

// waitMore waits until buf holds more than n bytes.
func waitMore(t *testing.T, buf *syncBuffer, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(buf.String()) <= n {
		if time.Now().After(deadline) {
			t.Fatalf("no output past byte %d within %v:\n%s", n, d, buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitExit waits for the child (killing it after d) and returns its exit
// code.
func waitExit(t *testing.T, cmd *exec.Cmd, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not exit within %v", cmd.Args, d)
		return -1
	}
}

// Ctrl-C (SIGINT) during generate stops the reply: the summary so far on
// stderr (tokens and tok/s), exit 130, and no "context canceled".
func TestGenerateSIGINT(t *testing.T) {
	bin := qpackBinary(t)
	model := endlessModel(t)
	for _, jsonMode := range []bool{false, true} {
		args := []string{"generate", model, "--prompt", "Hello there", "-m", "1000000"}
		if jsonMode {
			args = append(args, "--json")
		}
		cmd := exec.Command(bin, args...)
		var stdout, stderr syncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if jsonMode {
			time.Sleep(time.Second) // nothing streams: give it time to start generating
		} else {
			waitMore(t, &stdout, 0, 30*time.Second) // text is streaming
		}
		cmd.Process.Signal(syscall.SIGINT)
		code := waitExit(t, cmd, 60*time.Second)
		errs := stderr.String()
		if code != 130 || strings.Contains(errs, "context canceled") || !strings.Contains(errs, "qpack: interrupted") {
			t.Fatalf("json %v: exit %d, stderr:\n%s", jsonMode, code, errs)
		}
		if jsonMode {
			var rep genOut
			if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
				t.Fatalf("bad JSON %v:\n%s", err, stdout.String())
			}
			if rep.StopReason != "interrupted" || rep.GeneratedTokens == 0 || rep.GeneratedTokens != len(rep.Tokens) || rep.DecodeTokPerSec <= 0 {
				t.Errorf("interrupted JSON report: %d tokens, %s, %g tok/s", rep.GeneratedTokens, rep.StopReason, rep.DecodeTokPerSec)
			}
			continue
		}
		if !strings.Contains(errs, "stopped by an interrupt") || !strings.Contains(errs, "tok/s") || strings.Contains(errs, "decode: 0 tokens") {
			t.Errorf("no partial summary:\n%s", errs)
		}
	}
}

// chat with turns on a pipe: Ctrl-C stops the reply, prints its summary
// and exits 130.
func TestChatSIGINT(t *testing.T) {
	bin := qpackBinary(t)
	model := endlessModel(t)
	cmd := exec.Command(bin, "chat", model, "-m", "1000000")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, "hello\n")
	n := waitFor(t, &stdout, 0, "> hello\n", 30*time.Second)
	waitMore(t, &stdout, n, 30*time.Second) // the reply is streaming
	cmd.Process.Signal(syscall.SIGINT)
	code := waitExit(t, cmd, 60*time.Second)
	stdin.Close()
	errs := stderr.String()
	if code != 130 || strings.Contains(errs, "context canceled") || !strings.Contains(errs, "stopped by an interrupt") || !strings.Contains(errs, "[turn 1: ") {
		t.Fatalf("exit %d, stderr:\n%s", code, errs)
	}
}

// Ctrl-C while generate waits for the prompt on standard input ends the
// wait: exit 130, nothing generated.
func TestGenerateSIGINTWhileReadingPrompt(t *testing.T) {
	bin := qpackBinary(t)
	cmd := exec.Command(bin, "generate", genModel, "--prompt", "-")
	stdin, err := cmd.StdinPipe() // left open: the prompt never ends
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	cmd.Process.Signal(syscall.SIGINT)
	if code := waitExit(t, cmd, 30*time.Second); code != 130 || stdout.String() != "" || !strings.Contains(stderr.String(), "interrupted while reading the prompt") {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, stdout.String(), stderr.String())
	}
}

// chat with TURN arguments: Ctrl-C stops the reply, its summary follows,
// the later turns do not run, exit 130; --json still prints the turns so
// far.
func TestChatArgsSIGINT(t *testing.T) {
	bin := qpackBinary(t)
	model := endlessModel(t)
	for _, jsonMode := range []bool{false, true} {
		args := []string{"chat", model, "first", "second", "-m", "1000000"}
		if jsonMode {
			args = append(args, "--json")
		}
		cmd := exec.Command(bin, args...)
		var stdout, stderr syncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if jsonMode {
			time.Sleep(time.Second)
		} else {
			n := waitFor(t, &stdout, 0, "> first\n", 30*time.Second)
			waitMore(t, &stdout, n, 30*time.Second)
		}
		cmd.Process.Signal(syscall.SIGINT)
		code := waitExit(t, cmd, 60*time.Second)
		out, errs := stdout.String(), stderr.String()
		if code != 130 || strings.Contains(errs, "context canceled") || strings.Contains(out, "> second") {
			t.Fatalf("json %v: exit %d, stdout:\n%s\nstderr:\n%s", jsonMode, code, out, errs)
		}
		if jsonMode {
			var got chatOut
			if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Turns) != 1 || got.Turns[0].StopReason != "interrupted" || got.Turns[0].GeneratedTokens == 0 {
				t.Errorf("JSON after the interrupt (%v):\n%s", err, out)
			}
		} else if !strings.Contains(errs, "[turn 1: ") || !strings.Contains(errs, "stopped by an interrupt") {
			t.Errorf("no summary of the interrupted turn:\n%s", errs)
		}
	}
}
