package hfhub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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

	mu      sync.Mutex
	url     *url.URL // current download URL (re-resolved when a signed URL expires)
	refresh int      // how many times the URL was re-resolved
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
// open request) so a downloader can cap connections across files.
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
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range work {
				if ctx.Err() != nil {
					continue
				}
				if err := f.readGroup(ctx, g, slots, fn); err != nil {
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
	if firstErr != nil {
		return firstErr
	}
	return context.Cause(ctx)
}

func (f *RemoteFile) readGroup(ctx context.Context, g rangeGroup, slots chan struct{}, fn func(Range, io.Reader) error) error {
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
	rr := f.newRangeReader(ctx, g.off, g.end)
	defer rr.Close()
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

// errStalled marks an attempt aborted by the watchdog.
var errStalled = errors.New("stalled")

// rangeReader streams [pos, end) of a file. On a cut, reset, short body or
// stall it re-requests from the last byte received; it gives up after
// MaxRetries consecutive failures (a stall always counts; another failure
// after some progress restarts the count).
type rangeReader struct {
	f        *RemoteFile
	ctx      context.Context
	pos, end int64

	body     io.ReadCloser
	cancel   context.CancelFunc
	wd       *watchdog
	pending  error // error that came with the last bytes, handled on the next Read
	attemptN int64 // bytes received on the current attempt
	failures int
	err      error // permanent error
}

func (f *RemoteFile) newRangeReader(ctx context.Context, off, end int64) *rangeReader {
	return &rangeReader{f: f, ctx: ctx, pos: off, end: end}
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
			n, err = r.body.Read(p)
		}
		if n > 0 {
			r.pos += int64(n)
			r.attemptN += int64(n)
			r.wd.got.Add(int64(n))
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
		stalled := r.wd != nil && r.wd.fired.Load()
		r.closeBody()
		if cerr := r.ctx.Err(); cerr != nil {
			r.err = context.Cause(r.ctx)
			return 0, r.err
		}
		if stalled {
			err = fmt.Errorf("%w: fewer than %d bytes in %v", errStalled, r.f.c.opts.StallMinBytes, r.f.c.opts.StallTimeout)
			r.failures++
		} else if r.attemptN > 0 {
			r.failures = 1
		} else {
			r.failures++
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
	return nil
}

func (r *rangeReader) closeBody() {
	if r.wd != nil {
		r.wd.stop()
		r.wd = nil
	}
	if r.body != nil {
		r.body.Close()
		r.body = nil
	}
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
	}
}

var errURLRefused = errors.New("download URL refused")

// open sends the range request for [pos, end) and validates the answer.
func (r *rangeReader) open() error {
	f := r.f
	for {
		u := f.currentURL()
		actx, cancel := context.WithCancel(withInfo(r.ctx, reqInfo{repo: f.repo, revision: f.commit, path: f.path}))
		off, n := r.pos, r.end-r.pos
		resp, err := f.c.getRange(actx, u, off, n, f.size)
		if err != nil {
			cancel()
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
			return fmt.Errorf("%s: reading bytes %d-%d: %w", f.path, off, off+n-1, err)
		}
		r.body = resp.Body
		r.cancel = cancel
		r.attemptN = 0
		r.wd = startWatchdog(f.c.opts.StallTimeout, f.c.opts.StallMinBytes, n, cancel)
		return nil
	}
}

// getRange GETs bytes [off, off+n) and accepts only an exact 206: status 206,
// Content-Range equal to the range asked (and the file's size), identity
// encoding, a Content-Length (if any) of n, no multipart. Anything else is
// retried (a misbehaving CDN node) and never handed on. The body is capped
// at n bytes.
func (c *Client) getRange(ctx context.Context, u *url.URL, off, n, size int64) (*http.Response, error) {
	hdr := http.Header{
		"Range":           {statusRange(off, n)},
		"Accept-Encoding": {"identity"},
	}
	resp, err := c.do(ctx, c.follow, http.MethodGet, u, hdr, func(resp *http.Response) error {
		return c.checkRangeResponse(resp, off, n, size)
	})
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.LimitReader(resp.Body, n), resp.Body}
	return resp, nil
}

func (c *Client) checkRangeResponse(resp *http.Response, off, n, size int64) error {
	want := statusRange(off, n)[len("bytes="):]
	bad := func(format string, a ...any) error {
		return &protocolError{retryable: true, msg: fmt.Sprintf("%s (Range: bytes=%s): ", redact(resp.Request.URL), want) + fmt.Sprintf(format, a...)}
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent:
	case resp.StatusCode == http.StatusOK:
		return bad("the server ignored the Range header (HTTP 200)")
	case (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusGone || resp.StatusCode == http.StatusUnauthorized) && !c.isHubHost(resp.Request.URL):
		return fmt.Errorf("%w: HTTP %d from %s (expired signature?)", errURLRefused, resp.StatusCode, redact(resp.Request.URL))
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		return &protocolError{msg: fmt.Sprintf("%s: HTTP 416 for bytes=%s of a %d-byte file (Content-Range %.60q): the file on the server is not the expected size", redact(resp.Request.URL), want, size, resp.Header.Get("Content-Range"))}
	default:
		return c.responseError(resp)
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return bad("Content-Encoding %.40q", ce)
	}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(strings.ToLower(ct), "multipart/") {
		return bad("multipart response")
	}
	crh := resp.Header.Get("Content-Range")
	if crh == "" {
		return bad("206 without Content-Range")
	}
	cr, err := parseContentRange(crh)
	if err != nil {
		return bad("%v", err)
	}
	if cr.Unsatisfied || cr.First != off || cr.Last != off+n-1 {
		return bad("Content-Range %.60q is not the range asked for", crh)
	}
	if cr.Total >= 0 && cr.Total != size {
		return bad("Content-Range %.60q: total %d, expected the file size %d", crh, cr.Total, size)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != n {
		return bad("Content-Length %d, expected %d", resp.ContentLength, n)
	}
	return nil
}

// watchdog cancels an attempt whose body delivers fewer than minBytes (or
// what is left to deliver) during a window of timeout.
type watchdog struct {
	got   atomic.Int64
	fired atomic.Bool
	done  chan struct{}
	once  sync.Once
}

func startWatchdog(timeout time.Duration, minBytes, total int64, cancel context.CancelFunc) *watchdog {
	w := &watchdog{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(timeout)
		defer t.Stop()
		var last int64
		for {
			select {
			case <-w.done:
				return
			case <-t.C:
				g := w.got.Load()
				need := min(minBytes, total-last)
				if need < 1 {
					need = 1
				}
				if g-last < need {
					w.fired.Store(true)
					cancel()
					return
				}
				last = g
			}
		}
	}()
	return w
}

func (w *watchdog) stop() { w.once.Do(func() { close(w.done) }) }

// itoa is a small helper for log fields.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
