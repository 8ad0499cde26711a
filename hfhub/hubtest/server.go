// Package hubtest is a fake Hugging Face Hub for tests and local
// experiments: the model API (model_info, paginated tree, paths-info),
// /resolve with the LFS 302 to a CDN on a second host name, ranged reads,
// the Hub's error codes, per-repo auth, scripted failures and a request log.
//
// The Hub listens on 127.0.0.1 and the CDN on its own port reached as
// "localhost" (Config.CDNHost), so a client sees two different host names.
// LFS files are answered by a 302 to a signed, expiring CDN URL carrying
// X-Linked-Etag (sha256), X-Linked-Size and X-Repo-Commit; regular files are
// served by the Hub with a quoted git-blob-sha1 ETag. Every resolve answer
// carries X-Repo-Commit. No xet headers are ever sent.
//
// Repositories are built in memory with AddRepo/Commit or loaded from a
// directory with LoadDir (see there for how LFS files are chosen).
//
// # Faults
//
// Inject scripts misbehaviour (Fault). A fault selects requests by Route,
// Method, Path (the repository file), Seq (arrival number), Conn (the k-th
// connection of its listener) and an optional Match predicate
// (RangeCovers(0): the range holding a file's first bytes), then Skip and
// Times. At most one fault applies to a request. Besides statuses, resets,
// cuts and stalls there are:
//
//   - FaultCorrupt with a Mutation (flip bits, swap two equal-length
//     substrings, truncate) applied to exactly the chosen body: API JSON, a
//     tree page, an error body, a small file, one range of an LFS file;
//     with Mutation.Seed the positions are drawn from the seed;
//   - FaultHang: headers, AfterBytes of the body, then nothing;
//   - FaultTrickle with Rate: the body at Rate bytes/s (with Conn and
//     Times -1: every answer on one connection);
//   - FaultEmptyPages: empty tree pages, each with a fresh next link;
//   - FaultIgnoreRange (200 with the whole file), FaultSliceOK (200 with
//     exactly the slice and a correct Content-Range, as ModelScope does),
//     FaultIgnoreLaterRange (Range honoured only at offset 0);
//   - FaultNoLinkedSize: the LFS redirect lacks X-Linked-Size.
//
// Requests returns the log (route, file, parsed range, connection, status,
// body bytes, the fault and what a mutation did); BytesServed sums the
// bytes sent for a file, or for ranges starting at given offsets.
package hubtest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures a Server; the zero value is usable.
type Config struct {
	HubAddr      string        // listen address of the Hub (default "127.0.0.1:0")
	CDNAddr      string        // listen address of the CDN (default "127.0.0.1:0")
	CDNHost      string        // host name in CDN URLs (default "localhost"); must resolve to CDNAddr's IP
	TreePageSize int           // entries per tree page (default 1000)
	URLTTL       time.Duration // lifetime of signed CDN URLs (default 1 h)
	// BandwidthPerConn caps each response body at this many bytes per
	// second (0: unlimited); a connection serves one response at a time, so
	// this is a per-connection cap.
	BandwidthPerConn int64
	ResolveCache     bool // regular files: 307 to a relative /api/resolve-cache/… URL first
	LFSDirect        bool // serve LFS files from the Hub itself (200) instead of the CDN redirect
	AllowAuthOnCDN   bool // by default the CDN answers 400 to any request with Authorization
}

// File is a file to serve. Exactly one of Data and Content is used.
type File struct {
	Path    string
	Data    []byte
	Content Content
	LFS     bool
}

// RepoOptions sets a repository's visibility.
type RepoOptions struct {
	Private bool
	Gated   string // "", "auto" or "manual": tokens need a grant (GrantToken)
}

type snapshot struct {
	commit string
	files  map[string]*blob
	paths  []string
	parent string
	time   time.Time
}

type repo struct {
	id       string
	opts     RepoOptions
	branches map[string]string
	commits  map[string]*snapshot
}

// Server is a running fake Hub.
type Server struct {
	// URL is the Hub endpoint (use it as HF_ENDPOINT); CDNURL the CDN's base.
	URL    string
	CDNURL string

	cfg    Config
	hub    *httptest.Server
	cdn    *httptest.Server
	secret []byte

	mu      sync.Mutex
	repos   map[string]*repo
	cdnBlob map[string]*cdnEntry // sha256 → content
	tokens  map[string]map[string]bool
	faults  []*Fault
	log     []Request
	seq     int
	reqIDs  int
	running int // handlers that have not returned (Settle)
}

type cdnEntry struct {
	b     *blob
	paths map[string]bool
}

