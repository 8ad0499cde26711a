package hfhub

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// HedgeOptions tunes hedging: a range stream whose throughput falls far
// below its peers' gets a second request for its remaining bytes on another
// connection; whichever copy delivers first is used, bytes already received
// are kept. Throughput is bytes per second of time spent waiting inside
// body reads (a slow consumer does not make a stream look slow).
type HedgeOptions struct {
	// Ratio: a stream is a laggard when its rate is below Ratio times the
	// median rate of the other active streams and of streams that finished
	// in the last minute (0 → 0.25; negative turns hedging off).
	Ratio float64
	// MinWait: a stream is judged only once its current attempt has spent
	// this long waiting for data (0 → 2 s). The detection time of a
	// trickling connection is about MinWait + Interval.
	MinWait time.Duration
	// Interval: how often streams are compared (0 → 250 ms).
	Interval time.Duration
	// MaxPerStream: hedges per range stream (0 → 3).
	MaxPerStream int
	// MinRate: with nothing to compare against (a lone stream, nothing
	// finished in the last minute), a stream under this many bytes per
	// second is a laggard (0 → 32 KiB/s; negative: never without peers).
	MinRate float64
}

const (
	defaultHedgeRatio    = 0.25
	defaultHedgeMinWait  = 2 * time.Second
	defaultHedgeInterval = 250 * time.Millisecond
	defaultHedgeMax      = 3
	defaultHedgeMinRate  = 32 << 10
	// hedgeProbe is how much of a hedge's answer is read (and held) before
	// it replaces the laggard: the memory bound is one probe per stream.
	hedgeProbe = 64 << 10
	// finishedRates: how many recently finished streams serve as the
	// reference when a laggard is the last stream left, and for how long.
	finishedRates   = 16
	finishedRateTTL = time.Minute
)

// Defaults returns o with its zero fields set to the defaults.
func (o HedgeOptions) Defaults() HedgeOptions { return o.withDefaults() }

func (o HedgeOptions) withDefaults() HedgeOptions {
	if o.Ratio == 0 {
		o.Ratio = defaultHedgeRatio
	}
	if o.MinWait <= 0 {
		o.MinWait = defaultHedgeMinWait
	}
	if o.Interval <= 0 {
		o.Interval = defaultHedgeInterval
	}
	if o.MaxPerStream <= 0 {
		o.MaxPerStream = defaultHedgeMax
	}
	if o.MinRate == 0 {
		o.MinRate = defaultHedgeMinRate
	}
	return o
}

// errHedged cancels an attempt whose hedge answered first.
var errHedged = errors.New("replaced by a faster hedge request")

// streamSet is a client's active range streams and the monitor comparing
// them.
type streamSet struct {
	opts     HedgeOptions
	mu       sync.Mutex
	active   map[*stream]struct{}
	finished []rateAt
	running  bool
	hedges   atomic.Int64 // hedges launched (for tests and benchmarks)
	wins     atomic.Int64 // hedges that replaced their stream
}

type rateAt struct {
	rate float64
	at   time.Time
}

func newStreamSet(o HedgeOptions) *streamSet {
	return &streamSet{opts: o, active: map[*stream]struct{}{}}
}

// stream is one rangeReader's entry: its progress and its current attempt.
type stream struct {
	set *streamSet
	r   *rangeReader // only f, ctx and end are read off the consumer's goroutine
	pos atomic.Int64

	bytes        atomic.Int64 // received on the current attempt
	waitNs       atomic.Int64 // spent inside body reads on the current attempt
	readingSince atomic.Int64 // unix nanos a read began, 0 when not reading

	mu     sync.Mutex
	cancel context.CancelCauseFunc // the current attempt
	hedge  *hedgeReq
	hedges int
}

type hedgeReq struct {
	off    int64
	cancel context.CancelCauseFunc
	done   bool
	err    error
	prefix []byte
	body   io.ReadCloser
}

func (ss *streamSet) add(r *rangeReader) *stream {
	st := &stream{set: ss, r: r}
	st.pos.Store(r.pos)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.active[st] = struct{}{}
	if !ss.running && ss.opts.Ratio > 0 {
		ss.running = true
		go ss.monitor()
	}
	return st
}

func (ss *streamSet) remove(st *stream) {
	rate, ok := st.rate(time.Now())
	ss.mu.Lock()
	delete(ss.active, st)
	if ok && st.bytes.Load() > 0 {
		ss.finished = append(ss.finished, rateAt{rate, time.Now()})
		if len(ss.finished) > finishedRates {
			ss.finished = ss.finished[len(ss.finished)-finishedRates:]
		}
	}
	ss.mu.Unlock()
	st.mu.Lock()
	h := st.hedge
	st.hedge = nil
	st.mu.Unlock()
	if h != nil {
		h.cancelOrClose()
	}
}

// cancelOrClose ends a hedge whether or not it has answered.
func (h *hedgeReq) cancelOrClose() {
	h.cancel(errHedged)
	if h.body != nil {
		h.body.Close()
	}
}

// read is body.Read with the wait accounted to the stream.
func (st *stream) read(body io.Reader, p []byte) (int, error) {
	t0 := time.Now()
	st.readingSince.Store(t0.UnixNano())
	n, err := body.Read(p)
	st.waitNs.Add(int64(time.Since(t0)))
	st.readingSince.Store(0)
	st.bytes.Add(int64(n))
	return n, err
}

func (st *stream) beginAttempt(cancel context.CancelCauseFunc) {
	st.mu.Lock()
	st.cancel = cancel
	st.mu.Unlock()
	st.bytes.Store(0)
	st.waitNs.Store(0)
}

