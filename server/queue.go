package server

import (
	"context"
	"errors"
	"sync"
)

// errQueueFull is returned by fifo.acquire when as many requests as the
// queue holds are already waiting.
var errQueueFull = errors.New("queue full")

// fifo runs holders one at a time in arrival order; at most limit wait.
type fifo struct {
	mu      sync.Mutex
	limit   int
	busy    bool
	waiting []chan struct{} // in arrival order; closed when it is that one's turn
}

func newFIFO(limit int) *fifo { return &fifo{limit: limit} }

// ticket is a place in the queue.
type ticket struct {
	q    *fifo
	turn chan struct{} // closed when it is this ticket's turn
	once sync.Once
}

// enqueue takes a place in the queue, or fails at once with errQueueFull
// when limit requests are already waiting.
func (q *fifo) enqueue() (*ticket, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := &ticket{q: q, turn: make(chan struct{})}
	if !q.busy && len(q.waiting) == 0 {
		q.busy = true
		close(t.turn)
		return t, nil
	}
	if len(q.waiting) >= q.limit {
		return nil, errQueueFull
	}
	q.waiting = append(q.waiting, t.turn)
	return t, nil
}

// wait blocks until the ticket's turn, or until ctx ends (then the ticket
// is given up and ctx's error returned).
func (t *ticket) wait(ctx context.Context) error {
	select {
	case <-t.turn:
		return nil
	case <-ctx.Done():
		t.release()
		return ctx.Err()
	}
}

// release ends the ticket's turn, or gives up its place; it may be called
// more than once.
func (t *ticket) release() {
	t.once.Do(func() {
		q := t.q
		q.mu.Lock()
		defer q.mu.Unlock()
		for i, c := range q.waiting {
			if c == t.turn {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				return
			}
		}
		q.next() // it held the turn (or was just handed it)
	})
}

// next hands the turn to the first waiter, or marks the queue idle
// (q.mu held).
func (q *fifo) next() {
	if len(q.waiting) == 0 {
		q.busy = false
		return
	}
	c := q.waiting[0]
	q.waiting = q.waiting[1:]
	close(c)
}

// depth returns whether one runs and how many wait.
func (q *fifo) depth() (running bool, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy, len(q.waiting)
}
