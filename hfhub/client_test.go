package hfhub

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

const secretToken = "hf_TESTsecretTOKENvalue1234567890"

func TestErrorsAreActionable(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	hub.MustAddRepo("org/public", smallRepo(1), hubtest.RepoOptions{})
	hub.MustAddRepo("org/private", smallRepo(2), hubtest.RepoOptions{Private: true})
	hub.MustAddRepo("org/gated", smallRepo(3), hubtest.RepoOptions{Gated: "manual"})
	hub.AddToken(secretToken) // valid, but no grants
	anon, anonLogs := newTestClient(t, hub, nil)
	authed, authedLogs := newTestClient(t, hub, func(o *Options) { o.Anonymous = false; o.Token = secretToken })
	bad, badLogs := newTestClient(t, hub, func(o *Options) { o.Anonymous = false; o.Token = "hf_wrong" + secretToken })

	cases := []struct {
		name string
		c    *Client
		repo string
		rev  string
		want error
		msg  string
	}{
		{"missing anon", anon, "org/nope", "main", ErrRepoNotFound, `repository "org/nope" not found, or it is private/gated`},
		{"missing authed", authed, "org/nope", "main", ErrRepoNotFound, "set HF_TOKEN"},
		{"private anon", anon, "org/private", "main", ErrRepoNotFound, "private/gated"},
		{"private authed", authed, "org/private", "main", ErrRepoNotFound, "private/gated"},
		{"gated anon", anon, "org/gated", "main", ErrGatedRepo, "accept its terms"},
		{"gated authed", authed, "org/gated", "main", ErrGatedRepo, "not in its authorized list"},
		{"bad revision", anon, "org/public", "v9", ErrRevisionNotFound, `revision "v9" not found`},
		{"invalid token", bad, "org/public", "main", ErrUnauthorized, "refused the token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.ModelInfo(ctxT(t), tc.repo, tc.rev)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("message %q lacks %q", err, tc.msg)
			}
			mustNotContain(t, "error", err.Error(), secretToken)
		})
	}
	// A missing file is EntryNotFound, naming the file.
	commit := hub.Head("org/public", "main")
	_, err := anon.OpenFile(ctxT(t), "org/public", commit, "nope.bin", ReaderOptions{})
	if !errors.Is(err, ErrEntryNotFound) || !strings.Contains(err.Error(), `"nope.bin"`) {
		t.Fatalf("missing file: %v", err)
	}
	for _, l := range []*syncBuffer{anonLogs, authedLogs, badLogs} {
		mustNotContain(t, "log", l.String(), secretToken)
	}
}

func TestTokenStaysOnHubHost(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	files := smallRepo(4)
	commit := hub.MustAddRepo("org/private", files, hubtest.RepoOptions{Private: true})
	hub.AddToken(secretToken, "org/private")
	c, logs := newTestClient(t, hub, func(o *Options) { o.Anonymous = false; o.Token = secretToken })
	cache := t.TempDir()
	res, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/private", CacheDir: cache, ChunkSize: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, filepath.Join(cache, "models--org--private", "snapshots", commit), files)
	var hubReqs, cdnReqs int
	for _, r := range hub.Requests() {
		switch r.Role {
		case "cdn":
			cdnReqs++
			if r.Auth {
				t.Errorf("Authorization sent to the CDN host %s: %s %s", r.Host, r.Method, r.Path)
			}
			if !strings.HasPrefix(r.Host, "localhost:") {
				t.Errorf("CDN request to host %s", r.Host)
			}
		case "hub":
			hubReqs++
			if !r.Auth {
				t.Errorf("no token on a Hub request %s %s", r.Method, r.Path)
			}
		}
	}
	if cdnReqs == 0 || hubReqs == 0 {
		t.Fatalf("expected traffic to both hosts, got hub=%d cdn=%d", hubReqs, cdnReqs)
	}
	js, _ := json.Marshal(res)
	mustNotContain(t, "result", string(js), secretToken)
	mustNotContain(t, "log", logs.String(), secretToken)
	if logs.String() == "" {
		t.Fatal("expected debug logs to check")
	}
	// Cache files never hold the token either.
	filepath.Walk(cache, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			mustNotContain(t, p, string(b), secretToken)
		}
		return nil
	})
}

