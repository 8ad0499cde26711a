package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qpack-go/qpack/runtime/runner"
)

// fakeTurns stands in for the model: the turn "slow" runs until its
// context is cancelled, "long" is refused as too long for the context,
// others answer at once.
type fakeTurns struct {
	mu      sync.Mutex
	calls   []string
	resets  int
	started chan string
}

func (f *fakeTurns) turn(ctx context.Context, user string) (*runReport, error) {
	f.mu.Lock()
	f.calls = append(f.calls, user)
	f.mu.Unlock()
	f.started <- user
	switch user {
	case "slow":
		<-ctx.Done()
		return &runReport{GeneratedTokens: 3, StopReason: runner.StopInterrupted}, fmt.Errorf("chat turn: %w", ctx.Err())
	case "long":
		return nil, fmt.Errorf("chat turn: %w: too long", runner.ErrContextLimit)
	}
	return &runReport{GeneratedTokens: 1, StopReason: "eos"}, nil
}

// waitCount waits until buf holds n copies of s.
func waitCount(t *testing.T, buf *syncBuffer, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(buf.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d %q within 10s:\n%s", n, s, buf.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type loopRun struct {
	in   *io.PipeWriter
	sigs chan os.Signal
	f    *fakeTurns
	out  *syncBuffer
	done chan error
}

func startLoop(interactive bool) *loopRun {
	pr, pw := io.Pipe()
	lr := &loopRun{in: pw, sigs: make(chan os.Signal, 1), f: &fakeTurns{started: make(chan string, 8)}, out: &syncBuffer{}, done: make(chan error, 1)}
	cl := &chatLoop{in: pr, out: lr.out, errw: lr.out, interactive: interactive, sigs: lr.sigs, base: context.Background(),
		turn: lr.f.turn, reset: func() { lr.f.resets++ }, stateTokens: func() int { return 0 }}
	go func() { lr.done <- cl.run() }()
	return lr
}

func (lr *loopRun) started(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-lr.f.started:
		if got != want {
			t.Fatalf("turn %q started, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("turn %q did not start; output:\n%s", want, lr.out.String())
	}
}

func (lr *loopRun) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-lr.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("the loop did not end; output:\n%s", lr.out.String())
		return nil
	}
}

// Interactive: an interrupt stops the reply and the conversation goes on;
// a refused turn is reported and the conversation goes on; one interrupt
// at the prompt warns, a second in a row ends with context.Canceled.
func TestChatLoopInteractive(t *testing.T) {
	lr := startLoop(true)
	io.WriteString(lr.in, "hello\n")
	lr.started(t, "hello")
	io.WriteString(lr.in, "slow\n")
	lr.started(t, "slow")
	lr.sigs <- os.Interrupt
	io.WriteString(lr.in, "long\n")
	lr.started(t, "long")
	io.WriteString(lr.in, "/reset\n\n   \n")
	io.WriteString(lr.in, "after\n")
	lr.started(t, "after")
	// The prompts: the first, and one after each of the 4 turns and
	// the 3 skipped or /reset lines.
	waitCount(t, lr.out, ">> ", 8)
	lr.sigs <- os.Interrupt
	waitFor(t, lr.out, 0, "[Ctrl-C again", 10*time.Second)
	io.WriteString(lr.in, "again\n") // a turn between resets the count
	lr.started(t, "again")
	waitCount(t, lr.out, ">> ", 10)
	lr.sigs <- os.Interrupt
	lr.sigs <- os.Interrupt
	if err := lr.result(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("two interrupts at the prompt: %v, want context.Canceled", err)
	}
	out := lr.out.String()
	if !slices.Equal(lr.f.calls, []string{"hello", "slow", "long", "after", "again"}) || lr.f.resets != 1 {
		t.Errorf("turns %q, %d resets", lr.f.calls, lr.f.resets)
	}
	for _, s := range []string{"stopped by an interrupt", "qpack: chat turn: context limit: too long", "[new conversation]"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

// Not interactive: an interrupt during a reply ends the conversation
// (context.Canceled) after that reply's summary; /exit ends it cleanly;
// a refused turn ends it with its error.
func TestChatLoopPiped(t *testing.T) {
	lr := startLoop(false)
	io.WriteString(lr.in, "slow\n")
	lr.started(t, "slow")
	lr.sigs <- syscall.SIGINT
	if err := lr.result(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted reply: %v", err)
	}
	if out := lr.out.String(); !strings.Contains(out, "> slow\n") || !strings.Contains(out, "stopped by an interrupt") {
		t.Errorf("output:\n%s", out)
	}

	lr = startLoop(false)
	io.WriteString(lr.in, "hello\n/exit\nnever\n")
	lr.started(t, "hello")
	if err := lr.result(t); err != nil {
		t.Fatalf("/exit: %v", err)
	}
	lr = startLoop(false)
	io.WriteString(lr.in, "long\n")
	lr.started(t, "long")
	if err := lr.result(t); !errors.Is(err, runner.ErrContextLimit) {
		t.Fatalf("refused turn: %v", err)
	}
	// A line longer than the bound: exit 2.
	lr = startLoop(false)
	go func() { io.Copy(lr.in, io.LimitReader(zeros{}, maxTurnLine+10)); lr.in.Close() }()
	err := lr.result(t)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("over-long line: %v", err)
	}
}
