package hfhub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// ReaderOptions tunes a RemoteFile.
type ReaderOptions struct {
	Connections int   // concurrent range requests for ReadAt (0 → 4)
	MaxRequest  int64 // coalesce ranges into requests of at most this many bytes (0 → 64 MiB)
	MaxGap      int64 // merge ranges separated by at most this many bytes (0 → 256 KiB; gap bytes are read and dropped)
	ChunkSize   int64 // ReadAt splits reads larger than this across connections (0 → 16 MiB)
}

func (o ReaderOptions) withDefaults() ReaderOptions {
	if o.Connections <= 0 {
		o.Connections = 4
	}
	if o.MaxRequest <= 0 {
		o.MaxRequest = 64 << 20
	}
	if o.MaxGap < 0 {
		o.MaxGap = 0
	} else if o.MaxGap == 0 {
		o.MaxGap = 256 << 10
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = 16 << 20
	}
	return o
}

// RemoteFile is one file of a Hub repository at a pinned commit, read with
// validated HTTP range requests. It implements io.ReaderAt and is safe for
// concurrent use.
type RemoteFile struct {
	c      *Client
	repo   string
	commit string
	path   string
	size   int64
	etag   string
	opts   ReaderOptions

	mu       sync.Mutex
	url      *url.URL // current download URL (re-resolved when a signed URL expires)
	refresh  int      // how many times the URL was re-resolved
	noRanges atomic.Bool
}

// OpenFile HEADs the file at commit and returns a reader for it. Its size and
// ETag come from the Hub (X-Linked-Size / X-Linked-Etag for LFS files).
func (c *Client) OpenFile(ctx context.Context, repo, commit, path string, opts ReaderOptions) (*RemoteFile, error) {
	meta, err := c.HeadFile(ctx, repo, commit, path)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(meta.URL)
	if err != nil {
		return nil, err
	}
	return &RemoteFile{c: c, repo: repo, commit: meta.Commit, path: path, size: meta.Size, etag: meta.ETag, opts: opts.withDefaults(), url: u}, nil
}

// Size returns the file's size in bytes.
func (f *RemoteFile) Size() int64 { return f.size }

// ETag returns the Hub's ETag (sha256 for LFS files, git blob sha1 otherwise).
func (f *RemoteFile) ETag() string { return f.etag }

// Commit returns the commit the file was resolved at.
func (f *RemoteFile) Commit() string { return f.commit }

// Path returns the file's path in the repository.
func (f *RemoteFile) Path() string { return f.path }

func (f *RemoteFile) currentURL() *url.URL {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.url
}

// reresolve HEADs the file again after its signed URL was refused, and checks
// that it is still the same file.
func (f *RemoteFile) reresolve(ctx context.Context, stale *url.URL) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.url != stale { // someone else already refreshed it
		return nil
	}
	if f.refresh >= 10 {
		return fmt.Errorf("%s: the download URL keeps being refused after %d re-resolutions", f.path, f.refresh)
	}
	f.refresh++
	meta, err := f.c.HeadFile(ctx, f.repo, f.commit, f.path)
	if err != nil {
		return err
	}
	if meta.ETag != f.etag || meta.Size != f.size {
		return fmt.Errorf("%s: %w: the file changed while reading it (ETag %s size %d, was %s size %d)", f.path, ErrBadResponse, meta.ETag, meta.Size, f.etag, f.size)
	}
	u, err := url.Parse(meta.URL)
	if err != nil {
		return err
	}
	f.url = u
	return nil
}

