package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type errBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func post(t *testing.T, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, data
}

// wantError checks an OpenAI-format error with this status and param.
func wantError(t *testing.T, res *http.Response, data []byte, status int, param string) errBody {
	t.Helper()
	var e errBody
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatalf("status %d, body %s: %v", res.StatusCode, data, err)
	}
	got := ""
	if e.Error.Param != nil {
		got = *e.Error.Param
	}
	if res.StatusCode != status || got != param || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("got %d param %q (%s); want %d param %q", res.StatusCode, got, data, status, param)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	return e
}

const hi = `"messages":[{"role":"user","content":"hi"}]`

func TestHTTPBadRequests(t *testing.T) {
	_, ts := newTiny(t, Config{MaxBody: 4096}, 0)
	url := ts.URL + "/v1/chat/completions"
	for _, c := range []struct {
		body, param string
	}{
		{`{"messages":[{"role":"user","content":"hi"}]`, ""}, // malformed
		{`{"model":"tiny",` + hi + `} {"x":1}`, ""},          // trailing data
		{`[]`, ""}, // not an object
		{``, ""},   // empty
		{`{` + hi + `,"temperature":"hot"}`, "temperature"},                   // wrong type
		{`{` + hi + `,"max_tokens":1.5}`, "max_tokens"},                       // wrong type
		{`{` + hi + `,"stream":"yes"}`, "stream"},                             // wrong type
		{`{"messages":"hi"}`, "messages"},                                     // wrong type
		{`{"messages":[]}`, "messages"},                                       // empty
		{`{}`, "messages"},                                                    // missing
		{`{"messages":[{"role":"robot","content":"x"}]}`, "messages[0].role"}, // bad role
		{`{"messages":[{"role":"user","content":"a"},{"role":"user","content":7}]}`, "messages[1].content"},
		{`{"messages":[{"role":"user"}]}`, "messages[0].content"},
		{`{` + hi + `,"top_p":1.5}`, "top_p"},
		{`{` + hi + `,"max_tokens":0}`, "max_tokens"},
		{`{` + hi + `,"max_completion_tokens":-3}`, "max_completion_tokens"},
		{`{` + hi + `,"presence_penalty":9}`, "presence_penalty"},
		{`{` + hi + `,"top_k":-5}`, "top_k"},
		{`{` + hi + `,"stop":5}`, "stop"},
		{`{` + hi + `,"n":3}`, "n"},
		{`{` + hi + `,"logprobs":true}`, "logprobs"},
		{`{` + hi + `,"stream_options":{"include_usage":true}}`, "stream_options"},
		{`{` + hi + `,"tool_choice":"required"}`, "tool_choice"},
		{`{` + hi + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice"},
		{`{` + hi + `,"tools":[{"type":"retrieval"}]}`, "tools[0].type"},
		{`{` + hi + `,"response_format":{"type":"json_schema"}}`, "response_format"},
		{`{` + hi + `,"max_tokens":100000}`, "max_tokens"},
	} {
		res, data := post(t, url, c.body)
		wantError(t, res, data, http.StatusBadRequest, c.param)
	}
	// Unknown fields are ignored; a system message after the first turn
	// and the developer role are fine; content may be text parts.
	res, data := post(t, url, `{"model":"tiny","unknown":{"a":[1]},"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"developer","content":"late system"}]}`)
	if res.StatusCode != 200 {
		t.Fatalf("%d %s", res.StatusCode, data)
	}
	res, data = post(t, url, `{"messages":[{"role":"user","content":"`+strings.Repeat("x", 5000)+`"}]}`)
	wantError(t, res, data, http.StatusRequestEntityTooLarge, "")
	res, data = post(t, ts.URL+"/v1/completions", `{"prompt":[1,2,99999]}`)
	wantError(t, res, data, http.StatusBadRequest, "prompt[2]")
	res, data = post(t, ts.URL+"/v1/completions", `{"prompt":"x","echo":true}`)
	wantError(t, res, data, http.StatusBadRequest, "echo")
	res, data = post(t, ts.URL+"/v1/embeddings", `{}`)
	wantError(t, res, data, http.StatusNotFound, "")
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(r.Body)
	r.Body.Close()
	wantError(t, r, data, http.StatusMethodNotAllowed, "")
}

// Without a model /health and requests answer 503; a load error is named.
func TestHTTPLoading(t *testing.T) {
	s := New(Config{ModelID: "m", Logger: quiet()})
	ts := start(t, s)
	r, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if e := wantError(t, r, data, http.StatusServiceUnavailable, ""); *e.Error.Code != "model_loading" {
		t.Fatal(string(data))
	}
	res, data := post(t, ts.URL+"/v1/chat/completions", `{`+hi+`}`)
	wantError(t, res, data, http.StatusServiceUnavailable, "")
	if res.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After on 503")
	}
	s.SetLoadError(io.ErrUnexpectedEOF)
	res, data = post(t, ts.URL+"/v1/chat/completions", `{`+hi+`}`)
	if e := wantError(t, res, data, http.StatusServiceUnavailable, ""); !strings.Contains(e.Error.Message, "unexpected EOF") {
		t.Fatal(string(data))
	}
	// The model list needs no model.
	if r, err := http.Get(ts.URL + "/v1/models"); err != nil || r.StatusCode != 200 {
		t.Fatal(r, err)
	}
}

