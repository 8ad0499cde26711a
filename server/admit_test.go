package server

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// A request takes its place in the queue before its prompt is rendered and
// tokenized, so that no more requests than the queue holds tokenize at once
// (a 16 MiB prompt costs seconds of CPU). Seen from outside: with the queue
// full, a prompt too long for the context, which only tokenizing shows, is
// answered 429, not 400 context_length_exceeded, on both endpoints.
func TestHTTPAdmitBeforeTokenizing(t *testing.T) {
	s, ts := newTiny(t, Config{Queue: 1, Context: 64}, 0)
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the server's close: a failure must not hang
	script(s, []string{"a", "b"}, func(i int) {
		if i == 1 {
			<-gate
		}
	})
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":2,`+hi+`}`)
		}()
		within(t, 10*time.Second, "queueing", func() {
			for {
				if running, waiting := s.queue.depth(); running && waiting == k {
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	long := strings.Repeat("hello ", 200)
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`},
		{"/v1/completions", `{"prompt":"` + long + `"}`},
	} {
		res, data := post(t, ts.URL+c.path, c.body)
		wantError(t, res, data, http.StatusTooManyRequests, "")
	}
	release()
	within(t, 10*time.Second, "the queued requests", wg.Wait)
	// With the queue free, the same prompt is refused for its length.
	res, data := post(t, ts.URL+"/v1/completions", `{"prompt":"`+long+`"}`)
	wantError(t, res, data, http.StatusBadRequest, "prompt")
	if !strings.Contains(string(data), "context_length_exceeded") {
		t.Fatalf("%s", data)
	}
}
