package hubtest

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

type role string

const (
	roleHub role = "hub"
	roleCDN role = "cdn"
)

// logWriter records status and body size for the log, and carries out the
// body-level faults (mutate.go).
type logWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	bf     *bodyFault
}

func (w *logWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	if w.bf != nil && w.bf.f.Kind == FaultCorrupt {
		w.bf.held = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *logWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if n, err, ok := w.faultWrite(b); ok {
		return n, err
	}
	return w.rawWrite(b)
}

func (w *logWriter) rawWrite(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *logWriter) Flush() {
	if w.bf != nil && w.bf.held {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *logWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// call is the state of one request.
type call struct {
	s     *Server
	w     *logWriter
	r     *http.Request
	entry Request
	fault *Fault
}

func (s *Server) handler(rl role) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{s: s, w: &logWriter{ResponseWriter: w}, r: r}
		c.entry = Request{Role: string(rl), Method: r.Method, Host: r.Host,
			Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Range: r.Header.Get("Range"),
			Auth: r.Header.Get("Authorization") != "", UserAgent: r.Header.Get("User-Agent")}
		c.entry.RangeOff, c.entry.RangeLen = logRange(c.entry.Range)
		c.entry.Conn, _ = r.Context().Value(connKey{}).(int)
		idx := s.begin(&c.entry)
		defer func() {
			note := c.w.finishFault()
			c.entry.Status, c.entry.BodyBytes = c.w.status, c.w.bytes
			if c.fault != nil {
				c.entry.Fault = c.fault.Kind.String()
				if note != "" {
					c.entry.Fault += " " + note
				}
			}
			s.update(idx, c.entry)
			s.finish()
		}()
		if rl == roleCDN {
			c.serveCDN()
		} else {
			c.serveHub()
		}
	})
}

// apply takes the fault for this request, if any, and handles the kinds
// that replace the whole answer. It reports whether the answer was given.
func (c *call) apply(route Route, path string) bool {
	c.entry.Route = route
	c.entry.File = path
	c.fault = c.s.takeFault(c.entry)
	f := c.fault
	if f != nil {
		c.entry.Fault = f.Kind.String()
	}
	c.s.update(c.entry.Seq, c.entry)
	if f == nil {
		return false
	}
	c.w.setFault(f, c.r.Context().Done())
	switch f.Kind {
	case FaultHang:
		if f.Status != 0 {
			c.errorJSON(f.Status, "", fmt.Sprintf("injected HTTP %d", f.Status))
			return true
		}
	case FaultHook:
		if f.Hook != nil {
			f.Hook()
		}
		c.fault = nil
		c.entry.Fault = "hook"
	case FaultStallHeaders:
		select {
		case <-c.r.Context().Done():
			return true
		case <-time.After(f.Delay):
		}
	case FaultStatus:
		h := c.w.Header()
		if f.RetryAfter != "" {
			h.Set("Retry-After", f.RetryAfter)
		}
		if f.RateLimit != "" {
			h.Set("RateLimit", f.RateLimit)
			h.Set("RateLimit-Policy", `"fixed window";"resolvers";q=3000;w=300`)
		}
		status := f.Status
		if status == 0 {
			status = http.StatusServiceUnavailable
		}
		c.errorJSON(status, "", fmt.Sprintf("injected HTTP %d", status))
		return true
	case FaultReset:
		c.abort()
		return true
	case FaultHTML:
		body := "<html><body><h1>Welcome to the hotel wifi</h1><p>Please log in.</p></body></html>"
		c.w.Header().Set("Content-Type", "text/html")
		c.w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		c.w.WriteHeader(http.StatusOK)
		if c.r.Method != http.MethodHead {
			io.WriteString(c.w, body)
		}
		return true
	case FaultExpire:
		if route == RouteCDN {
			c.w.Header().Set("Content-Type", "application/xml")
			c.w.WriteHeader(http.StatusForbidden)
			io.WriteString(c.w, "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>")
			return true
		}
	case FaultRedirectLoop:
		if route == RouteResolve {
			c.w.Header().Set("Location", c.r.URL.RequestURI())
			c.w.WriteHeader(http.StatusFound)
			return true
		}
	}
	return false
}

