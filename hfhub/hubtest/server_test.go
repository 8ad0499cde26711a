package hubtest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// noFollow is a client that hands redirects back.
var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func do(t *testing.T, method, u string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// Expected identifiers are computed here independently of the server: git
// blob ids with the well-known empty-blob value as a check.
func gitID(b []byte) string {
	return sha1sum("blob " + fmtInt(len(b)) + "\x00" + string(b))
}

func fmtInt(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for n > 0 {
		d = append([]byte{byte('0' + n%10)}, d...)
		n /= 10
	}
	return string(d)
}

func TestEmptyBlobIDs(t *testing.T) {
	if gitID(nil) != "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391" {
		t.Fatalf("git id of the empty blob: %s", gitID(nil))
	}
	b, _ := newBlob(Bytes(nil), true)
	if b.gitSHA1 != "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391" || b.sha256 != "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Fatalf("empty blob: %s %s", b.gitSHA1, b.sha256)
	}
}

func TestResolveAndCDN(t *testing.T) {
	s := start(t, Config{})
	big := []byte(strings.Repeat("0123456789", 1000))
	commit := s.MustAddRepo("org/m", []File{
		{Path: "config.json", Data: []byte(`{"a":1}`)},
		{Path: "dir/w.safetensors", Data: big, LFS: true},
	}, RepoOptions{})

	// Regular file: 200, quoted git sha1 ETag, X-Repo-Commit, ranges.
	resp, body := do(t, "GET", s.URL+"/org/m/resolve/main/config.json", nil)
	if resp.StatusCode != 200 || string(body) != `{"a":1}` || resp.Header.Get("ETag") != `"`+gitID([]byte(`{"a":1}`))+`"` ||
		resp.Header.Get("X-Repo-Commit") != commit || resp.Header.Get("Accept-Ranges") != "bytes" {
		t.Fatalf("regular GET: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = do(t, "GET", s.URL+"/org/m/resolve/"+commit+"/config.json", map[string]string{"Range": "bytes=0-0"})
	if resp.StatusCode != 206 || string(body) != "{" || resp.Header.Get("Content-Range") != "bytes 0-0/7" {
		t.Fatalf("0-0 range: %d %q %v", resp.StatusCode, body, resp.Header)
	}

	// LFS: 302 to another host name with the linked headers.
	resp, _ = do(t, "HEAD", s.URL+"/org/m/resolve/main/dir/w.safetensors", nil)
	sum := sha256.Sum256(big)
	want := hex.EncodeToString(sum[:])
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != 302 || resp.Header.Get("X-Linked-Etag") != `"`+want+`"` || resp.Header.Get("X-Linked-Size") != "10000" ||
		resp.Header.Get("X-Repo-Commit") != commit || loc == nil || !strings.HasPrefix(loc.Host, "localhost:") {
		t.Fatalf("LFS HEAD: %d %v", resp.StatusCode, resp.Header)
	}
	for k := range resp.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-xet") {
			t.Fatalf("xet header %s sent", k)
		}
	}
	cdn := strings.Replace(loc.String(), "localhost", "127.0.0.1", 1)
	resp, body = do(t, "GET", cdn, map[string]string{"Range": "bytes=9990-20000"})
	if resp.StatusCode != 206 || string(body) != "0123456789" || resp.Header.Get("Content-Range") != "bytes 9990-9999/10000" ||
		resp.Header.Get("ETag") == `"`+want+`"` || resp.Header.Get("Content-Disposition") == "" {
		t.Fatalf("CDN range clamp: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = do(t, "GET", cdn, map[string]string{"Range": "bytes=-3"})
	if resp.StatusCode != 206 || string(body) != "789" {
		t.Fatalf("suffix range: %d %q", resp.StatusCode, body)
	}
	resp, _ = do(t, "GET", cdn, map[string]string{"Range": "bytes=10000-"})
	if resp.StatusCode != 416 || resp.Header.Get("Content-Range") != "bytes */10000" {
		t.Fatalf("416: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = do(t, "GET", cdn, map[string]string{"Authorization": "Bearer x"})
	if resp.StatusCode != 400 {
		t.Fatalf("CDN with Authorization: %d", resp.StatusCode)
	}
	resp, _ = do(t, "GET", strings.Replace(cdn, "Signature=", "Signature=0", 1), nil)
	if resp.StatusCode != 403 {
		t.Fatalf("bad signature: %d", resp.StatusCode)
	}
	// Errors carry their codes; EntryNotFound carries the commit.
	resp, _ = do(t, "HEAD", s.URL+"/org/m/resolve/main/nope", nil)
	if resp.StatusCode != 404 || resp.Header.Get("X-Error-Code") != "EntryNotFound" || resp.Header.Get("X-Repo-Commit") != commit {
		t.Fatalf("EntryNotFound: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = do(t, "GET", s.URL+"/api/models/org/m/revision/nope", nil)
	if resp.StatusCode != 404 || resp.Header.Get("X-Error-Code") != "RevisionNotFound" {
		t.Fatalf("RevisionNotFound: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = do(t, "GET", s.URL+"/api/models/org%2Fm", nil)
	if resp.StatusCode != 400 {
		t.Fatalf("%%2F in repo id: %d", resp.StatusCode)
	}
	// The log saw all of it, without token values.
	n := 0
	for _, r := range s.Requests() {
		if r.Role == "cdn" {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("%d CDN requests logged, want 5", n)
	}
}

func TestSignedURLExpires(t *testing.T) {
	s := start(t, Config{URLTTL: time.Nanosecond})
	s.MustAddRepo("org/m", []File{{Path: "w", Data: []byte("data"), LFS: true}}, RepoOptions{})
	resp, _ := do(t, "HEAD", s.URL+"/org/m/resolve/main/w", nil)
	loc := resp.Header.Get("Location")
	q, _ := url.Parse(loc)
	exp := q.Query().Get("Expires")
	if exp == "" {
		t.Fatal("no Expires")
	}
	resp, body := do(t, "GET", loc, nil)
	if resp.StatusCode != 403 || !strings.Contains(string(body), "expired") {
		t.Fatalf("expired URL: %d %s", resp.StatusCode, body)
	}
}

func TestModelInfoTreeAndAuth(t *testing.T) {
	s := start(t, Config{TreePageSize: 2})
	files := []File{{Path: "a.txt", Data: []byte("a")}, {Path: "d/b.bin", Data: []byte("bb"), LFS: true}, {Path: "d/e/c", Data: []byte("c")}}
	commit := s.MustAddRepo("org/m", files, RepoOptions{Gated: "auto"})
	s.AddToken("tok-ok", "org/m")
	s.AddToken("tok-none")

	resp, _ := do(t, "GET", s.URL+"/api/models/org/m", nil)
	if resp.StatusCode != 401 || resp.Header.Get("X-Error-Code") != "GatedRepo" {
		t.Fatalf("gated anon: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = do(t, "GET", s.URL+"/api/models/org/m", map[string]string{"Authorization": "Bearer tok-none"})
	if resp.StatusCode != 403 || resp.Header.Get("X-Error-Code") != "GatedRepo" {
		t.Fatalf("gated, no grant: %d", resp.StatusCode)
	}
	resp, _ = do(t, "GET", s.URL+"/api/models/org/m", map[string]string{"Authorization": "Bearer wrong"})
	if resp.StatusCode != 401 || resp.Header.Get("X-Error-Message") != "Invalid credentials in Authorization header" {
		t.Fatalf("invalid token: %d %v", resp.StatusCode, resp.Header)
	}
	auth := map[string]string{"Authorization": "Bearer tok-ok"}
	resp, body := do(t, "GET", s.URL+"/api/models/org/m/revision/main?blobs=True&expand=xetEnabled", auth)
	var mi struct {
		ID       string
		SHA      string
		Gated    any
		Siblings []struct {
			RFilename string
			Size      int64
			BlobID    string
			LFS       *struct {
				SHA256      string
				Size        int64
				PointerSize int
			}
		}
	}
	if err := json.Unmarshal(body, &mi); err != nil || resp.StatusCode != 200 {
		t.Fatalf("model info: %d %v %s", resp.StatusCode, err, body)
	}
	if mi.ID != "org/m" || mi.SHA != commit || mi.Gated != "auto" || len(mi.Siblings) != 3 || mi.Siblings[1].LFS == nil ||
		mi.Siblings[1].LFS.SHA256 != hex.EncodeToString(sha256sum([]byte("bb"))) || mi.Siblings[0].BlobID != gitID([]byte("a")) {
		t.Fatalf("model info %+v", mi)
	}
	// Recursive tree, 2 per page: 3 files + 2 dirs = 5 entries, 3 pages.
	u := s.URL + "/api/models/org/m/tree/" + commit + "?recursive=True&expand=False"
	var all []map[string]any
	pages := 0
	for u != "" {
		resp, body := do(t, "GET", u, auth)
		var page []map[string]any
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		pages++
		u = ""
		if l := resp.Header.Get("Link"); l != "" {
			u = l[1:strings.Index(l, ">")]
			if !strings.HasPrefix(u, s.URL) {
				t.Fatalf("Link not absolute to the fake: %s", l)
			}
		}
	}
	if pages != 3 || len(all) != 5 {
		t.Fatalf("%d pages, %d entries", pages, len(all))
	}
	// Non-recursive listing of a subdirectory.
	_, body = do(t, "GET", s.URL+"/api/models/org/m/tree/main/d", auth)
	var sub []map[string]any
	json.Unmarshal(body, &sub)
	if len(sub) != 2 || sub[0]["path"] != "d/b.bin" || sub[1]["path"] != "d/e" || sub[1]["type"] != "directory" {
		t.Fatalf("non-recursive: %s", body)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	repo := filepath.Join(dir, "org", "name")
	os.MkdirAll(filepath.Join(repo, "sub"), 0o755)
	os.MkdirAll(filepath.Join(repo, ".git"), 0o755)
	os.WriteFile(filepath.Join(repo, ".gitattributes"), []byte("*.safetensors filter=lfs diff=lfs merge=lfs -text\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "sub", "w.safetensors"), []byte("tiny"), 0o644)
	os.WriteFile(filepath.Join(repo, "big.bin"), make([]byte, 100), 0o644)
	os.WriteFile(filepath.Join(repo, "small.txt"), []byte("s"), 0o644)
	os.WriteFile(filepath.Join(repo, ".git", "HEAD"), []byte("x"), 0o644)
	repos, err := LoadDir(dir, 50)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range repos["org/name"] {
		got[f.Path] = f.LFS
	}
	want := map[string]bool{".gitattributes": false, "big.bin": true, "small.txt": false, "sub/w.safetensors": true}
	if len(got) != len(want) {
		t.Fatalf("files %v", got)
	}
	for p, lfs := range want {
		if l, ok := got[p]; !ok || l != lfs {
			t.Fatalf("%s: lfs=%v present=%v", p, l, ok)
		}
	}
}

func TestFaultCounting(t *testing.T) {
	s := start(t, Config{})
	s.MustAddRepo("org/m", []File{{Path: "a", Data: []byte("a")}}, RepoOptions{})
	s.Inject(Fault{Kind: FaultStatus, Route: RouteInfo, Status: 503, Skip: 1, Times: 2})
	var codes []int
	for i := 0; i < 5; i++ {
		resp, _ := do(t, "GET", s.URL+"/api/models/org/m", nil)
		codes = append(codes, resp.StatusCode)
	}
	if got := strings.Trim(strings.Join(strings.Fields(strings.Trim(fmtInts(codes), "[]")), ","), ","); got != "200,503,503,200,200" {
		t.Fatalf("codes %s", got)
	}
}

func fmtInts(v []int) string {
	var s []string
	for _, n := range v {
		s = append(s, fmtInt(n))
	}
	return strings.Join(s, " ")
}
