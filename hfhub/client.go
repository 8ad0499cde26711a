package hfhub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	retryablehttp "github.com/hashicorp/go-retryablehttp"
)

// Options configures a Client. Zero values take the environment's defaults.
type Options struct {
	Endpoint  string       // "" → HF_ENDPOINT, else https://huggingface.co
	Token     string       // "" → HF_TOKEN, HUGGING_FACE_HUB_TOKEN, then $HF_HOME/token
	Anonymous bool         // send no token at all, whatever the environment says
	UserAgent string       // "" → "qpack-hfhub/1"
	Logger    *slog.Logger // nil → slog.Default(); Debug records, one Warn per file a server ignores Range for; never a token

	// HTTPClient supplies the transport (nil → a pooled transport of our
	// own). Its Timeout must be 0: long bodies are policed by the stall
	// rule instead, which wraps whatever transport is used. Its
	// CheckRedirect is replaced.
	HTTPClient *http.Client

	MaxRetries    int           // retries per request; 0 → 5, negative → none
	RetryWaitMin  time.Duration // first backoff; 0 → 1 s
	RetryWaitMax  time.Duration // backoff cap; 0 → 30 s
	MaxRetryAfter time.Duration // cap on a server's Retry-After / RateLimit; 0 → 60 s

	// StallTimeout is the one stall rule for every HTTP attempt (API JSON,
	// error bodies, HEAD, resolve, CDN): when this long passes without a
	// byte while the client waits for headers or inside a body read, the
	// attempt is abandoned (ErrStalled) and retried, a range from its last
	// byte received (0 → 30 s).
	StallTimeout time.Duration
	// StallMinBytes is ignored: stalls are measured as time since the last
	// byte, and slow-but-alive connections are hedged (Hedge).
	//
	// Deprecated: kept so existing callers compile.
	StallMinBytes int64

	// Hedge tunes the re-requesting of laggard range streams (see doc.go).
	Hedge HedgeOptions
}

// Client talks to one Hub endpoint. It is safe for concurrent use.
type Client struct {
	opts     Options
	endpoint *url.URL
	base     string // endpoint without trailing slash
	token    string
	tokenSrc TokenSource
	log      *slog.Logger
	follow   *retryablehttp.Client // follows redirects, dropping Authorization off-host
	noFollow *retryablehttp.Client // hands 3xx back (HEAD on /resolve)
	streams  *streamSet            // active range streams, for hedging laggards
}

const (
	defaultMaxRetries    = 5
	defaultRetryWaitMin  = time.Second
	defaultRetryWaitMax  = 30 * time.Second
	defaultMaxRetryAfter = 60 * time.Second
	defaultStallTimeout  = 30 * time.Second
	maxRedirects         = 10
)