// The key: missing, wrong, or right; /health needs none; the key is never
// in the log.
func TestHTTPAuth(t *testing.T) {
	var log strings.Builder
	lw := &lockedWriter{w: &log}
	_, ts := newTiny(t, Config{APIKey: "k-123", Logger: slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelDebug}))}, 0)
	for _, h := range [][]string{nil, {"Authorization", "Bearer nope"}, {"Authorization", "k-123"}, {"Authorization", "Bearer k-1234"},
		{"Authorization", "Basic k-123"}, {"Authorization", "Bearerk-123"}} {
		res, data := post(t, ts.URL+"/v1/chat/completions", `{`+hi+`}`, h...)
		wantError(t, res, data, http.StatusUnauthorized, "")
	}
	// The scheme's name is case-insensitive (RFC 9110 section 11.1).
	for _, key := range []string{"Bearer k-123", "bearer k-123", "BEARER  k-123"} {
		res, data := post(t, ts.URL+"/v1/chat/completions", `{"max_tokens":1,`+hi+`}`, "Authorization", key)
		if res.StatusCode != 200 {
			t.Fatalf("Authorization: %s: %d %s", key, res.StatusCode, data)
		}
	}
	if r, err := http.Get(ts.URL + "/health"); err != nil || r.StatusCode != 200 {
		t.Fatal(r, err)
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if !strings.Contains(log.String(), "status=401") {
		t.Fatalf("no request log: %s", log.String())
	}
	if strings.Contains(log.String(), "k-123") {
		t.Fatal("key logged")
	}
}

func TestHTTPCORS(t *testing.T) {
	_, plain := newTiny(t, Config{}, 0)
	_, ts := newTiny(t, Config{CORSOrigin: "http://ui.local"}, 0)
	pre := func(url string) *http.Response {
		req, _ := http.NewRequest(http.MethodOptions, url+"/v1/chat/completions", nil)
		req.Header.Set("Origin", "http://ui.local")
		req.Header.Set("Access-Control-Request-Method", "POST")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if r := pre(ts.URL); r.StatusCode != http.StatusNoContent || r.Header.Get("Access-Control-Allow-Origin") != "http://ui.local" {
		t.Fatalf("preflight: %d %v", r.StatusCode, r.Header)
	}
	if r := pre(plain.URL); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("CORS header without --cors")
	}
}

// sseEvents reads a stream's data events and comments, bounded in count.
func sseEvents(t *testing.T, body io.Reader, each func(line string) bool) {
	t.Helper()
	sc := bufio.NewScanner(body)
	for n := 0; n < 10000 && sc.Scan(); n++ {
		if line := sc.Text(); line != "" && !each(line) {
			return
		}
	}
}