// A redirect followed by the HTTP client to another host must lose the
// Authorization header.
func TestRedirectDropsAuthorizationOffHost(t *testing.T) {
	var otherSawAuth, hubSawAuth bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		otherSawAuth = r.Header.Get("Authorization") != ""
		w.Write([]byte(`{"id":"a/b","sha":"0123456789012345678901234567890123456789","siblings":[]}`))
	}))
	defer other.Close()
	ou, _ := url.Parse(other.URL)
	_, port, _ := strings.Cut(ou.Host, ":")
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hubSawAuth = r.Header.Get("Authorization") == "Bearer "+secretToken
		http.Redirect(w, r, "http://localhost:"+port+"/elsewhere", http.StatusFound)
	}))
	defer hub.Close()
	c, err := NewClient(Options{Endpoint: hub.URL, Token: secretToken})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ModelInfo(ctxT(t), "a/b", "main"); err != nil {
		t.Fatal(err)
	}
	if !hubSawAuth {
		t.Fatal("the Hub did not get the token")
	}
	if otherSawAuth {
		t.Fatal("the token followed a redirect to another host")
	}
}

func TestListingPaginationAndRefusals(t *testing.T) {
	hub := newHub(t, hubtest.Config{TreePageSize: 3})
	var files []hubtest.File
	for i := 0; i < 10; i++ {
		files = append(files, hubtest.File{Path: "d" + string(rune('a'+i%3)) + "/f" + string(rune('0'+i)), Data: []byte{byte(i)}})
	}
	commit := hub.MustAddRepo("org/many", files, hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, nil)
	got, err := c.ListFiles(ctxT(t), "org/many", commit)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(files) {
		t.Fatalf("listed %d files, want %d", len(got), len(files))
	}
	pages := 0
	for _, r := range hub.Requests() {
		if r.Route == hubtest.RouteTree {
			pages++
		}
	}
	if pages != 5 { // 10 files + 3 directories = 13 entries, 3 per page
		t.Fatalf("%d tree pages fetched, want 5", pages)
	}
	// A 5xx on page 2 is retried.
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteTree, Status: 503, Skip: 1})
	if _, err := c.ListFiles(ctxT(t), "org/many", commit); err != nil {
		t.Fatalf("5xx on page 2: %v", err)
	}

	for _, bad := range []string{"../../x", "/etc/passwd", "a/../../b", "a//b", `a\b`, "./a", "a/\x00b"} {
		t.Run(bad, func(t *testing.T) {
			h := newHub(t, hubtest.Config{})
			cm := h.MustAddRepo("org/evil", []hubtest.File{{Path: "ok.txt", Data: []byte("x")}, {Path: bad, Data: []byte("pwned")}}, hubtest.RepoOptions{})
			c, _ := newTestClient(t, h, nil)
			dir := t.TempDir()
			cache := filepath.Join(dir, "cache")
			_, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/evil", CacheDir: cache})
			if err == nil || !strings.Contains(err.Error(), "refused") {
				t.Fatalf("listing with %q: got %v, want a refusal", bad, err)
			}
			_, err = c.ListFiles(ctxT(t), "org/evil", cm)
			if err == nil {
				t.Fatal("ListFiles accepted it")
			}
			for _, r := range h.Requests() {
				if r.Route == hubtest.RouteResolve || r.Route == hubtest.RouteCDN {
					t.Fatalf("fetched %s despite the bad listing", r.Path)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
				t.Fatal("a file escaped the cache")
			}
		})
	}
}

func TestTokenLookupOrder(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "")
	check := func(explicit, want string, wantSrc TokenSource) {
		t.Helper()
		got, src, err := LookupToken(explicit)
		if err != nil || got != want || src != wantSrc {
			t.Fatalf("LookupToken(%q) = %q, %q, %v; want %q, %q", explicit, got, src, err, want, wantSrc)
		}
	}
	check("", "", TokenNone)
	os.WriteFile(filepath.Join(home, "token"), []byte("hf_file\n"), 0o600)
	check("", "hf_file", TokenFile)
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "hf_old")
	check("", "hf_old", TokenEnvOld)
	t.Setenv("HF_TOKEN", "hf_new")
	check("", "hf_new", TokenEnv)
	check("hf_flag", "hf_flag", TokenExplicit)
	t.Setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
	check("", "", TokenNone)
	if _, _, err := LookupToken("hf_a\r\nX-Evil: 1"); err == nil || strings.Contains(err.Error(), "hf_a") {
		t.Fatalf("header injection: %v", err)
	}
}

