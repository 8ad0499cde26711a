package server

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/qpack-go/qpack/runtime/chattmpl"
	"github.com/qpack-go/qpack/runtime/runner"
	"github.com/qpack-go/qpack/runtime/sample"
)

const tinyModel = "qwen3_next-q4g64"

func openTiny(t testing.TB, chunk int) *runner.Runner {
	t.Helper()
	r, err := runner.Open(filepath.Join("..", "testdata", "tiny", tinyModel), runner.Options{PrefillChunk: chunk, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// useQwen3Template gives the server's model the real Qwen3 chat template
// (the tiny model's own renders no tools).
func useQwen3Template(t testing.TB, s *Server) {
	t.Helper()
	p := filepath.Join("..", "runtime", "chattmpl", "testdata", "chat_template.Qwen3-0.6B.jinja")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := chattmpl.Parse(p, string(data))
	if err != nil {
		t.Fatal(err)
	}
	s.r.Template = tpl
}

// start serves s on 127.0.0.1:0 (httptest's default) for the test.
func start(t testing.TB, s *Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// newTiny returns a server on the tiny model.
func newTiny(t testing.TB, cfg Config, chunk int) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.ModelID == "" {
		cfg.ModelID = "tiny"
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	s := New(cfg)
	s.SetRunner(openTiny(t, chunk))
	return s, start(t, s)
}

// script makes the server's model produce pieces as its output text (one
// token each), through the stop strings and token limit of the request.
// Before each piece it calls step (if set), which may block.
func script(s *Server, pieces []string, step func(i int)) {
	s.gen = func(ctx context.Context, j *job) (*outcome, error) {
		stop := sample.NewStopper(nil, j.gen.stop)
		o := &outcome{reason: "eos"}
		emit := func(t string) error {
			o.text += t
			if j.onText != nil && t != "" {
				return j.onText(t)
			}
			return nil
		}
		for i, p := range pieces {
			if step != nil {
				step(i)
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			countToken(ctx)
			o.completion++
			out, stopped := stop.Push(p)
			if err := emit(out); err != nil {
				return nil, err
			}
			if stopped {
				o.reason = "stop"
				return o, nil
			}
			if o.completion >= j.maxNew {
				o.reason = "length"
				break
			}
		}
		if o.reason != "stop" {
			if err := emit(stop.Flush()); err != nil {
				return nil, err
			}
		}
		return o, nil
	}
}

// within fails the test if f does not return in d.
func within(t testing.TB, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still waiting after %v", what, d)
	}
}

func utf8Valid(s string) bool { return utf8.ValidString(s) }