func (st *stream) endAttempt() {
	st.mu.Lock()
	c := st.cancel
	st.cancel = nil
	st.mu.Unlock()
	if c != nil {
		c(nil)
	}
}

// rate is the current attempt's throughput; ok=false before it waited at all.
func (st *stream) rate(now time.Time) (float64, bool) {
	w := st.wait(now)
	if w <= 0 {
		return 0, false
	}
	return float64(st.bytes.Load()) / w.Seconds(), true
}

func (st *stream) wait(now time.Time) time.Duration {
	w := st.waitNs.Load()
	if since := st.readingSince.Load(); since != 0 {
		w += now.UnixNano() - since
	}
	return time.Duration(w)
}

func (ss *streamSet) monitor() {
	t := time.NewTicker(ss.opts.Interval)
	defer t.Stop()
	for range t.C {
		lag, stop := ss.laggards(time.Now())
		if stop {
			return
		}
		for _, st := range lag {
			st.launchHedge()
		}
	}
}

// laggards picks the streams to hedge; stop reports that no stream is left
// (the monitor then exits; add starts a new one).
func (ss *streamSet) laggards(now time.Time) (lag []*stream, stop bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.active) == 0 {
		ss.running = false
		return nil, true
	}
	type meas struct {
		st   *stream
		rate float64
		wait time.Duration
	}
	var ms []meas
	for st := range ss.active {
		if r, ok := st.rate(now); ok {
			ms = append(ms, meas{st, r, st.wait(now)})
		}
	}
	var recent []float64
	for _, f := range ss.finished {
		if now.Sub(f.at) < finishedRateTTL {
			recent = append(recent, f.rate)
		}
	}
	for i, m := range ms {
		if m.wait < ss.opts.MinWait {
			continue
		}
		refs := append([]float64(nil), recent...)
		for j, o := range ms {
			if j != i {
				refs = append(refs, o.rate)
			}
		}
		if len(refs) == 0 {
			if m.rate < ss.opts.MinRate { // the last one left, slow, and nothing to compare with
				lag = append(lag, m.st)
			}
			continue
		}
		if m.rate < ss.opts.Ratio*median(refs) {
			lag = append(lag, m.st)
		}
	}
	return lag, false
}

func median(v []float64) float64 {
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// launchHedge requests the stream's remaining bytes again, unless a hedge
// is in flight or the stream used up its hedges.
func (st *stream) launchHedge() {
	r := st.r
	f := r.f
	st.mu.Lock()
	off := st.pos.Load()
	// A sequential fallback stream is not hedged: a hedge would have to
	// skip the same whole-file prefix.
	if st.hedge != nil || st.hedges >= st.set.opts.MaxPerStream || st.cancel == nil || off >= r.end || f.rangesIgnored() {
		st.mu.Unlock()
		return
	}
	hctx, cancel := context.WithCancelCause(withInfo(r.ctx, reqInfo{repo: f.repo, revision: f.commit, path: f.path}))
	h := &hedgeReq{off: off, cancel: cancel}
	st.hedge = h
	st.hedges++
	st.mu.Unlock()
	st.set.hedges.Add(1)
	f.c.log.Debug("hub hedge", "file", f.path, "at", off, "end", r.end)
	go func() {
		n := r.end - off
		body, err := f.c.getRange(hctx, f.currentURL(), off, n, f.size, false)
		var prefix []byte
		if err == nil {
			prefix = make([]byte, min(n, hedgeProbe))
			if _, err = io.ReadFull(body, prefix); err != nil {
				body.Close()
				body = nil
			}
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.hedge != h { // the stream ended or moved on
			if body != nil {
				body.Close()
			}
			cancel(errHedged)
			return
		}
		h.done, h.err, h.prefix, h.body = true, err, prefix, body
		if err == nil && st.cancel != nil {
			st.cancel(errHedged) // unblock the laggard's read; the consumer switches
		}
	}()
}

// takeHedge switches the reader to its hedge if that answered; it reports
// whether the reader's attempt changed (then r.body is the hedge's, or nil
// when the hedge failed while catching up and a fresh attempt is due).
func (r *rangeReader) takeHedge() bool {
	st := r.st
	if st == nil {
		return false
	}
	st.mu.Lock()
	h := st.hedge
	if h == nil || !h.done {
		st.mu.Unlock()
		return false
	}
	st.hedge = nil
	st.mu.Unlock()
	if h.err != nil {
		h.cancelOrClose()
		r.f.c.log.Debug("hub hedge failed", "file", r.f.path, "at", h.off, "err", h.err.Error())
		return false
	}
	if r.pos >= r.end {
		h.cancelOrClose()
		return false
	}
	r.closeBody()
	skip := r.pos - h.off
	prefix := h.prefix
	if skip <= int64(len(prefix)) {
		prefix = prefix[skip:]
	} else if _, err := io.CopyN(io.Discard, h.body, skip-int64(len(prefix))); err != nil {
		// The laggard is already closed: report a switch with no body, so
		// the caller opens a fresh attempt instead of failing on the
		// laggard's cancellation.
		h.cancelOrClose()
		r.f.c.log.Debug("hub hedge lost its connection while catching up", "file", r.f.path, "err", err.Error())
		return true
	} else {
		prefix = nil
	}
	r.body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(prefix), h.body), h.body}
	r.attemptN = 0
	st.beginAttempt(h.cancel)
	st.set.wins.Add(1)
	r.f.c.log.Debug("hub hedge won", "file", r.f.path, "at", r.pos)
	return true
}