// abort drops the connection without a (complete) answer.
func (c *call) abort() {
	if conn, _, err := c.w.Hijack(); err == nil {
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		conn.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

func (c *call) errorJSON(status int, code, msg string) {
	h := c.w.Header()
	if code != "" {
		h.Set("X-Error-Code", code)
	}
	h.Set("X-Error-Message", msg)
	h.Set("X-Request-Id", c.s.requestID())
	h.Set("Content-Type", "application/json; charset=utf-8")
	body, _ := json.Marshal(map[string]string{"error": msg})
	h.Set("Content-Length", strconv.Itoa(len(body)))
	c.w.WriteHeader(status)
	if c.r.Method != http.MethodHead {
		c.w.Write(body)
	}
}

func (c *call) writeJSON(v any, extra http.Header) {
	body, err := json.Marshal(v)
	if err != nil {
		c.errorJSON(500, "", err.Error())
		return
	}
	if c.fault != nil && c.fault.Kind == FaultTruncatedJSON {
		body = body[:len(body)/2]
	}
	h := c.w.Header()
	for k, v := range extra {
		h[k] = v
	}
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Request-Id", c.s.requestID())
	c.w.WriteHeader(http.StatusOK)
	if c.r.Method != http.MethodHead {
		c.w.Write(body)
	}
}

// splitRepo finds the repository id before a marker segment; the id is one
// or two escaped segments, and a %2F inside one is refused (as the Hub does).
func splitRepo(segs []string, markers ...string) (id string, marker string, rest []string, bad bool, ok bool) {
	for _, n := range []int{2, 1} {
		if len(segs) > n {
			for _, m := range markers {
				if segs[n] == m {
					parts := make([]string, n)
					for i := 0; i < n; i++ {
						if strings.Contains(strings.ToLower(segs[i]), "%2f") {
							return "", "", nil, true, false
						}
						u, err := url.PathUnescape(segs[i])
						if err != nil {
							return "", "", nil, true, false
						}
						parts[i] = u
					}
					return strings.Join(parts, "/"), m, segs[n+1:], false, true
				}
			}
		}
	}
	return "", "", nil, false, false
}

func unescapePath(segs []string) (string, error) {
	out := make([]string, len(segs))
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			return "", err
		}
		out[i] = u
	}
	return strings.Join(out, "/"), nil
}

func (c *call) serveHub() {
	p := c.r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/api/resolve-cache/models/"):
		c.serveResolveCache(strings.Split(strings.TrimPrefix(p, "/api/resolve-cache/models/"), "/"))
	case strings.HasPrefix(p, "/api/models/"):
		segs := strings.Split(strings.TrimPrefix(p, "/api/models/"), "/")
		id, marker, rest, bad, ok := splitRepo(segs, "revision", "tree", "paths-info")
		if bad {
			c.apply(RouteOther, "")
			c.errorJSON(http.StatusBadRequest, "", "Invalid repo id: use '/' not '%2F'")
			return
		}
		if !ok { // model_info of the default branch: /api/models/{repo}
			if len(segs) < 1 || len(segs) > 2 {
				c.apply(RouteOther, "")
				c.errorJSON(http.StatusNotFound, "", "Sorry, we can't find the page you are looking for.")
				return
			}
			id, err := unescapePath(segs)
			if err != nil || strings.Contains(strings.ToLower(p), "%2f") {
				c.apply(RouteOther, "")
				c.errorJSON(http.StatusBadRequest, "", "Invalid repo id")
				return
			}
			c.serveInfo(id, "main")
			return
		}
		if len(rest) < 1 {
			c.apply(RouteOther, "")
			c.errorJSON(http.StatusNotFound, "", "missing revision")
			return
		}
		rev, err := url.PathUnescape(rest[0])
		if err != nil {
			c.apply(RouteOther, "")
			c.errorJSON(http.StatusBadRequest, "", "bad revision escape")
			return
		}
		switch marker {
		case "revision":
			c.serveInfo(id, rev)
		case "tree":
			dir, err := unescapePath(rest[1:])
			if err != nil {
				c.errorJSON(http.StatusBadRequest, "", "bad path escape")
				return
			}
			c.serveTree(id, rev, strings.Trim(dir, "/"))
		case "paths-info":
			c.servePathsInfo(id, rev)
		}
	case strings.HasPrefix(p, "/api/"):
		c.apply(RouteOther, "")
		c.errorJSON(http.StatusNotFound, "RepoNotFound", "Repository not found")
	default:
		segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
		id, _, rest, bad, ok := splitRepo(segs, "resolve")
		if bad {
			c.apply(RouteOther, "")
			c.errorJSON(http.StatusBadRequest, "", "Invalid repo id")
			return
		}
		if !ok || len(rest) < 2 {
			c.apply(RouteOther, "")
			c.errorJSON(http.StatusNotFound, "", "Sorry, we can't find the page you are looking for.")
			return
		}
		rev, err1 := url.PathUnescape(rest[0])
		file, err2 := unescapePath(rest[1:])
		if err1 != nil || err2 != nil {
			c.apply(RouteOther, "")
			c.errorJSON(http.StatusBadRequest, "", "bad escape")
			return
		}
		c.serveResolve(id, rev, file)
	}
}