// NewClient builds a client; it does no network I/O.
func NewClient(opts Options) (*Client, error) {
	if opts.Endpoint == "" {
		opts.Endpoint = EnvEndpoint()
	}
	ep, err := parseEndpoint(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	c := &Client{endpoint: ep, base: strings.TrimRight(ep.String(), "/")}
	if !opts.Anonymous {
		c.token, c.tokenSrc, err = LookupToken(opts.Token)
		if err != nil {
			return nil, err
		}
	}
	opts.Token = "" // keep the token in one place only
	switch {
	case opts.MaxRetries == 0:
		opts.MaxRetries = defaultMaxRetries
	case opts.MaxRetries < 0:
		opts.MaxRetries = 0
	}
	if opts.RetryWaitMin <= 0 {
		opts.RetryWaitMin = defaultRetryWaitMin
	}
	if opts.RetryWaitMax <= 0 {
		opts.RetryWaitMax = defaultRetryWaitMax
	}
	if opts.RetryWaitMax < opts.RetryWaitMin {
		opts.RetryWaitMax = opts.RetryWaitMin
	}
	if opts.MaxRetryAfter <= 0 {
		opts.MaxRetryAfter = defaultMaxRetryAfter
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = defaultStallTimeout
	}
	opts.Hedge = opts.Hedge.withDefaults()
	if opts.UserAgent == "" {
		opts.UserAgent = "qpack-hfhub/1"
	}
	c.log = opts.Logger
	if c.log == nil {
		c.log = slog.Default()
	}
	var transport http.RoundTripper
	if opts.HTTPClient != nil {
		transport = opts.HTTPClient.Transport
		if opts.HTTPClient.Timeout != 0 {
			return nil, fmt.Errorf("hfhub: Options.HTTPClient.Timeout must be 0 (a whole-request timeout would cut long downloads; use StallTimeout)")
		}
	}
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 64
		t.IdleConnTimeout = 60 * time.Second
		transport = t
	}
	transport = &stallTransport{base: transport, timeout: opts.StallTimeout}
	var jar http.CookieJar
	if opts.HTTPClient != nil {
		jar = opts.HTTPClient.Jar
	}
	c.opts = opts
	followHTTP := &http.Client{Transport: transport, Jar: jar, CheckRedirect: c.checkRedirect}
	noFollowHTTP := &http.Client{Transport: transport, Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	c.follow = c.newRetryable(followHTTP)
	c.noFollow = c.newRetryable(noFollowHTTP)
	c.streams = newStreamSet(opts.Hedge)
	return c, nil
}

// Endpoint returns the Hub URL in use.
func (c *Client) Endpoint() string { return c.base }

// HasToken reports whether requests to the Hub carry a token, and where it
// came from (never the token itself).
func (c *Client) HasToken() (bool, TokenSource) { return c.token != "", c.tokenSrc }

func (c *Client) newRetryable(h *http.Client) *retryablehttp.Client {
	return &retryablehttp.Client{
		HTTPClient:   h,
		Logger:       nil, // we log ourselves, without query strings
		RetryWaitMin: c.opts.RetryWaitMin,
		RetryWaitMax: c.opts.RetryWaitMax,
		RetryMax:     c.opts.MaxRetries,
		CheckRetry:   c.checkRetry,
		Backoff:      c.backoff,
		ErrorHandler: c.giveUp,
	}
}

// isHubHost reports whether u points at the endpoint's host and port: the
// only place the token may go.
func (c *Client) isHubHost(u *url.URL) bool {
	return strings.EqualFold(u.Scheme, c.endpoint.Scheme) && strings.EqualFold(u.Host, c.endpoint.Host)
}

var errRedirectLoop = errors.New("redirect loop")

func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("%w: more than %d redirects from %s", errRedirectLoop, maxRedirects, redact(via[0].URL))
	}
	for _, v := range via {
		if v.URL.String() == req.URL.String() {
			return fmt.Errorf("%w: %s redirects back to itself", errRedirectLoop, redact(req.URL))
		}
	}
	if !c.isHubHost(req.URL) {
		req.Header.Del("Authorization")
	} else if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return nil
}

// redact drops the query and fragment (signed CDN URLs carry secrets).
func redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	v := *u
	v.RawQuery, v.Fragment, v.User = "", "", nil
	return v.String()
}

// reqInfo travels in the request context so errors can name what failed.
type reqInfo struct {
	repo, revision, path string
}

type infoKey struct{}

func withInfo(ctx context.Context, info reqInfo) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

func infoFrom(ctx context.Context) reqInfo {
	i, _ := ctx.Value(infoKey{}).(reqInfo)
	return i
}

// newRequest builds a request with our headers; the token is attached only
// when the URL is on the Hub's own host.
func (c *Client) newRequest(ctx context.Context, method string, u *url.URL) (*retryablehttp.Request, error) {
	req, err := retryablehttp.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", c.opts.UserAgent)
	if c.token != "" && c.isHubHost(u) {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// protocolError is a response that is well-formed HTTP but not what we asked
// for (a 200 to a Range request, a 206 of other bytes, …). Retryable ones are
// retried like a 5xx; the bytes are never used.
type protocolError struct {
	msg       string
	retryable bool
}

func (e *protocolError) Error() string { return e.msg }
func (e *protocolError) Unwrap() error { return ErrBadResponse }

// checkRetry retries timeouts, connection resets, 408, 429 and 5xx (not 501
// and 505), and retryable protocol errors; nothing else.
func (c *Client) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		var pe *protocolError
		if errors.As(err, &pe) {
			return pe.retryable, nil
		}
		var he *HubError
		if errors.As(err, &he) {
			return retryableStatus(he.Status), nil
		}
		return isRetryableNetError(err), nil
	}
	if resp != nil && retryableStatus(resp.StatusCode) {
		return true, nil
	}
	return false, nil
}

func retryableStatus(s int) bool {
	switch {
	case s == http.StatusRequestTimeout, s == http.StatusTooManyRequests:
		return true
	case s >= 500 && s <= 599:
		return s != http.StatusNotImplemented && s != http.StatusHTTPVersionNotSupported
	}
	return false
}

