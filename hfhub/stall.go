package hfhub

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// StallError is an HTTP attempt given up because nothing arrived for the
// stall time (Options.StallTimeout) while the client was waiting: no
// response headers, or no body byte since the last one. It unwraps to
// ErrStalled; the request is retried from the last byte received.
type StallError struct {
	After time.Duration // the stall time in force
	Phase string        // "headers" or "body"
	URL   string        // without query (not in the message: callers name the request)
}

func (e *StallError) Error() string {
	return fmt.Sprintf("stalled: no data for %v while waiting for the response %s", e.After, e.Phase)
}

// Unwrap returns ErrStalled.
func (e *StallError) Unwrap() error { return ErrStalled }

// Timeout reports true, so the error reads as a network timeout.
func (e *StallError) Timeout() bool { return true }

// stallTransport applies the one stall rule to every HTTP attempt the client
// makes (API JSON, error bodies, HEAD, resolve, CDN ranges, each redirect
// hop): the attempt is cancelled when StallTimeout passes without a byte
// while the client waits — for the response headers, or inside a body Read.
// Time the caller spends between Reads does not count (a slow consumer is
// not a stalled server).
type stallTransport struct {
	base    http.RoundTripper
	timeout time.Duration
}

func (t *stallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	g := &stallGuard{timeout: t.timeout, url: redact(req.URL)}
	g.timer = time.AfterFunc(t.timeout, func() { g.fired.Store(true); cancel() })
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	stopped := g.timer.Stop()
	if err != nil {
		cancel()
		if !stopped && g.fired.Load() {
			return nil, &StallError{After: t.timeout, Phase: "headers", URL: g.url}
		}
		return nil, err
	}
	if g.fired.Load() {
		resp.Body.Close()
		cancel()
		return nil, &StallError{After: t.timeout, Phase: "headers", URL: g.url}
	}
	resp.Body = &stallBody{rc: resp.Body, g: g, cancel: cancel}
	return resp, nil
}

type stallGuard struct {
	timeout time.Duration
	timer   *time.Timer
	fired   atomic.Bool
	url     string
}

// stallBody arms the guard for the duration of each Read.
type stallBody struct {
	rc     io.ReadCloser
	g      *stallGuard
	cancel context.CancelFunc
}

func (b *stallBody) Read(p []byte) (int, error) {
	if b.g.fired.Load() {
		return 0, &StallError{After: b.g.timeout, Phase: "body", URL: b.g.url}
	}
	b.g.timer.Reset(b.g.timeout)
	n, err := b.rc.Read(p)
	b.g.timer.Stop()
	if err != nil && err != io.EOF && b.g.fired.Load() {
		return n, &StallError{After: b.g.timeout, Phase: "body", URL: b.g.url}
	}
	return n, err
}

func (b *stallBody) Close() error {
	b.g.timer.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}

// CloseIdleConnections passes through to the wrapped transport.
func (t *stallTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
