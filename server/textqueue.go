package server

import (
	"fmt"
	"sync"
)

// textQueueDepth is how many pieces of text a streamed response holds
// between the decode loop and the client's writer.
const textQueueDepth = 64

// textQueue takes a streamed response's text off the decode loop: the
// runner's OnText only queues each piece, and one goroutine turns them
// into events and writes them to the client (a JSON chunk and a flushed
// write each, tens of microseconds: on a GPU's decode step of ~0.6 ms the
// GPU would otherwise idle that long between two steps). The pieces reach
// the sink in order, each once. A sink's error is kept: the next push
// returns it (the generation stops one piece later than a synchronous
// sink would stop it) and the sink is not called again; the rest of the
// queue is dropped. push waits only while the queue is full, that is
// while the writer waits on the client, each write bounded by its
// deadline (writeTimeout).
type textQueue struct {
	ch     chan string
	done   chan struct{}
	closed sync.Once
	mu     sync.Mutex
	err    error
}

// newTextQueue starts the writer, which calls sink with each piece.
func newTextQueue(sink func(string) error, depth int) *textQueue {
	q := &textQueue{ch: make(chan string, depth), done: make(chan struct{})}
	go q.write(sink)
	return q
}

func (q *textQueue) write(sink func(string) error) {
	defer close(q.done)
	for t := range q.ch {
		if q.failed() == nil {
			q.fail(q.call(sink, t))
		}
	}
}

// call runs sink on t, its panic an error (the handler's goroutine would
// have had net/http's recovery; this one has none).
func (q *textQueue) call(sink func(string) error, t string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("server: writing a streamed response panicked: %v", p)
		}
	}()
	return sink(t)
}

func (q *textQueue) fail(err error) {
	if err == nil {
		return
	}
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
}

func (q *textQueue) failed() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// push queues t for the client (the runner's OnText). It returns the
// sink's error once there is one.
func (q *textQueue) push(t string) error {
	if err := q.failed(); err != nil {
		return err
	}
	q.ch <- t
	return nil
}

// close waits until every queued piece is written (or dropped after an
// error) and returns the sink's first error; again, it returns that
// error. push must not be called after it.
func (q *textQueue) close() error {
	q.closed.Do(func() { close(q.ch) })
	<-q.done
	return q.failed()
}