// ReadAt reads len(p) bytes at off. Reads larger than ChunkSize are split
// across Connections concurrent requests.
func (f *RemoteFile) ReadAt(p []byte, off int64) (int, error) {
	return f.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext is ReadAt with a context.
func (f *RemoteFile) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%s: negative offset %d", f.path, off)
	}
	if off >= f.size {
		if len(p) == 0 && off == f.size {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := int64(len(p))
	var eof error
	if off+n > f.size {
		n = f.size - off
		eof = io.EOF
	}
	var ranges []Range
	for o := int64(0); o < n; o += f.opts.ChunkSize {
		ranges = append(ranges, Range{Off: off + o, Len: min(f.opts.ChunkSize, n-o)})
	}
	err := f.readRanges(ctx, ranges, f.opts.Connections, f.opts.ChunkSize, 0, nil, func(r Range, body io.Reader) error {
		_, err := io.ReadFull(body, p[r.Off-off:r.End()-off])
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(n), eof
}

// ReadRanges fetches ranges of the file with up to conns concurrent
// requests, coalescing neighbours (ReaderOptions.MaxRequest, MaxGap). fn is
// called once per range, from several goroutines at once, with a reader that
// yields exactly r.Len validated bytes (transparently resuming after a cut or
// stall); fn need not consume it all. Ranges must lie inside the file; they
// may come in any order and overlap. The first error (from fn or the
// network) cancels the rest and is returned.
func (f *RemoteFile) ReadRanges(ctx context.Context, ranges []Range, conns int, fn func(r Range, body io.Reader) error) error {
	if conns <= 0 {
		conns = f.opts.Connections
	}
	return f.readRanges(ctx, ranges, conns, f.opts.MaxRequest, f.opts.MaxGap, nil, fn)
}

type rangeGroup struct {
	off, end int64
	ranges   []Range
}

func coalesce(ranges []Range, maxReq, maxGap int64) []rangeGroup {
	sorted := append([]Range(nil), ranges...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Off < sorted[j].Off })
	var groups, empty []rangeGroup
	for _, r := range sorted {
		if r.Len == 0 {
			empty = append(empty, rangeGroup{off: r.Off, end: r.Off, ranges: []Range{r}})
			continue
		}
		if n := len(groups); n > 0 {
			g := &groups[n-1]
			if r.Off >= g.end && r.Off-g.end <= maxGap && r.End()-g.off <= maxReq {
				g.ranges = append(g.ranges, r)
				g.end = r.End()
				continue
			}
		}
		groups = append(groups, rangeGroup{off: r.Off, end: r.End(), ranges: []Range{r}})
	}
	return append(groups, empty...)
}

// readRanges is ReadRanges with an optional shared slot pool (one slot per
// open request) so a downloader can cap connections across files. A group
// refused with errRangeIgnored (a server that ignores Range after byte 0)
// is set aside and, once the other workers are done, read with one
// sequential stream per run of non-overlapping groups.
func (f *RemoteFile) readRanges(ctx context.Context, ranges []Range, conns int, maxReq, maxGap int64, slots chan struct{}, fn func(Range, io.Reader) error) error {
	for _, r := range ranges {
		if r.Off < 0 || r.Len < 0 || r.Off > f.size || r.Len > f.size-r.Off {
			return fmt.Errorf("%s: range [%d, +%d) outside the file (size %d)", f.path, r.Off, r.Len, f.size)
		}
	}
	groups := coalesce(ranges, maxReq, maxGap)
	if conns > len(groups) {
		conns = len(groups)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan rangeGroup)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	fail := func(err error) {
		once.Do(func() { firstErr = err; cancel(err) })
	}
	var mu sync.Mutex
	var fallback []rangeGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range work {
				if ctx.Err() != nil {
					continue
				}
				err := errRangeIgnored
				if g.off == 0 || !f.rangesIgnored() {
					err = f.readGroup(ctx, g, slots, false, fn)
				}
				if errors.Is(err, errRangeIgnored) {
					f.noteRangesIgnored()
					mu.Lock()
					fallback = append(fallback, g)
					mu.Unlock()
					continue
				}
				if err != nil {
					fail(err)
				}
			}
		}()
	}
feed:
	for _, g := range groups {
		select {
		case work <- g:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if firstErr == nil && ctx.Err() == nil && len(fallback) > 0 {
		if err := f.readSequential(ctx, fallback, slots, fn); err != nil {
			return err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	return context.Cause(ctx)
}

// readSequential reads groups in file order with as few whole-file streams
// as their overlaps allow (one, unless the caller's ranges overlap).
func (f *RemoteFile) readSequential(ctx context.Context, groups []rangeGroup, slots chan struct{}, fn func(Range, io.Reader) error) error {
	sort.Slice(groups, func(i, j int) bool { return groups[i].off < groups[j].off })
	for len(groups) > 0 {
		run := rangeGroup{off: groups[0].off, end: groups[0].off}
		rest := groups[:0:0]
		for _, g := range groups {
			if g.off >= run.end {
				run.ranges = append(run.ranges, g.ranges...)
				run.end = max(run.end, g.end)
			} else {
				rest = append(rest, g)
			}
		}
		if err := f.readGroup(ctx, run, slots, true, fn); err != nil {
			return err
		}
		groups = rest
	}
	return nil
}

// rangesIgnored reports whether the server was seen ignoring Range.
func (f *RemoteFile) rangesIgnored() bool { return f.noRanges.Load() }

func (f *RemoteFile) noteRangesIgnored() {
	if !f.noRanges.Swap(true) {
		f.c.log.Warn("hub server ignores Range at offsets after 0; reading the file as one sequential stream (its hash is still checked)",
			"file", f.path, "url", redact(f.currentURL()))
	}
}

// readGroup streams one group's bytes to fn, range by range. The request is
// opened before fn first sees a byte, so errRangeIgnored reaches the caller
// untouched. sequential accepts whole-file answers (skipping to the group).
func (f *RemoteFile) readGroup(ctx context.Context, g rangeGroup, slots chan struct{}, sequential bool, fn func(Range, io.Reader) error) error {
	if g.end == g.off {
		for _, r := range g.ranges {
			if err := fn(r, strings.NewReader("")); err != nil {
				return err
			}
		}
		return nil
	}
	if slots != nil {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	rr := f.newRangeReader(ctx, g.off, g.end, sequential)
	defer rr.Close()
	if err := rr.open(); err != nil {
		return err
	}
	pos := g.off
	for _, r := range g.ranges {
		if r.Off > pos {
			if _, err := io.CopyN(io.Discard, rr, r.Off-pos); err != nil {
				return rr.wrap(err)
			}
			pos = r.Off
		}
		lr := &io.LimitedReader{R: rr, N: r.Len}
		if err := fn(r, lr); err != nil {
			return err
		}
		if lr.N > 0 {
			if _, err := io.Copy(io.Discard, lr); err != nil {
				return rr.wrap(err)
			}
		}
		if rr.err != nil {
			return rr.err
		}
		if lr.N > 0 {
			return fmt.Errorf("%s: range [%d, +%d): %w", f.path, r.Off, r.Len, io.ErrUnexpectedEOF)
		}
		pos = r.End()
	}
	return nil
}

// rangeReader streams [pos, end) of a file. On a cut, reset, short body or
// stall it re-requests from the last byte received; it gives up after
// MaxRetries consecutive failures (another failure after some progress
// restarts the count). While it reads it is registered with the client's
// streamSet, which may hedge it (hedge.go): a second request for the
// remaining bytes, switched to when it answers first.
type rangeReader struct {
	f          *RemoteFile
	ctx        context.Context
	pos, end   int64
	sequential bool // accept a whole-file body and skip to pos

	body     io.ReadCloser
	pending  error // error that came with the last bytes, handled on the next Read
	attemptN int64 // bytes received on the current attempt
	failures int
	err      error // permanent error
	st       *stream
}

func (f *RemoteFile) newRangeReader(ctx context.Context, off, end int64, sequential bool) *rangeReader {
	return &rangeReader{f: f, ctx: ctx, pos: off, end: end, sequential: sequential}
}

func (r *rangeReader) wrap(err error) error {
	if r.err != nil {
		return r.err
	}
	return err
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.pos >= r.end {
		r.closeBody()
		return 0, io.EOF
	}
	if int64(len(p)) > r.end-r.pos {
		p = p[:r.end-r.pos]
	}
	for {
		if r.pending == nil && r.takeHedge() {
			continue
		}
		if r.pending == nil && r.body == nil {
			if err := r.open(); err != nil {
				r.err = err
				return 0, err
			}
		}
		var n int
		var err error
		if r.pending != nil {
			err, r.pending = r.pending, nil
		} else {
			n, err = r.st.read(r.body, p)
		}
		if n > 0 {
			r.pos += int64(n)
			r.attemptN += int64(n)
			r.st.pos.Store(r.pos)
			if err != nil && !(err == io.EOF && r.pos == r.end) {
				r.pending = err
			}
			if r.pos == r.end {
				r.closeBody()
			}
			return n, nil
		}
		if err == nil {
			continue
		}
		if err == io.EOF && r.pos == r.end {
			r.closeBody()
			return 0, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if r.takeHedge() { // the attempt was cut because a hedge answered first
			continue
		}
		r.closeBody()
		if r.ctx.Err() != nil {
			r.err = context.Cause(r.ctx)
			return 0, r.err
		}
		stalled := errors.Is(err, ErrStalled)
		if stalled || r.attemptN == 0 {
			r.failures++
		} else {
			r.failures = 1
		}
		if !stalled && !isRetryableNetError(err) {
			r.err = fmt.Errorf("%s: reading bytes %d-%d: %w", r.f.path, r.pos, r.end-1, err)
			return 0, r.err
		}
		if r.failures > r.f.c.opts.MaxRetries {
			r.err = fmt.Errorf("%s: reading bytes %d-%d: %w (gave up after %d consecutive failures)", r.f.path, r.pos, r.end-1, err, r.failures)
			return 0, r.err
		}
		r.f.c.log.Debug("hub resume", "file", r.f.path, "at", r.pos, "cause", err.Error(), "failures", r.failures)
		if err := sleepCtx(r.ctx, expBackoff(r.f.c.opts.RetryWaitMin, r.f.c.opts.RetryWaitMax, r.failures-1)); err != nil {
			r.err = context.Cause(r.ctx)
			return 0, r.err
		}
	}
}

func (r *rangeReader) Close() error {
	r.closeBody()
	if r.st != nil {
		r.f.c.streams.remove(r.st)
		r.st = nil
	}
	return nil
}

func (r *rangeReader) closeBody() {
	if r.body != nil {
		r.body.Close()
		r.body = nil
	}
	if r.st != nil {
		r.st.endAttempt()
	}
}

var errURLRefused = errors.New("download URL refused")

// open sends the range request for [pos, end) and validates the answer. A
// server that ignores Range after a cut (errRangeIgnored at pos > 0 once
// bytes were read) switches this reader to sequential mode.
func (r *rangeReader) open() error {
	f := r.f
	if r.st == nil {
		r.st = f.c.streams.add(r)
	}
	for {
		u := f.currentURL()
		actx, cancel := context.WithCancelCause(withInfo(r.ctx, reqInfo{repo: f.repo, revision: f.commit, path: f.path}))
		off, n := r.pos, r.end-r.pos
		body, err := f.c.getRange(actx, u, off, n, f.size, r.sequential)
		if err != nil {
			cancel(nil)
			if errors.Is(err, errRangeIgnored) && off > 0 && (r.attemptN > 0 || r.failures > 0) {
				f.noteRangesIgnored()
				r.sequential = true
				continue
			}
			if errors.Is(err, errURLRefused) {
				r.failures++
				if r.failures > f.c.opts.MaxRetries {
					return fmt.Errorf("%s: %w", f.path, err)
				}
				if rerr := f.reresolve(r.ctx, u); rerr != nil {
					return rerr
				}
				continue
			}
			if r.ctx.Err() != nil {
				return context.Cause(r.ctx)
			}
			if errors.Is(err, errRangeIgnored) {
				return err
			}
			return fmt.Errorf("%s: reading bytes %d-%d: %w", f.path, off, off+n-1, err)
		}
		r.body = body
		r.attemptN = 0
		r.st.beginAttempt(cancel)
		return nil
	}
}

// getRange GETs bytes [off, off+n) and returns a body of exactly those n
// bytes (fewer if the connection ends early): the answer must pass
// rangeVerdict; a whole-file answer is skipped forward to off. A request
// for the whole file is sent without Range (small files, RFC 9110 allows
// either). Anything not provably the bytes asked for is retried (a
// misbehaving CDN node) and never handed on.
func (c *Client) getRange(ctx context.Context, u *url.URL, off, n, size int64, wholeOK bool) (io.ReadCloser, error) {
	hdr := http.Header{"Accept-Encoding": {"identity"}}
	if off != 0 || n != size {
		hdr.Set("Range", statusRange(off, n))
	}
	var ans *rangeAnswer
	resp, err := c.do(ctx, c.follow, http.MethodGet, u, hdr, func(resp *http.Response) error {
		a, err := c.checkRangeResponse(resp, off, n, size, wholeOK)
		ans = a
		return err
	})
	if err != nil {
		return nil, err
	}
	var body io.Reader = resp.Body
	if ans.Skip > 0 {
		body = &skipReader{r: resp.Body, skip: ans.Skip}
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(body, n), resp.Body}, nil
}

// skipReader drops the first skip bytes of a whole-file answer on the first
// Read, so a cut while skipping is an ordinary read error (resumed).
type skipReader struct {
	r    io.Reader
	skip int64
}

func (s *skipReader) Read(p []byte) (int, error) {
	if s.skip > 0 {
		n, err := io.CopyN(io.Discard, s.r, s.skip)
		s.skip -= n
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
	return s.r.Read(p)
}

func (c *Client) checkRangeResponse(resp *http.Response, off, n, size int64, wholeOK bool) (*rangeAnswer, error) {
	switch resp.StatusCode {
	case http.StatusForbidden, http.StatusGone, http.StatusUnauthorized:
		if !c.isHubHost(resp.Request.URL) {
			return nil, fmt.Errorf("%w: HTTP %d from %s (expired signature?)", errURLRefused, resp.StatusCode, redact(resp.Request.URL))
		}
	}
	cl := resp.ContentLength
	if resp.Header.Get("Content-Length") == "" {
		cl = -1
	}
	a, err := rangeVerdict(resp.StatusCode, resp.Header, cl, off, n, size, wholeOK)
	if err != nil {
		var pe *protocolError
		if errors.As(err, &pe) {
			pe.msg = redact(resp.Request.URL) + " " + pe.msg
		}
		return nil, err
	}
	if a == nil {
		return nil, c.responseError(resp)
	}
	return a, nil
}
