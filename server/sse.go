package server

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// sseWriter writes server-sent events, and a comment line whenever the
// stream has been quiet for the keep-alive interval (during a long prefill
// or a wait in the queue), so that clients and proxies keep the
// connection. Safe for concurrent use; after a failed write it drops
// everything.
type sseWriter struct {
	mu    sync.Mutex
	w     http.ResponseWriter
	rc    *http.ResponseController
	err   error
	last  time.Time
	done  chan struct{}
	close sync.Once
}

func newSSE(w http.ResponseWriter, keepAlive time.Duration) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w), last: time.Now(), done: make(chan struct{})}
	s.flush()
	go s.keepAlive(keepAlive)
	return s
}

func (s *sseWriter) keepAlive(every time.Duration) {
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.mu.Lock()
			if s.err == nil && time.Since(s.last) >= every {
				s.writeLocked([]byte(": keep-alive\n\n"))
			}
			s.mu.Unlock()
		}
	}
}

func (s *sseWriter) flush() {
	if err := s.rc.Flush(); err != nil && s.err == nil {
		s.err = err
	}
}

func (s *sseWriter) writeLocked(p []byte) {
	if s.err != nil {
		return
	}
	// A client that stops reading must not hold the model: each write
	// gets a deadline (ignored where the connection has none to set).
	s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.w.Write(p); err != nil {
		s.err = err
		return
	}
	s.flush()
	s.last = time.Now()
}

// send writes one data event holding v as JSON; it returns the error of a
// failed write (the client went away), then and later.
func (s *sseWriter) send(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeLocked(append(append([]byte("data: "), data...), '\n', '\n'))
	return s.err
}

// end writes data: [DONE] and stops the keep-alives.
func (s *sseWriter) end() {
	s.mu.Lock()
	s.writeLocked([]byte("data: [DONE]\n\n"))
	s.mu.Unlock()
	s.stop()
}

func (s *sseWriter) stop() { s.close.Do(func() { close(s.done) }) }
