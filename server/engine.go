package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qpack-go/qpack/runtime/runner"
)

// job is one generation, ready to run.
type job struct {
	prompt []int  // every prompt token
	text   string // the prompt text (for the scripted test model)
	gen    genParams
	maxNew int
	// onText receives the text as it is produced; an error aborts.
	onText func(string) error
}

// outcome is what a generation produced.
type outcome struct {
	text       string
	reason     string // "eos", "stop", "length"
	completion int    // tokens generated
	cached     int    // prompt tokens reused from a saved state
	prefill    time.Duration
	decode     time.Duration
}

// finishReason maps the runner's stop reason to OpenAI's.
func (o *outcome) finishReason() string {
	if o.reason == "length" {
		return "length"
	}
	return "stop"
}

// limits checks the prompt against the context and returns the
// completion limit (400 when the prompt leaves no room).
func (s *Server) limits(nPrompt, asked int, param string) (int, *APIError) {
	limit := s.cfg.Context
	if mp := s.r.Model.Config.MaxPositions; limit <= 0 || (mp > 0 && limit > mp) {
		limit = mp
	}
	if limit <= 0 {
		limit = 1 << 30
	}
	if nPrompt >= limit {
		e := badRequest(param, "the prompt is %d tokens, and the context holds %d: shorten it", nPrompt, limit)
		e.Code = "context_length_exceeded"
		return 0, e
	}
	if asked > 0 {
		if nPrompt+asked > limit {
			e := badRequest("max_tokens", "the prompt (%d tokens) plus max_tokens (%d) is more than the context of %d tokens", nPrompt, asked, limit)
			e.Code = "context_length_exceeded"
			return 0, e
		}
		return asked, nil
	}
	return min(s.cfg.MaxTokens, limit-nPrompt), nil
}

// admit takes a place in the queue (429 when it is full).
func (s *Server) admit() (*ticket, *APIError) {
	t, err := s.queue.enqueue()
	if errors.Is(err, errQueueFull) {
		_, waiting := s.queue.depth()
		return nil, queueFull(waiting, 1+int(s.cfg.KeepAlive/time.Second))
	}
	return t, nil
}

// await waits for the ticket's turn, bounded by QueueWait, the client and
// a shutdown.
func (s *Server) await(ctx context.Context, t *ticket) *APIError {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueueWait)
	defer cancel()
	stop := context.AfterFunc(s.stopCtx, cancel)
	defer stop()
	err := t.wait(ctx)
	switch {
	case err == nil && !s.stopping.Load():
		return nil
	case s.stopping.Load():
		// Also when the turn came with the shutdown (the running one
		// stopped and handed it on): a waiting request never starts then.
		return unavailable("shutting_down", "the server is shutting down")
	case errors.Is(err, context.DeadlineExceeded):
		e := queueFull(0, 1+int(s.cfg.KeepAlive/time.Second))
		e.Code, e.Message = "queue_timeout", fmt.Sprintf("the request waited %v in the queue; retry later", s.cfg.QueueWait)
		return e
	}
	return &APIError{Status: 499, Type: "invalid_request_error", Message: "the client went away"}
}

// run runs j with the model while holding the queue's turn. A shutdown
// stops it at the next token; it then returns what it has.
func (s *Server) run(ctx context.Context, j *job) (*outcome, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.stopCtx, cancel)
	defer stop()
	s.runMu.Lock()
	s.cancelRun = cancel
	s.runMu.Unlock()
	if s.stopping.Load() {
		// A Stop between the queue's turn and cancelRun: stop now, not
		// when AfterFunc's goroutine gets to it (the generation could
		// have run to its end by then).
		cancel()
	}
	defer func() {
		s.runMu.Lock()
		s.cancelRun = nil
		s.runMu.Unlock()
	}()
	var got []byte
	inner := j.onText
	j.onText = func(t string) error {
		got = append(got, t...)
		if inner != nil {
			return inner(t)
		}
		return nil
	}
	var n int
	o, err := s.gen(withTokenCounter(ctx, &n), j)
	if err != nil && s.stopCtx.Err() != nil && errors.Is(err, context.Canceled) {
		return &outcome{text: string(got), reason: "length", completion: n}, true, nil
	}
	return o, false, err
}

type counterKey struct{}

func withTokenCounter(ctx context.Context, n *int) context.Context {
	return context.WithValue(ctx, counterKey{}, n)
}

func countToken(ctx context.Context) {
	if n, ok := ctx.Value(counterKey{}).(*int); ok {
		*n++
	}
}

// generate runs j on the model: it resumes from the longest saved state
// that begins the prompt and samples the completion.
func (s *Server) generate(ctx context.Context, j *job) (*outcome, error) {
	start := time.Now()
	cached, rest, err := s.sess.Resume(ctx, j.prompt, s.prefix)
	if err != nil {
		return nil, err
	}
	// Resume prefills the prompt up to its save point: that is prefill
	// time too, not only Generate's tail.
	resumed := time.Since(start)
	res, err := s.sess.Generate(ctx, rest, runner.GenOptions{
		MaxNew: j.maxNew, Sample: j.gen.sample, Stop: j.gen.stop, OnText: j.onText,
		OnSampled: func(int) { countToken(ctx) }, // not OnToken: the device may select the top of the logits
	})
	if err != nil {
		return nil, err
	}
	return &outcome{text: res.Text, reason: res.StopReason, completion: len(res.Tokens), cached: cached,
		prefill: resumed + res.Prefill, decode: res.Decode}, nil
}