// A full queue answers 429 with Retry-After; requests run in arrival
// order; a shutdown stops the running one (which answers what it has, with
// finish_reason length) and answers the waiting one 503.
func TestHTTPQueueAndShutdown(t *testing.T) {
	s, ts := newTiny(t, Config{Queue: 1}, 0)
	gate := make(chan struct{})
	var started atomic.Int32
	script(s, []string{"a", "b", "c", "d"}, func(i int) {
		if i == 1 {
			started.Add(1)
			<-gate
		}
	})
	url := ts.URL + "/v1/chat/completions"
	var wg sync.WaitGroup
	results := make([][]byte, 2)
	statuses := make([]int, 2)
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, data := post(t, url, `{"max_tokens":10,`+hi+`}`)
			statuses[k], results[k] = res.StatusCode, data
		}()
		// Wait until the first runs and the second waits.
		within(t, 10*time.Second, "queueing", func() {
			for {
				running, waiting := s.queue.depth()
				if running && waiting == k {
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	res, data := post(t, url, `{`+hi+`}`)
	wantError(t, res, data, http.StatusTooManyRequests, "")
	if res.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// The running one has its first token and waits at the gate.
	within(t, 10*time.Second, "the first token", func() {
		for started.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
	})
	s.Stop()
	close(gate)
	within(t, 10*time.Second, "shutdown", wg.Wait)
	var got struct {
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal(results[0], &got); err != nil || statuses[0] != 200 {
		t.Fatalf("running request: %d %s", statuses[0], results[0])
	}
	if got.Choices[0].FinishReason != "length" || got.Choices[0].Message.Content != "a" {
		t.Fatalf("running request after stop: %s", results[0])
	}
	if statuses[1] != http.StatusServiceUnavailable {
		t.Fatalf("waiting request: %d %s", statuses[1], results[1])
	}
	res, data = post(t, url, `{`+hi+`}`)
	wantError(t, res, data, http.StatusServiceUnavailable, "")
}

// A streaming client that goes away stops its generation within a token
// or two and frees the model for the next request.
func TestHTTPDisconnectStopsGeneration(t *testing.T) {
	s, ts := newTiny(t, Config{}, 0)
	pieces := make([]string, 100000)
	for i := range pieces {
		pieces[i] = "x"
	}
	var produced atomic.Int64
	gone := make(chan struct{})
	var atGone atomic.Int64
	script(s, pieces, func(i int) {
		produced.Add(1)
		select {
		case <-gone:
		default:
			time.Sleep(time.Millisecond)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"stream":true,"max_tokens":100000,`+hi+`}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sseEvents(t, res.Body, func(line string) bool {
		if strings.Contains(line, `"content":"x"`) {
			n++
		}
		return n < 5
	})
	atGone.Store(produced.Load())
	close(gone)
	cancel()
	res.Body.Close()
	within(t, 10*time.Second, "the generation to stop", func() {
		for {
			if running, _ := s.queue.depth(); !running {
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	if extra := produced.Load() - atGone.Load(); extra > 50 {
		t.Fatalf("%d tokens produced after the client went away", extra)
	}
	script(s, []string{"ok"}, nil)
	res2, data := post(t, ts.URL+"/v1/chat/completions", `{`+hi+`}`)
	if res2.StatusCode != 200 || !strings.Contains(string(data), `"ok"`) {
		t.Fatalf("next request: %d %s", res2.StatusCode, data)
	}
}

// During a long prefill the stream gets keep-alive comments; then role,
// content, finish_reason, [DONE], in that order; multi-byte characters are
// never split across chunks.
func TestHTTPStreamKeepAliveAndOrder(t *testing.T) {
	s, ts := newTiny(t, Config{KeepAlive: 20 * time.Millisecond}, 0)
	script(s, []string{"h", "é", "日本", "!"}, func(i int) {
		if i == 0 {
			time.Sleep(150 * time.Millisecond) // a slow prefill
		}
	})
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(`{"stream":true,`+hi+`}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var seq []string
	var text strings.Builder
	sseEvents(t, res.Body, func(line string) bool {
		switch {
		case strings.HasPrefix(line, ":"):
			if len(seq) == 0 || seq[len(seq)-1] != "ping" {
				seq = append(seq, "ping")
			}
		case line == "data: [DONE]":
			seq = append(seq, "done")
			return false
		case strings.HasPrefix(line, "data: "):
			var ch struct {
				Choices []struct {
					Delta struct {
						Role    string  `json:"role"`
						Content *string `json:"content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(line[6:]), &ch); err != nil {
				t.Fatal(err)
			}
			c := ch.Choices[0]
			switch {
			case c.Delta.Role == "assistant":
				seq = append(seq, "role")
			case c.FinishReason != nil:
				seq = append(seq, "finish:"+*c.FinishReason)
			case c.Delta.Content != nil:
				if !utf8Valid(*c.Delta.Content) {
					t.Fatalf("chunk %q splits a character", *c.Delta.Content)
				}
				text.WriteString(*c.Delta.Content)
				if seq[len(seq)-1] != "content" {
					seq = append(seq, "content")
				}
			}
		}
		return true
	})
	if got := strings.Join(seq, " "); got != "role ping content finish:stop done" {
		t.Fatalf("sequence %q", got)
	}
	if text.String() != "hé日本!" {
		t.Fatalf("text %q", text.String())
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A shutdown that comes after a request got its turn but before its
// generation could be cancelled (Stop found no cancelRun) stops that
// generation before its first token, not when context.AfterFunc's
// goroutine gets to it.
func TestStopBeforeRunStarts(t *testing.T) {
	s, _ := newTiny(t, Config{}, 0)
	script(s, []string{"a", "b", "c", "d"}, nil)
	s.Stop()
	for range 50 {
		o, stopped, err := s.run(context.Background(), &job{maxNew: 4})
		if err != nil || !stopped || o.text != "" || o.reason != "length" {
			t.Fatalf("run after Stop: %+v stopped %v err %v, want nothing generated", o, stopped, err)
		}
	}
}

// After a Stop a request never starts, even when the turn reaches it (the
// running one stopped and handed it on) before the shutdown cancels its
// wait.
func TestNoTurnAfterStop(t *testing.T) {
	s, _ := newTiny(t, Config{}, 0)
	s.Stop()
	for range 50 {
		tk, e := s.admit()
		if e != nil {
			t.Fatalf("admit: %v", e)
		}
		e = s.await(context.Background(), tk)
		tk.release()
		if e == nil || e.Status != http.StatusServiceUnavailable {
			t.Fatalf("await after Stop: %+v, want 503", e)
		}
	}
}
