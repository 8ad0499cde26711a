package server

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

func turnTaken(t *ticket) bool {
	select {
	case <-t.turn:
		return true
	default:
		return false
	}
}

// Turns go in arrival order; a waiter that gives up leaves the line; a
// full line refuses at once.
func TestFIFOOrder(t *testing.T) {
	q := newFIFO(2)
	a, _ := q.enqueue()
	b, _ := q.enqueue()
	c, _ := q.enqueue()
	if _, err := q.enqueue(); !errors.Is(err, errQueueFull) {
		t.Fatalf("third waiter: %v", err)
	}
	if !turnTaken(a) || turnTaken(b) || turnTaken(c) {
		t.Fatal("only the first should run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	a.release()
	a.release() // twice is harmless
	if turnTaken(b) || !turnTaken(c) {
		t.Fatal("the turn should skip the waiter that gave up")
	}
	if err := c.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.release()
	if running, waiting := q.depth(); running || waiting != 0 {
		t.Fatalf("after all: running %v, waiting %d", running, waiting)
	}
	d, _ := q.enqueue()
	if !turnTaken(d) {
		t.Fatal("an idle queue should give the turn at once")
	}
}

// A request that waits longer than QueueWait is answered 429 queue_timeout.
func TestHTTPQueueWait(t *testing.T) {
	s, ts := newTiny(t, Config{QueueWait: 50 * time.Millisecond}, 0)
	gate := make(chan struct{})
	script(s, []string{"a", "b"}, func(i int) {
		if i == 0 {
			<-gate
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(t, ts.URL+"/v1/chat/completions", `{`+hi+`}`)
	}()
	within(t, 10*time.Second, "the first request to run", func() {
		for {
			if running, _ := s.queue.depth(); running {
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	res, data := post(t, ts.URL+"/v1/chat/completions", `{`+hi+`}`)
	if e := wantError(t, res, data, http.StatusTooManyRequests, ""); *e.Error.Code != "queue_timeout" {
		t.Fatal(string(data))
	}
	close(gate)
	within(t, 10*time.Second, "the first request", func() { <-done })
}
