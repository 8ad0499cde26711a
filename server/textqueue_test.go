package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// waitDone fails the test if done is not closed within a generous bound
// (a deadlock guard, not a timing assertion).
func waitDone(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still blocked after 30 s", what)
	}
}

// Every piece reaches the sink once, in order, with a sink slower than
// the pushes (the queue fills and push waits).
func TestTextQueueOrder(t *testing.T) {
	var got []string
	q := newTextQueue(func(s string) error {
		if len(got)%7 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		got = append(got, s)
		return nil
	}, 4)
	var want []string
	for i := range 300 {
		p := fmt.Sprintf("<%d>", i)
		want = append(want, p)
		if err := q.push(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.close(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("the sink got %d pieces %q..., want %d in order", len(got), got[:min(len(got), 5)], len(want))
	}
}

// push does not wait for the sink while the queue has room: the decode
// loop goes on while the client's write is pending.
func TestTextQueueDoesNotWaitForTheSink(t *testing.T) {
	release := make(chan struct{})
	var got []string
	q := newTextQueue(func(s string) error {
		<-release
		got = append(got, s)
		return nil
	}, 8)
	pushed := make(chan struct{})
	go func() {
		defer close(pushed)
		for i := range 9 { // one in the writer's hands, eight queued
			if err := q.push(fmt.Sprint(i)); err != nil {
				t.Error(err)
			}
		}
	}()
	waitDone(t, "9 pushes with the sink blocked and a queue of 8", pushed)
	close(release)
	if err := q.close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 9 {
		t.Fatalf("the sink got %d pieces, want 9", len(got))
	}
}

// A sink's error comes back from a later push and from close; the sink is
// never called again, and neither push nor close blocks behind the
// dropped pieces.
func TestTextQueueError(t *testing.T) {
	gone := errors.New("client gone")
	calls := 0
	q := newTextQueue(func(s string) error {
		calls++
		if calls > 5 {
			t.Errorf("the sink called again (piece %q) after its error", s)
		}
		if calls == 5 {
			return gone
		}
		return nil
	}, 4)
	done := make(chan struct{})
	var pushErr error
	go func() {
		defer close(done)
		for i := range 10000 {
			if pushErr = q.push(fmt.Sprint(i)); pushErr != nil {
				return
			}
		}
	}()
	waitDone(t, "pushes after the sink's error", done)
	if !errors.Is(pushErr, gone) {
		t.Fatalf("push returned %v, want the sink's error", pushErr)
	}
	for range 2 { // closing again gives the same
		if err := q.close(); !errors.Is(err, gone) {
			t.Fatalf("close returned %v, want the sink's error", err)
		}
	}
}

// A sink that panics stops the stream with an error instead of the
// process (the writer's goroutine has no net/http recovery).
func TestTextQueuePanic(t *testing.T) {
	q := newTextQueue(func(s string) error {
		if s == "b" {
			panic("parser bug")
		}
		return nil
	}, 2)
	for _, p := range []string{"a", "b"} {
		if err := q.push(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.close(); err == nil || !strings.Contains(err.Error(), "parser bug") {
		t.Fatalf("close returned %v, want the panic as an error", err)
	}
}
