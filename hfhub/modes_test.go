package hfhub

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

func TestLocalDirMode(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	files := smallRepo(41)
	commit := hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, nil)
	dir := t.TempDir()
	res, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", LocalDir: dir, ChunkSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Dir() != dir {
		t.Fatalf("dir %s", res.Dir())
	}
	checkFiles(t, dir, files)
	for _, f := range files {
		st, err := os.Lstat(filepath.Join(dir, f.Path))
		if err != nil || !st.Mode().IsRegular() {
			t.Fatalf("%s: not a plain file", f.Path)
		}
		meta := readFile(t, filepath.Join(dir, ".cache/huggingface/download", f.Path+".metadata"))
		lines := strings.Split(string(meta), "\n")
		if len(lines) != 4 || lines[0] != commit || lines[1] != etagOf(f) || lines[3] != "" {
			t.Fatalf("%s: metadata %q", f.Path, meta)
		}
		ts, err := strconv.ParseFloat(lines[2], 64)
		if err != nil || st.ModTime().Unix()-1 > int64(ts) || ts > float64(time.Now().Unix()+1) {
			t.Fatalf("%s: timestamp %q vs mtime %v", f.Path, lines[2], st.ModTime())
		}
	}
	if tr, err := (cacheRepo{dir: filepath.Join(dir, ".cache/huggingface")}).readTreeCache(commit); err != nil || len(tr) != len(files) {
		t.Fatalf("local dir tree cache: %v, %d entries", err, len(tr))
	}
	if string(readFile(t, filepath.Join(dir, ".cache/huggingface/.gitignore"))) != "*" {
		t.Fatal(".gitignore")
	}
	if !strings.HasPrefix(string(readFile(t, filepath.Join(dir, ".cache/huggingface/CACHEDIR.TAG"))), "Signature: 8a477f597d28d172789f06886806bc55") {
		t.Fatal("CACHEDIR.TAG")
	}
	// Rerun: nothing fetched. Then a local edit invalidates the metadata,
	// and the file is fetched again.
	hub.ResetLog()
	if _, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", LocalDir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, r := range hub.Requests() {
		if r.Route == hubtest.RouteResolve {
			t.Fatalf("rerun fetched %s", r.Path)
		}
	}
	p := filepath.Join(dir, "config.json")
	os.WriteFile(p, []byte("edited"), 0o644)
	future := time.Now().Add(5 * time.Second)
	os.Chtimes(p, future, future)
	if _, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", LocalDir: dir}); err != nil {
		t.Fatal(err)
	}
	checkFiles(t, dir, files)
	// Offline: answered from the metadata.
	off, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", LocalDir: dir, Offline: true})
	if err != nil || len(off.Files) != len(files) || off.Commit != commit {
		t.Fatalf("offline local dir: %v %+v", err, off)
	}
}

func TestOfflineFromCache(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	files := smallRepo(42)
	commit := hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, nil)
	cache := t.TempDir()
	if _, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, Include: []string{"*.json", "sub/"}}); err != nil {
		t.Fatal(err)
	}
	hub.Close() // no network from here on
	res, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, Offline: true, Include: []string{"*.json"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit != commit || len(res.Files) != 1 || res.Files[0].Path != "config.json" || res.Files[0].GitSHA1 != etagOf(files[0]) {
		t.Fatalf("offline result %+v", res)
	}
	// HF_HUB_OFFLINE=1 does the same.
	t.Setenv("HF_HUB_OFFLINE", "1")
	res, err = c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, Include: []string{"sub/"}})
	if err != nil || len(res.Files) != 1 || res.Files[0].SHA256 != etagOf(files[2]) {
		t.Fatalf("HF_HUB_OFFLINE: %v %+v", err, res)
	}
	// The cached listing knows the snapshot lacks the other files.
	_, err = c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache})
	if !errors.Is(err, ErrNotCached) || !strings.Contains(err.Error(), "model-00001-of-00002.safetensors") {
		t.Fatalf("incomplete snapshot: %v", err)
	}
	_, err = c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, Revision: "v2"})
	if !errors.Is(err, ErrNotCached) {
		t.Fatalf("unknown ref: %v", err)
	}
	// A commit revision needs no ref.
	if _, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, Revision: commit, Include: []string{"*.json"}}); err != nil {
		t.Fatal(err)
	}
}

func TestFiltersAndDryRun(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	files := smallRepo(43)
	hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, nil)
	cache := t.TempDir()
	res, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, DryRun: true,
		Include: []string{"*.safetensors", "*.txt"}, Exclude: []string{"sub/*"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range res.Files {
		got = append(got, f.Path+":"+f.Status)
	}
	sort.Strings(got)
	want := []string{"empty.txt:planned", "model-00001-of-00002.safetensors:planned", "odd name+#%ü.txt:planned"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("dry run %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(cache, "models--org--m")); err == nil {
		t.Fatal("dry run wrote to the cache")
	}
	for _, r := range hub.Requests() {
		if r.Route == hubtest.RouteResolve || r.Route == hubtest.RouteCDN {
			t.Fatal("dry run fetched a file")
		}
	}
}

func TestMatchGlobLikeFnmatchcase(t *testing.T) {
	// Expected values follow Python's fnmatch.fnmatchcase.
	cases := []struct {
		pat, name string
		want      bool
	}{
		{"*.json", "config.json", true},
		{"*.json", "sub/config.json", true}, // '*' crosses '/'
		{"*.JSON", "config.json", false},    // case-sensitive
		{"model-?????-of-*.safetensors", "model-00001-of-00009.safetensors", true},
		{"model-[0-9]*", "model-1.bin", true},
		{"model-[!0-9]*", "model-1.bin", false},
		{"model-[!0-9]*", "model-x.bin", true},
		{"[]]", "]", true},
		{"[!]]", "a", true},
		{"[a-", "[a-", true}, // unclosed '[' is literal
		{"a[", "a[", true},
		{"[z-a]", "m", false}, // reversed range matches nothing
		{"*", "", true},
		{"?", "", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"sub/*", "sub/dir/x", true},
		{"ü*", "über", true},
		{"?", "ü", true},
		{"[-a]", "-", true},
	}
	for _, tc := range cases {
		if got := MatchGlob(tc.pat, tc.name); got != tc.want {
			t.Errorf("MatchGlob(%q, %q) = %v, want %v", tc.pat, tc.name, got, tc.want)
		}
	}
	paths := []string{"config.json", "sub/a.bin", "sub/b.json", "subway.txt"}
	got := FilterPaths(paths, []string{"sub/"}, nil)
	if strings.Join(got, ",") != "sub/a.bin,sub/b.json" {
		t.Fatalf("dir pattern: %v", got)
	}
	got = FilterPaths(paths, nil, []string{"*.json"})
	if strings.Join(got, ",") != "sub/a.bin,subway.txt" {
		t.Fatalf("exclude: %v", got)
	}
}