// isRetryableNetError: timeouts, resets, refused/aborted connections and a
// connection closed before or while reading the response.
func isRetryableNetError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrStalled) {
		return true
	}
	if errors.Is(err, errRedirectLoop) || errors.Is(err, context.Canceled) || errors.Is(err, errRangeIgnored) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT, io.ErrUnexpectedEOF, io.EOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "server closed idle connection") ||
		strings.Contains(s, "broken pipe") || strings.Contains(s, "transport connection broken")
}

// backoff: exponential from RetryWaitMin, capped at RetryWaitMax, with
// jitter; a server's Retry-After (seconds or HTTP date) or RateLimit "t=N"
// wins, capped at MaxRetryAfter.
func (c *Client) backoff(min, max time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil {
		if d, ok := serverWait(resp.Header, time.Now()); ok {
			if d > c.opts.MaxRetryAfter {
				d = c.opts.MaxRetryAfter
			}
			return d
		}
	}
	return expBackoff(min, max, attempt)
}

func expBackoff(min, max time.Duration, attempt int) time.Duration {
	if attempt > 30 {
		attempt = 30
	}
	d := min << uint(attempt)
	if d > max || d <= 0 {
		d = max
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// serverWait reads Retry-After (integer seconds or an HTTP date) or the
// Hub's RateLimit header ("resolvers";r=0;t=55 → 56 s).
func serverWait(h http.Header, now time.Time) (time.Duration, bool) {
	if ra := strings.TrimSpace(h.Get("Retry-After")); ra != "" {
		if n, err := parseDecimal(ra); err == nil {
			return time.Duration(n) * time.Second, true
		}
		if t, err := http.ParseTime(ra); err == nil {
			d := t.Sub(now)
			if d < 0 {
				d = 0
			}
			return d, true
		}
	}
	if rl := h.Get("RateLimit"); rl != "" && len(rl) < 512 {
		for _, p := range strings.Split(rl, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && k == "t" {
				if n, err := parseDecimal(v); err == nil {
					return time.Duration(n+1) * time.Second, true
				}
			}
		}
	}
	return 0, false
}

// giveUp turns the last response or error of a request into our error and
// closes the body.
func (c *Client) giveUp(resp *http.Response, err error, tries int) (*http.Response, error) {
	if resp != nil {
		if err == nil {
			err = c.responseError(resp)
		}
		drainClose(resp.Body)
	}
	if err == nil {
		err = errors.New("request failed")
	}
	if tries > 1 {
		return nil, fmt.Errorf("%w (gave up after %d attempts)", err, tries)
	}
	return nil, err
}

func drainClose(b io.ReadCloser) {
	if b == nil {
		return
	}
	io.Copy(io.Discard, io.LimitReader(b, maxDrainBody))
	b.Close()
}

// responseError maps a non-success response to a *HubError; it reads (a
// bounded amount of) the body for the server's message.
func (c *Client) responseError(resp *http.Response) error {
	info := infoFrom(resp.Request.Context())
	e := &HubError{
		Status:    resp.StatusCode,
		Code:      sanitizeMessage(resp.Header.Get("X-Error-Code")),
		Message:   sanitizeMessage(resp.Header.Get("X-Error-Message")),
		RequestID: sanitizeMessage(resp.Header.Get("X-Request-Id")),
		Method:    resp.Request.Method,
		URL:       redact(resp.Request.URL),
		Repo:      info.repo,
		Revision:  info.revision,
		Path:      info.path,
	}
	if e.Message == "" && resp.Request.Method != http.MethodHead {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		var j struct {
			Error string `json:"error"`
		}
		switch {
		case json.Unmarshal(body, &j) == nil && j.Error != "":
			e.Message = sanitizeMessage(j.Error)
		case ct != "text/html" && len(body) > 0 && len(body) < 1024:
			e.Message = sanitizeMessage(string(body))
		}
	}
	e.kind = classify(resp.StatusCode, e.Code, e.Message, c.isHubHost(resp.Request.URL))
	return e
}

// do sends one request with retries. accept decides whether a response is
// the one we want; a nil error from accept means success and the caller owns
// the body.
func (c *Client) do(ctx context.Context, rc *retryablehttp.Client, method string, u *url.URL, hdr http.Header, accept func(*http.Response) error) (*http.Response, error) {
	req, err := c.newRequest(ctx, method, u)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.SetResponseHandler(accept)
	c.log.Debug("hub request", "method", method, "url", redact(u), "range", hdr.Get("Range"))
	return rc.Do(req)
}

// getJSON GETs an API URL and returns its body (bounded) and headers,
// after parse accepted it. A body parse refuses (malformed or invalid JSON:
// one corrupted or cut response among good ones, as a flaky proxy gives) is
// fetched again like a failed read, within MaxRetries; the last refusal is
// the error.
func (c *Client) getJSON(ctx context.Context, u *url.URL, parse func([]byte) error) ([]byte, http.Header, error) {
	var lastErr error
	for attempt := 0; attempt <= c.opts.MaxRetries; attempt++ {
		if attempt > 0 {
			if err := sleepCtx(ctx, expBackoff(c.opts.RetryWaitMin, c.opts.RetryWaitMax, attempt-1)); err != nil {
				return nil, nil, err
			}
		}
		hdr := http.Header{"Accept": {"application/json"}}
		resp, err := c.do(ctx, c.follow, http.MethodGet, u, hdr, func(resp *http.Response) error {
			if resp.StatusCode != http.StatusOK {
				return c.responseError(resp)
			}
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBytes+1))
		resp.Body.Close()
		if err == nil && len(body) > maxJSONBytes {
			return nil, nil, fmt.Errorf("%s: %w: response larger than %d MiB", redact(u), ErrBadResponse, maxJSONBytes>>20)
		}
		if err == nil {
			perr := parse(body)
			if perr == nil {
				return body, resp.Header, nil
			}
			lastErr = perr
			c.log.Warn("hub answer refused, asking again", "url", redact(u), "attempt", attempt+1, "err", perr)
			continue
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		lastErr = fmt.Errorf("reading %s: %w", redact(u), err)
		if !isRetryableNetError(err) {
			break
		}
	}
	return nil, nil, lastErr
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// apiURL joins the endpoint with a path that is already escaped.
func (c *Client) apiURL(escapedPath string, query url.Values) (*url.URL, error) {
	s := c.base + escapedPath
	if len(query) > 0 {
		s += "?" + query.Encode()
	}
	return url.Parse(s)
}

// escapeRepoPath escapes a file path segment by segment, keeping '/'.
func escapeRepoPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func checkRepoRev(repo, revision string) error {
	if err := ValidateRepoID(repo); err != nil {
		return err
	}
	return validateRevision(revision)
}

// ModelInfo fetches /api/models/{repo}/revision/{revision} (with blobs=true,
// so siblings carry sizes and LFS hashes). revision "" means "main".
func (c *Client) ModelInfo(ctx context.Context, repo, revision string) (*ModelInfo, error) {
	if revision == "" {
		revision = "main"
	}
	if err := checkRepoRev(repo, revision); err != nil {
		return nil, err
	}
	u, err := c.apiURL("/api/models/"+repo+"/revision/"+url.PathEscape(revision), url.Values{"blobs": {"true"}})
	if err != nil {
		return nil, err
	}
	var mi *ModelInfo
	_, _, err = c.getJSON(withInfo(ctx, reqInfo{repo: repo, revision: revision}), u, func(body []byte) (err error) {
		mi, err = parseModelInfo(repo, body)
		return err
	})
	if err != nil {
		return nil, err
	}
	return mi, nil
}

// Resolve pins a revision (branch, tag or commit) to its 40-hex commit.
func (c *Client) Resolve(ctx context.Context, repo, revision string) (string, error) {
	mi, err := c.ModelInfo(ctx, repo, revision)
	if err != nil {
		return "", err
	}
	if isCommit(revision) && mi.SHA != revision {
		return "", fmt.Errorf("resolving %s@%s: %w: the Hub answered commit %s", repo, revision, ErrBadResponse, mi.SHA)
	}
	return mi.SHA, nil
}

// ListFiles lists every file of repo at commit (recursively, following the
// Link rel="next" pagination), sorted by path. Each path is validated: a
// listing with "..", absolute or otherwise unsafe names is refused. Every
// page but the last must hold an entry, and pages are capped (see doc.go).
func (c *Client) ListFiles(ctx context.Context, repo, commit string) ([]FileInfo, error) {
	return c.listFiles(ctx, repo, commit, -1)
}

// ListFilesOf is ListFiles at the commit model info pinned (info.SHA), with
// the page count capped by the entries info's siblings imply (see doc.go,
// "Bounds"): use it when model info was fetched anyway.
func (c *Client) ListFilesOf(ctx context.Context, repo string, info *ModelInfo) ([]FileInfo, error) {
	return c.listFiles(ctx, repo, info.SHA, treeEntriesOf(info.Siblings))
}

// treeEntriesOf counts the entries a recursive tree listing of files holds:
// the files and every directory above them.
func treeEntriesOf(files []FileInfo) int {
	dirs := map[string]bool{}
	for _, f := range files {
		for d := f.Path; ; {
			i := strings.LastIndexByte(d, '/')
			if i < 0 {
				break
			}
			d = d[:i]
			if dirs[d] {
				break
			}
			dirs[d] = true
		}
	}
	return len(files) + len(dirs)
}

// listFiles is ListFiles; expect >= 0 is the number of entries model info
// implies (treeEntriesOf its siblings), which caps the page count.
func (c *Client) listFiles(ctx context.Context, repo, commit string, expect int) ([]FileInfo, error) {
	if err := checkRepoRev(repo, commit); err != nil {
		return nil, err
	}
	ctx = withInfo(ctx, reqInfo{repo: repo, revision: commit})
	u, err := c.apiURL("/api/models/"+repo+"/tree/"+url.PathEscape(commit), url.Values{"recursive": {"true"}, "expand": {"false"}})
	if err != nil {
		return nil, err
	}
	maxPages := maxTreePages
	if expect >= 0 {
		maxPages = min(maxPages, expect+treePageSlack)
	}
	var files []FileInfo
	seen := map[string]bool{}
	for page := 0; ; page++ {
		if page >= maxPages {
			why := ""
			if expect >= 0 {
				why = fmt.Sprintf(" (model info lists %d entries)", expect)
			}
			return nil, fmt.Errorf("tree of %s: %w: more than %d pages%s", repo, ErrBadResponse, maxPages, why)
		}
		seen[u.String()] = true
		var fs []FileInfo
		var n int
		_, hdr, err := c.getJSON(ctx, u, func(body []byte) (err error) {
			if fs, n, err = parseTreePageN(repo, body); err != nil {
				return fmt.Errorf("%w (page %d)", err, page+1)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
		if len(files) > maxFiles {
			return nil, fmt.Errorf("tree of %s: %w: more than %d files", repo, ErrBadResponse, maxFiles)
		}
		next, err := parseLinkNext(hdr.Get("Link"))
		if err != nil {
			return nil, fmt.Errorf("tree of %s: %w", repo, err)
		}
		if next == "" {
			break
		}
		if n == 0 {
			return nil, fmt.Errorf("tree of %s: %w: page %d is empty but links to a next page", repo, ErrBadResponse, page+1)
		}
		nu, err := u.Parse(next)
		if err != nil || (nu.Scheme != "http" && nu.Scheme != "https") {
			return nil, fmt.Errorf("tree of %s: %w: bad next-page URL", repo, ErrBadResponse)
		}
		if seen[nu.String()] {
			return nil, fmt.Errorf("tree of %s: %w: pagination loops back to an earlier page", repo, ErrBadResponse)
		}
		u = nu
	}
	if err := checkFileSet(repo, files); err != nil {
		return nil, err
	}
	return files, nil
}

// FileMeta is what HEAD /{repo}/resolve/{rev}/{path} says about a file.
type FileMeta struct {
	Commit string // X-Repo-Commit
	ETag   string // X-Linked-Etag, else ETag, unquoted: the blob name in the cache
	Size   int64  // X-Linked-Size, else Content-Length
	URL    string // where to GET the bytes (the CDN for LFS files); may carry a signature
	Linked bool   // metadata came from a redirect's X-Linked-* headers
}

// HeadFile resolves a file's metadata and download location. It follows
// relative and absolute redirects (at most 10, no loops) and stops at a
// redirect that carries X-Linked-Etag and X-Linked-Size (the LFS redirect to
// the CDN); the token is sent only to the Hub's own host.
func (c *Client) HeadFile(ctx context.Context, repo, revision, path string) (*FileMeta, error) {
	if err := checkRepoRev(repo, revision); err != nil {
		return nil, err
	}
	if err := ValidateRepoPath(path); err != nil {
		return nil, err
	}
	ctx = withInfo(ctx, reqInfo{repo: repo, revision: revision, path: path})
	u, err := c.apiURL("/"+repo+"/resolve/"+url.PathEscape(revision)+"/"+escapeRepoPath(path), nil)
	if err != nil {
		return nil, err
	}
	meta := &FileMeta{Size: -1}
	visited := map[string]bool{}
	for hop := 0; ; hop++ {
		if hop > maxRedirects || visited[u.String()] {
			return nil, fmt.Errorf("resolving %s in %s: %w", path, repo, errRedirectLoop)
		}
		visited[u.String()] = true
		hdr := http.Header{"Accept-Encoding": {"identity"}}
		resp, err := c.do(ctx, c.noFollow, http.MethodHead, u, hdr, func(resp *http.Response) error {
			if resp.StatusCode >= 200 && resp.StatusCode < 400 && resp.StatusCode != http.StatusNotModified {
				return nil
			}
			return c.responseError(resp)
		})
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		h := resp.Header
		if v := h.Get("X-Repo-Commit"); v != "" {
			if !isCommit(v) {
				return nil, fmt.Errorf("resolving %s in %s: %w: X-Repo-Commit is not a 40-hex commit", path, repo, ErrBadResponse)
			}
			meta.Commit = v
		}
		redirect := resp.StatusCode >= 300
		if redirect {
			loc := h.Get("Location")
			if loc == "" {
				return nil, fmt.Errorf("resolving %s in %s: %w: HTTP %d without Location", path, repo, ErrBadResponse, resp.StatusCode)
			}
			next, err := u.Parse(loc)
			if err != nil || (next.Scheme != "http" && next.Scheme != "https") {
				return nil, fmt.Errorf("resolving %s in %s: %w: bad Location", path, repo, ErrBadResponse)
			}
			if h.Get("X-Linked-Etag") != "" && h.Get("X-Linked-Size") == "" {
				return nil, fmt.Errorf("resolving %s in %s: %w: the LFS redirect carries X-Linked-Etag but no X-Linked-Size, so the file's size is unknown (a proxy between you and the Hub may strip it; set HF_ENDPOINT to a direct endpoint)", path, repo, ErrBadResponse)
			}
			if h.Get("X-Linked-Etag") != "" && h.Get("X-Linked-Size") != "" {
				if err := fillMeta(meta, h, true, repo, path); err != nil {
					return nil, err
				}
				meta.URL, meta.Linked = next.String(), true
				break
			}
			u = next
			continue
		}
		if err := fillMeta(meta, h, false, repo, path); err != nil {
			return nil, err
		}
		if meta.Size < 0 && resp.ContentLength >= 0 {
			meta.Size = resp.ContentLength
		}
		meta.URL = u.String()
		break
	}
	if meta.Size < 0 {
		return nil, fmt.Errorf("resolving %s in %s: %w: no X-Linked-Size or Content-Length", path, repo, ErrBadResponse)
	}
	if meta.Commit == "" {
		if !isCommit(revision) {
			return nil, fmt.Errorf("resolving %s in %s: %w: no X-Repo-Commit", path, repo, ErrBadResponse)
		}
		meta.Commit = revision
	}
	if isCommit(revision) && meta.Commit != revision {
		return nil, fmt.Errorf("resolving %s in %s@%s: %w: the Hub answered for commit %s", path, repo, revision, ErrBadResponse, meta.Commit)
	}
	return meta, nil
}

func fillMeta(m *FileMeta, h http.Header, linked bool, repo, path string) error {
	etag := h.Get("X-Linked-Etag")
	if etag == "" {
		etag = h.Get("ETag")
	}
	etag = normalizeETag(etag)
	if etag == "" {
		return fmt.Errorf("resolving %s in %s: %w: no ETag (is something between you and the Hub, like a captive portal?)", path, repo, ErrBadResponse)
	}
	if _, ok := digestForETag(etag); !ok {
		return fmt.Errorf("resolving %s in %s: %w: ETag %.80q is neither a sha256 nor a git sha1", path, repo, ErrBadResponse, etag)
	}
	m.ETag = etag
	if s := h.Get("X-Linked-Size"); s != "" {
		n, err := parseDecimal(strings.TrimSpace(s))
		if err != nil || n > maxFileSize {
			return fmt.Errorf("resolving %s in %s: %w: X-Linked-Size %.40q", path, repo, ErrBadResponse, s)
		}
		m.Size = n
	} else if !linked {
		if s := h.Get("Content-Length"); s != "" {
			n, err := parseDecimal(strings.TrimSpace(s))
			if err != nil || n > maxFileSize {
				return fmt.Errorf("resolving %s in %s: %w: Content-Length %.40q", path, repo, ErrBadResponse, s)
			}
			m.Size = n
		}
	}
	return nil
}

// normalizeETag strips a weak prefix and quotes.
func normalizeETag(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "W/")
	return strings.Trim(s, `"`)
}

// statusRange formats a Range header value for [off, off+n).
func statusRange(off, n int64) string {
	return "bytes=" + strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+n-1, 10)
}