// NewServer starts a fake Hub and its CDN.
func NewServer(cfg Config) (*Server, error) {
	if cfg.HubAddr == "" {
		cfg.HubAddr = "127.0.0.1:0"
	}
	if cfg.CDNAddr == "" {
		cfg.CDNAddr = "127.0.0.1:0"
	}
	if cfg.CDNHost == "" {
		cfg.CDNHost = "localhost"
	}
	if cfg.TreePageSize <= 0 {
		cfg.TreePageSize = 1000
	}
	if cfg.URLTTL <= 0 {
		cfg.URLTTL = time.Hour
	}
	s := &Server{cfg: cfg, repos: map[string]*repo{}, cdnBlob: map[string]*cdnEntry{}, tokens: map[string]map[string]bool{}}
	s.secret = make([]byte, 32)
	rand.Read(s.secret)
	hl, err := net.Listen("tcp", cfg.HubAddr)
	if err != nil {
		return nil, fmt.Errorf("hub listener: %w", err)
	}
	cl, err := net.Listen("tcp", cfg.CDNAddr)
	if err != nil {
		hl.Close()
		return nil, fmt.Errorf("cdn listener: %w", err)
	}
	s.hub = &httptest.Server{Listener: hl, Config: &http.Server{Handler: s.handler(roleHub), ConnContext: connCounter()}}
	s.cdn = &httptest.Server{Listener: cl, Config: &http.Server{Handler: s.handler(roleCDN), ConnContext: connCounter()}}
	s.hub.Start()
	s.cdn.Start()
	s.URL = "http://" + hl.Addr().String()
	_, port, _ := net.SplitHostPort(cl.Addr().String())
	s.CDNURL = "http://" + net.JoinHostPort(cfg.CDNHost, port)
	return s, nil
}

// Close stops both listeners, cutting open connections.
func (s *Server) Close() {
	s.hub.CloseClientConnections()
	s.cdn.CloseClientConnections()
	s.hub.Close()
	s.cdn.Close()
}

// AddRepo creates (or replaces) a repository whose "main" branch holds files,
// and returns the commit.
func (s *Server) AddRepo(id string, files []File, opts RepoOptions) (string, error) {
	s.mu.Lock()
	s.repos[id] = &repo{id: id, opts: opts, branches: map[string]string{}, commits: map[string]*snapshot{}}
	s.mu.Unlock()
	return s.Commit(id, "main", files)
}

// MustAddRepo is AddRepo that panics on error (for tests).
func (s *Server) MustAddRepo(id string, files []File, opts RepoOptions) string {
	c, err := s.AddRepo(id, files, opts)
	if err != nil {
		panic(err)
	}
	return c
}

// Commit makes a new commit holding exactly files on branch (created if
// needed), moving the branch; older commits stay reachable by sha.
func (s *Server) Commit(id, branch string, files []File) (string, error) {
	snap := &snapshot{files: map[string]*blob{}, time: time.Now().UTC()}
	for _, f := range files {
		c := f.Content
		if c == nil {
			c = Bytes(f.Data)
		}
		b, err := newBlob(c, f.LFS)
		if err != nil {
			return "", fmt.Errorf("%s: %w", f.Path, err)
		}
		if _, dup := snap.files[f.Path]; dup {
			return "", fmt.Errorf("%s listed twice", f.Path)
		}
		snap.files[f.Path] = b
		snap.paths = append(snap.paths, f.Path)
	}
	sort.Strings(snap.paths)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil {
		return "", fmt.Errorf("no repository %s", id)
	}
	snap.parent = r.branches[branch]
	h := sha1.New()
	fmt.Fprintf(h, "repo %s\nparent %s\nbranch %s\ntime %d\n", id, snap.parent, branch, snap.time.UnixNano())
	for _, p := range snap.paths {
		fmt.Fprintf(h, "%s %s\n", snap.files[p].oid(), p)
	}
	snap.commit = hex.EncodeToString(h.Sum(nil))
	r.commits[snap.commit] = snap
	r.branches[branch] = snap.commit
	for _, p := range snap.paths {
		b := snap.files[p]
		if b.lfs {
			e := s.cdnBlob[b.sha256]
			if e == nil {
				e = &cdnEntry{b: b, paths: map[string]bool{}}
				s.cdnBlob[b.sha256] = e
			}
			e.paths[p] = true
		}
	}
	return snap.commit, nil
}

// SetRef points a branch or tag at an existing commit.
func (s *Server) SetRef(id, name, commit string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[id]
	if r == nil || r.commits[commit] == nil {
		return fmt.Errorf("no commit %s in %s", commit, id)
	}
	r.branches[name] = commit
	return nil
}

// Head returns the commit a branch points to.
func (s *Server) Head(id, branch string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.repos[id]; r != nil {
		return r.branches[branch]
	}
	return ""
}

// AddToken makes token valid and grants it access to the given private or
// gated repositories (public ones need no grant).
func (s *Server) AddToken(token string, repos ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.tokens[token]
	if g == nil {
		g = map[string]bool{}
		s.tokens[token] = g
	}
	for _, r := range repos {
		g[r] = true
	}
}

func (s *Server) requestID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqIDs++
	return "Root=1-fake-" + strconv.Itoa(s.reqIDs)
}

// sign returns the query of a CDN URL for sha, valid until exp.
func (s *Server) sign(sha string, exp int64) string {
	m := hmac.New(sha256.New, s.secret)
	fmt.Fprintf(m, "%s|%d", sha, exp)
	return hex.EncodeToString(m.Sum(nil))
}

func (s *Server) cdnURL(b *blob, filename string) string {
	exp := time.Now().Add(s.cfg.URLTTL).Unix()
	disp := "inline; filename*=UTF-8''" + pathEscape(filename) + "; filename=\"" + asciiName(filename) + "\";"
	return s.CDNURL + "/repos/" + b.sha256[:2] + "/" + b.sha256[2:4] + "/" + b.sha256 +
		"?response-content-disposition=" + queryEscape(disp) +
		"&Expires=" + strconv.FormatInt(exp, 10) + "&Signature=" + s.sign(b.sha256, exp) + "&Key-Pair-Id=KFAKE"
}

func asciiName(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '_'
		}
		return r
	}, s)
}