// lookup checks access and resolves the revision. On failure it has
// answered already.
func (c *call) lookup(id, rev string) (*repo, *snapshot, bool) {
	c.entry.Repo, c.entry.Revision = id, rev
	c.s.update(c.entry.Seq, c.entry)
	auth := c.r.Header.Get("Authorization")
	token, hasBearer := strings.CutPrefix(auth, "Bearer ")
	c.s.mu.Lock()
	r := c.s.repos[id]
	grants, validToken := c.s.tokens[token]
	var snap *snapshot
	commit := ""
	if r != nil {
		commit = r.branches[rev]
		if commit == "" && r.commits[rev] != nil {
			commit = rev
		}
		snap = r.commits[commit]
	}
	c.s.mu.Unlock()
	if auth != "" && (!hasBearer || !validToken) {
		c.errorJSON(http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return nil, nil, false
	}
	anon := auth == ""
	if r == nil || r.opts.Private && !grants[id] {
		if anon {
			c.errorJSON(http.StatusUnauthorized, "RepoNotFound", "Repository not found")
		} else {
			c.errorJSON(http.StatusNotFound, "RepoNotFound", "Repository not found")
		}
		return nil, nil, false
	}
	if r.opts.Gated != "" && !grants[id] {
		if anon {
			c.errorJSON(http.StatusUnauthorized, "GatedRepo", "Access to model "+id+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
		} else {
			c.errorJSON(http.StatusForbidden, "GatedRepo", "Access to model "+id+" is restricted and you are not in the authorized list. Visit https://huggingface.co/"+id+" to ask for access.")
		}
		return nil, nil, false
	}
	if snap == nil {
		c.errorJSON(http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, nil, false
	}
	return r, snap, true
}

func boolParam(q url.Values, k string) bool {
	return strings.EqualFold(q.Get(k), "true") || q.Get(k) == "1"
}

type wireLFS struct {
	SHA256      string `json:"sha256,omitempty"`
	OID         string `json:"oid,omitempty"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

type wireSibling struct {
	RFilename string   `json:"rfilename"`
	Size      *int64   `json:"size,omitempty"`
	BlobID    string   `json:"blobId,omitempty"`
	LFS       *wireLFS `json:"lfs,omitempty"`
}

func (c *call) serveInfo(id, rev string) {
	if c.apply(RouteInfo, "") {
		return
	}
	if c.r.Method != http.MethodGet {
		c.errorJSON(http.StatusMethodNotAllowed, "", "method not allowed")
		return
	}
	r, snap, ok := c.lookup(id, rev)
	if !ok {
		return
	}
	blobs := boolParam(c.r.URL.Query(), "blobs")
	sib := make([]wireSibling, 0, len(snap.paths))
	for _, p := range snap.paths {
		b := snap.files[p]
		w := wireSibling{RFilename: p}
		if blobs {
			sz := b.size
			w.Size, w.BlobID = &sz, b.oid()
			if b.lfs {
				w.LFS = &wireLFS{SHA256: b.sha256, Size: b.size, PointerSize: len(b.pointer)}
			}
		}
		sib = append(sib, w)
	}
	var gated any = false
	if r.opts.Gated != "" {
		gated = r.opts.Gated
	}
	ts := snap.time.Format("2006-01-02T15:04:05.000Z")
	c.writeJSON(map[string]any{
		"_id": "fake" + snap.commit[:20], "id": id, "modelId": id, "author": strings.Split(id, "/")[0],
		"sha": snap.commit, "lastModified": ts, "createdAt": ts, "private": r.opts.Private, "gated": gated,
		"disabled": false, "downloads": 0, "likes": 0, "tags": []string{}, "siblings": sib,
	}, nil)
}

type treeEntry struct {
	Type string   `json:"type"`
	OID  string   `json:"oid"`
	Size int64    `json:"size"`
	Path string   `json:"path"`
	LFS  *wireLFS `json:"lfs,omitempty"`
}

// entries lists the files and directories under dir (all levels when
// recursive), sorted by path.
func (snap *snapshot) entries(dir string, recursive bool) ([]treeEntry, bool) {
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	dirs := map[string]bool{}
	var out []treeEntry
	found := dir == ""
	for _, p := range snap.paths {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		found = true
		rel := p[len(prefix):]
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			d := prefix + strings.Join(parts[:i], "/")
			if !recursive && i > 1 {
				break
			}
			if !dirs[d] {
				dirs[d] = true
				out = append(out, treeEntry{Type: "directory", OID: gitBlobID([]byte("tree " + d)), Size: 0, Path: d})
			}
		}
		if !recursive && len(parts) > 1 {
			continue
		}
		b := snap.files[p]
		e := treeEntry{Type: "file", OID: b.oid(), Size: b.size, Path: p}
		if b.lfs {
			e.LFS = &wireLFS{OID: b.sha256, Size: b.size, PointerSize: len(b.pointer)}
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, found
}

func (c *call) serveTree(id, rev, dir string) {
	if c.apply(RouteTree, "") {
		return
	}
	_, snap, ok := c.lookup(id, rev)
	if !ok {
		return
	}
	q := c.r.URL.Query()
	all, found := snap.entries(dir, boolParam(q, "recursive"))
	if !found {
		c.w.Header().Set("X-Repo-Commit", snap.commit)
		c.errorJSON(http.StatusNotFound, "EntryNotFound", fmt.Sprintf("%s does not exist on %q", dir, rev))
		return
	}
	if c.fault != nil && c.fault.Kind == FaultEmptyPages {
		c.s.mu.Lock()
		c.s.reqIDs++
		n := c.s.reqIDs
		c.s.mu.Unlock()
		q.Set("page-nonce", strconv.Itoa(n)) // same cursor, a URL never seen before
		next := c.s.URL + c.r.URL.EscapedPath() + "?" + q.Encode()
		c.writeJSON([]treeEntry{}, http.Header{"Link": {"<" + next + `>; rel="next"`}})
		return
	}
	start := 0
	if cur := q.Get("cursor"); cur != "" {
		b, err := base64.RawURLEncoding.DecodeString(cur)
		n, err2 := strconv.Atoi(string(b))
		if err != nil || err2 != nil || n < 0 || n > len(all) {
			c.errorJSON(http.StatusBadRequest, "", "invalid cursor")
			return
		}
		start = n
	}
	end := min(start+c.s.cfg.TreePageSize, len(all))
	extra := http.Header{}
	if end < len(all) {
		q.Set("cursor", base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(end))))
		next := c.s.URL + c.r.URL.EscapedPath() + "?" + q.Encode()
		extra.Set("Link", "<"+next+`>; rel="next"`)
	}
	c.writeJSON(all[start:end], extra)
}

func (c *call) servePathsInfo(id, rev string) {
	if c.apply(RoutePaths, "") {
		return
	}
	if c.r.Method != http.MethodPost {
		c.errorJSON(http.StatusMethodNotAllowed, "", "use POST")
		return
	}
	_, snap, ok := c.lookup(id, rev)
	if !ok {
		return
	}
	var paths []string
	body, _ := io.ReadAll(io.LimitReader(c.r.Body, 1<<20))
	var j struct {
		Paths []string `json:"paths"`
	}
	if json.Unmarshal(body, &j) == nil && j.Paths != nil {
		paths = j.Paths
	} else if v, err := url.ParseQuery(string(body)); err == nil {
		paths = v["paths"]
	}
	all, _ := snap.entries("", true)
	byPath := map[string]treeEntry{}
	for _, e := range all {
		byPath[e.Path] = e
	}
	out := []treeEntry{}
	for _, p := range paths {
		if e, ok := byPath[strings.Trim(p, "/")]; ok {
			out = append(out, e)
		}
	}
	c.writeJSON(out, nil)
}

func (c *call) serveResolve(id, rev, file string) {
	if c.apply(RouteResolve, file) {
		return
	}
	if c.r.Method != http.MethodGet && c.r.Method != http.MethodHead {
		c.errorJSON(http.StatusMethodNotAllowed, "", "method not allowed")
		return
	}
	_, snap, ok := c.lookup(id, rev)
	if !ok {
		return
	}
	h := c.w.Header()
	h.Set("X-Repo-Commit", snap.commit)
	b := snap.files[file]
	if b == nil {
		c.errorJSON(http.StatusNotFound, "EntryNotFound", fmt.Sprintf("Entry not found: %s", file))
		return
	}
	if b.lfs && !c.s.cfg.LFSDirect {
		loc := c.s.cdnURL(b, file[strings.LastIndexByte(file, '/')+1:])
		body := "Found. Redirecting to " + loc
		h.Set("Location", loc)
		h.Set("X-Linked-Etag", `"`+b.sha256+`"`)
		if !(c.fault != nil && c.fault.Kind == FaultNoLinkedSize) {
			h.Set("X-Linked-Size", strconv.FormatInt(b.size, 10))
		}
		h.Set("ETag", `"`+b.pointerOID+`"`)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set("Vary", "Origin, Accept")
		c.w.WriteHeader(http.StatusFound)
		if c.r.Method != http.MethodHead {
			io.WriteString(c.w, body)
		}
		return
	}
	if !b.lfs && c.s.cfg.ResolveCache {
		loc := "/api/resolve-cache/models/" + id + "/" + snap.commit + "/" + escapeSegments(file) +
			"?%2F" + url.QueryEscape(id) + "%2Fresolve%2F" + url.QueryEscape(rev) + "%2F" + url.QueryEscape(file) + "=&etag=%22" + b.gitSHA1 + "%22"
		h.Set("Location", loc)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		body := "Temporary Redirect. Redirecting to " + loc
		h.Set("Content-Length", strconv.Itoa(len(body)))
		c.w.WriteHeader(http.StatusTemporaryRedirect)
		if c.r.Method != http.MethodHead {
			io.WriteString(c.w, body)
		}
		return
	}
	if b.lfs {
		h.Set("X-Linked-Etag", `"`+b.sha256+`"`)
		h.Set("X-Linked-Size", strconv.FormatInt(b.size, 10))
		h.Set("ETag", `"`+b.pointerOID+`"`)
	} else {
		h.Set("ETag", `"`+b.gitSHA1+`"`)
	}
	c.serveContent(b.content, b.size)
}

func (c *call) serveResolveCache(segs []string) {
	// {org}/{name}/{sha}/{path...} or {name}/{sha}/{path...}
	for _, n := range []int{2, 1} {
		if len(segs) > n+1 && len(segs[n]) == 40 {
			id, err1 := unescapePath(segs[:n])
			file, err2 := unescapePath(segs[n+1:])
			if err1 != nil || err2 != nil {
				break
			}
			c.s.mu.Lock()
			r := c.s.repos[id]
			known := r != nil && r.commits[segs[n]] != nil
			c.s.mu.Unlock()
			if !known {
				continue
			}
			if c.apply(RouteCache, file) {
				return
			}
			_, snap, ok := c.lookup(id, segs[n])
			if !ok {
				return
			}
			b := snap.files[file]
			c.w.Header().Set("X-Repo-Commit", snap.commit)
			if b == nil {
				c.errorJSON(http.StatusNotFound, "EntryNotFound", "Entry not found")
				return
			}
			c.w.Header().Set("ETag", `"`+b.oid()+`"`)
			c.serveContent(b.content, b.size)
			return
		}
	}
	c.apply(RouteOther, "")
	c.errorJSON(http.StatusNotFound, "", "not found")
}

func (c *call) serveCDN() {
	p := c.r.URL.EscapedPath()
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(segs) != 4 || segs[0] != "repos" {
		c.apply(RouteOther, "")
		http.NotFound(c.w, c.r)
		return
	}
	sha := segs[3]
	c.s.mu.Lock()
	e := c.s.cdnBlob[sha]
	var name string
	if e != nil {
		for n := range e.paths {
			if name == "" || n < name {
				name = n
			}
		}
	}
	c.s.mu.Unlock()
	// A fault for a path applies to any path sharing this content.
	file := name
	if e != nil {
		for n := range e.paths {
			if c.s.hasFaultFor(RouteCDN, n) {
				file = n
				break
			}
		}
	}
	if c.apply(RouteCDN, file) {
		return
	}
	if c.r.Header.Get("Authorization") != "" && !c.s.cfg.AllowAuthOnCDN {
		c.w.Header().Set("Content-Type", "application/xml")
		c.w.WriteHeader(http.StatusBadRequest)
		io.WriteString(c.w, "<Error><Code>InvalidArgument</Code><Message>Only one auth mechanism allowed</Message></Error>")
		return
	}
	q := c.r.URL.Query()
	exp, err := strconv.ParseInt(q.Get("Expires"), 10, 64)
	if e == nil || err != nil || q.Get("Signature") != c.s.sign(sha, exp) {
		c.w.WriteHeader(http.StatusForbidden)
		io.WriteString(c.w, "<Error><Code>AccessDenied</Code><Message>Access denied</Message></Error>")
		return
	}
	if time.Now().Unix() >= exp {
		c.w.WriteHeader(http.StatusForbidden)
		io.WriteString(c.w, "<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>")
		return
	}
	h := c.w.Header()
	h.Set("ETag", `"`+gitBlobID([]byte("cdn "+sha))+gitBlobID([]byte(sha))[:24]+`"`)
	if d := q.Get("response-content-disposition"); d != "" && len(d) < 1024 {
		h.Set("Content-Disposition", asciiName(d))
	}
	h.Set("X-Cache", "Miss from cloudfront")
	c.serveContent(e.b.content, e.b.size)
}

func (s *Server) hasFaultFor(route Route, path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		if f.Route == route && f.Path == path && (f.Times < 0 || f.used < f.Times) {
			return true
		}
	}
	return false
}

// logRange parses a Range header for the log: one "bytes=a-b" or "bytes=a-"
// range (length -1 for an open end), else (-1, -1).
func logRange(h string) (off, n int64) {
	spec, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	a, b, ok2 := strings.Cut(spec, "-")
	if !ok || !ok2 || strings.Contains(spec, ",") {
		return -1, -1
	}
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 {
		return -1, -1
	}
	if b == "" {
		return first, -1
	}
	last, err := strconv.ParseInt(b, 10, 64)
	if err != nil || last < first {
		return -1, -1
	}
	return first, last - first + 1
}

// connKey is the context key of a connection's number.
type connKey struct{}

// connCounter numbers the connections a listener accepts (1, 2, …).
func connCounter() func(context.Context, net.Conn) context.Context {
	var n atomic.Int64
	return func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, int(n.Add(1)))
	}
}

// parseRange parses a single "bytes=" range against size. ok=false with
// satisfiable=false means 416; multi=true means "serve the whole file".
func parseRange(h string, size int64) (off, n int64, ok, multi bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !found {
		return 0, size, false, true
	}
	if strings.Contains(spec, ",") {
		return 0, size, false, true
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, size, false, true
	}
	if a == "" { // suffix
		k, err := strconv.ParseInt(b, 10, 64)
		if err != nil || k <= 0 || size == 0 {
			return 0, 0, false, false
		}
		k = min(k, size)
		return size - k, k, true, false
	}
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || first < 0 {
		return 0, size, false, true
	}
	if first >= size {
		return 0, 0, false, false
	}
	last := size - 1
	if b != "" {
		l, err := strconv.ParseInt(b, 10, 64)
		if err != nil || l < first {
			return 0, size, false, true
		}
		last = min(l, size-1)
	}
	return first, last - first + 1, true, false
}

// serveContent answers HEAD/GET for content with Range support, applying
// body-level faults and the bandwidth cap.
func (c *call) serveContent(content Content, size int64) {
	h := c.w.Header()
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Type", "application/octet-stream")
	f := c.fault
	off, n := int64(0), size
	status := http.StatusOK
	if rh := c.r.Header.Get("Range"); rh != "" && !(f != nil && f.Kind == FaultIgnoreRange) {
		o, k, ok, multi := parseRange(rh, size)
		switch {
		case f != nil && f.Kind == FaultIgnoreLaterRange && ok && o > 0:
		case multi:
		case !ok:
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			h.Del("Content-Type")
			c.w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
			return
		default:
			off, n, status = o, k, http.StatusPartialContent
		}
	}
	dataOff := off
	if status == http.StatusPartialContent && f != nil {
		switch f.Kind {
		case FaultWrongOffset:
			shift := min(max(f.Shift, 1), off)
			if shift == 0 { // cannot start before 0: answer a range one byte shorter (or later) instead
				if n > 1 {
					n--
				} else if off+1 < size {
					off++
				}
			}
			off -= shift
			dataOff = off
		case FaultLyingRange:
			shift := min(max(f.Shift, 1), off)
			if shift == 0 {
				dataOff = min(off+1, size-n)
			} else {
				dataOff = off - shift
			}
		}
	}
	if status == http.StatusPartialContent && !(f != nil && f.Kind == FaultNoContentRange) {
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, size))
		if f != nil && f.Kind == FaultSliceOK {
			status = http.StatusOK
		}
	}
	declared := n
	if f != nil && f.Kind == FaultBadLength {
		declared = n + 1
	}
	h.Set("Content-Length", strconv.FormatInt(declared, 10))
	c.w.WriteHeader(status)
	if c.r.Method == http.MethodHead {
		return
	}
	c.writeBody(content, dataOff, n)
	if f != nil && f.Kind == FaultBadLength {
		c.w.Flush()
		panic(http.ErrAbortHandler)
	}
}

func (c *call) writeBody(content Content, off, n int64) {
	f := c.fault
	rate := c.s.cfg.BandwidthPerConn
	buf := make([]byte, 64<<10)
	if f != nil && f.Kind == FaultTrickle && f.Rate <= 0 {
		buf = buf[:1]
	}
	start := time.Now()
	var sent int64
	ctx := c.r.Context()
	stalled := false
	cutAt := int64(-1)
	if f != nil && f.Kind == FaultCut {
		cutAt = min(f.AfterBytes, n-1) // at most everything but the last byte
	}
	for sent < n {
		if f != nil && f.Kind == FaultStall && sent >= f.AfterBytes && !stalled {
			stalled = true
			c.w.Flush()
			select {
			case <-ctx.Done():
				return
			case <-time.After(f.Delay):
			}
		}
		k := min(int64(len(buf)), n-sent)
		if cutAt >= 0 {
			if sent >= cutAt {
				c.w.Flush()
				panic(http.ErrAbortHandler)
			}
			k = min(k, cutAt-sent)
		}
		if f != nil && f.Kind == FaultStall && sent < f.AfterBytes {
			k = min(k, f.AfterBytes-sent)
		}
		m, err := content.ReadAt(buf[:k], off+sent)
		if m == 0 && err != nil {
			panic(http.ErrAbortHandler)
		}
		chunk := buf[:m]
		if f != nil && f.Kind == FaultWrongBytes && sent == 0 {
			chunk[len(chunk)/2] ^= 0x5a
		}
		if _, err := c.w.Write(chunk); err != nil {
			return
		}
		sent += int64(m)
		if f != nil {
			switch {
			case f.Kind == FaultTrickle && f.Rate <= 0:
				c.w.Flush()
				select {
				case <-ctx.Done():
					return
				case <-time.After(f.Delay):
				}
			}
		}
		if rate > 0 {
			want := time.Duration(float64(sent) / float64(rate) * float64(time.Second))
			if d := want - time.Since(start); d > 0 {
				c.w.Flush()
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
	}
}

func escapeSegments(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

func pathEscape(s string) string  { return url.PathEscape(s) }
func queryEscape(s string) string { return url.QueryEscape(s) }

var _ = errors.New