func TestEnvDefaults(t *testing.T) {
	t.Setenv("HF_ENDPOINT", "http://example.test:81/")
	t.Setenv("HF_HOME", "/h")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HUGGINGFACE_HUB_CACHE", "")
	if e := EnvEndpoint(); e != "http://example.test:81" {
		t.Fatalf("endpoint %q", e)
	}
	if d := HubCacheDir(); d != "/h/hub" {
		t.Fatalf("cache %q", d)
	}
	t.Setenv("HUGGINGFACE_HUB_CACHE", "/old")
	if d := HubCacheDir(); d != "/old" {
		t.Fatalf("cache %q", d)
	}
	t.Setenv("HF_HUB_CACHE", "/new")
	if d := HubCacheDir(); d != "/new" {
		t.Fatalf("cache %q", d)
	}
	t.Setenv("HF_HUB_OFFLINE", "1")
	if !EnvOffline() {
		t.Fatal("HF_HUB_OFFLINE=1 not seen")
	}
	t.Setenv("HF_HUB_OFFLINE", "0")
	if EnvOffline() {
		t.Fatal("HF_HUB_OFFLINE=0 seen as offline")
	}
}

func TestRelativeRedirectAndPinnedCommit(t *testing.T) {
	hub := newHub(t, hubtest.Config{ResolveCache: true})
	files := smallRepo(5)
	commit := hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, nil)
	f, err := c.OpenFile(ctxT(t), "org/m", commit, "config.json", ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, f.Size())
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if string(buf) != string(files[0].Data) {
		t.Fatal("content differs")
	}
	sawCache := false
	for _, r := range hub.Requests() {
		if r.Route == hubtest.RouteCache {
			sawCache = true
		}
	}
	if !sawCache {
		t.Fatal("the relative 307 was not followed")
	}
}

// The branch moves between the listing and the downloads: every request
// after model_info uses the pinned commit, so the files are the old ones.
func TestBranchMovesDuringDownload(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	old := smallRepo(6)
	commit := hub.MustAddRepo("org/m", old, hubtest.RepoOptions{})
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultHook, Route: hubtest.RouteTree, Hook: func() {
		if _, err := hub.Commit("org/m", "main", smallRepo(60)); err != nil {
			panic(err)
		}
	}})
	c, _ := newTestClient(t, hub, nil)
	cache := t.TempDir()
	res, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit != commit || hub.Head("org/m", "main") == commit {
		t.Fatalf("commit %s, old %s, head %s", res.Commit, commit, hub.Head("org/m", "main"))
	}
	checkFiles(t, res.SnapshotDir, old)
	for _, r := range hub.Requests() {
		if r.Route == hubtest.RouteResolve || r.Route == hubtest.RouteTree {
			if r.Revision != commit {
				t.Errorf("%s %s used revision %q, not the pinned commit", r.Method, r.Path, r.Revision)
			}
		}
	}
}

// HEAD follows an absolute redirect on the Hub's own host (keeping the
// token) and one to a mirror host (dropping it), reading the metadata from
// the final answer.
func TestHeadFollowsAbsoluteRedirects(t *testing.T) {
	const commit = "0123456789abcdef0123456789abcdef01234567"
	var mirrorAuth, hubAuthOnSecondHop bool
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mirrorAuth = r.Header.Get("Authorization") != ""
		w.Header().Set("ETag", `"`+GitBlobSHA1([]byte("hello"))+`"`)
		w.Header().Set("X-Repo-Commit", commit)
		w.Header().Set("Content-Length", "5")
	}))
	defer mirror.Close()
	mu, _ := url.Parse(mirror.URL)
	_, mport, _ := strings.Cut(mu.Host, ":")
	var hub *httptest.Server
	hub = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/old.txt"):
			w.Header().Set("X-Repo-Commit", commit)
			w.Header().Set("Location", hub.URL+"/a/b/resolve/"+commit+"/new.txt")
			w.WriteHeader(http.StatusMovedPermanently)
		case strings.HasSuffix(r.URL.Path, "/new.txt"):
			hubAuthOnSecondHop = r.Header.Get("Authorization") == "Bearer "+secretToken
			w.Header().Set("Location", "http://localhost:"+mport+"/mirror/new.txt")
			w.WriteHeader(http.StatusFound)
		}
	}))
	defer hub.Close()
	c, err := NewClient(Options{Endpoint: hub.URL, Token: secretToken})
	if err != nil {
		t.Fatal(err)
	}
	meta, err := c.HeadFile(ctxT(t), "a/b", commit, "old.txt")
	if err != nil {
		t.Fatal(err)
	}
	if meta.Size != 5 || meta.ETag != GitBlobSHA1([]byte("hello")) || meta.Commit != commit || !strings.HasPrefix(meta.URL, "http://localhost:"+mport) {
		t.Fatalf("meta %+v", meta)
	}
	if !hubAuthOnSecondHop {
		t.Fatal("token dropped on a same-host redirect")
	}
	if mirrorAuth {
		t.Fatal("token sent to the mirror host")
	}
}
