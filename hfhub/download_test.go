package hfhub

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// A small repository with a nested LFS file, a regular file, an empty file
// and an odd name.
func smallRepo(seed uint64) []hubtest.File {
	return []hubtest.File{
		{Path: "config.json", Data: []byte(`{"model_type":"qwen3_next"}` + "\n")},
		{Path: "model-00001-of-00002.safetensors", Data: randBytes(300_000, seed), LFS: true},
		{Path: "sub/dir/model-00002-of-00002.safetensors", Data: randBytes(70_000, seed+1), LFS: true},
		{Path: "empty.txt", Data: nil},
		{Path: "odd name+#%ü.txt", Data: []byte("odd")},
	}
}

func TestDownloadCacheLayout(t *testing.T) {
	hub := newHub(t, hubtest.Config{TreePageSize: 2})
	files := smallRepo(1)
	commit := hub.MustAddRepo("org/model", files, hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, nil)
	cache := t.TempDir()
	res, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/model", CacheDir: cache, ChunkSize: 64 << 10, Connections: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Commit != commit {
		t.Fatalf("commit %s, want %s", res.Commit, commit)
	}
	repoDir := filepath.Join(cache, "models--org--model")
	if got := string(readFile(t, filepath.Join(repoDir, "refs", "main"))); got != commit {
		t.Fatalf("refs/main = %q, want %q (no newline)", got, commit)
	}
	for _, f := range files {
		p := filepath.Join(repoDir, "snapshots", commit, filepath.FromSlash(f.Path))
		if got := readFile(t, p); string(got) != string(f.Data) {
			t.Errorf("%s: content differs", f.Path)
		}
		tgt, err := os.Readlink(p)
		if err != nil {
			t.Fatalf("%s: not a symlink: %v", f.Path, err)
		}
		depth := strings.Count(f.Path, "/")
		wantPrefix := strings.Repeat("../", depth+2) + "blobs/"
		if !strings.HasPrefix(tgt, wantPrefix) {
			t.Errorf("%s: link %q, want relative %s<etag>", f.Path, tgt, wantPrefix)
		}
		etag := strings.TrimPrefix(tgt, wantPrefix)
		want := GitBlobSHA1(f.Data)
		if f.LFS {
			want = sha256Hex(f.Data)
		}
		if etag != want {
			t.Errorf("%s: blob %s, want %s", f.Path, etag, want)
		}
		if _, err := os.Stat(filepath.Join(cache, ".locks", "models--org--model", etag+".lock")); err != nil && len(f.Data) > 0 {
			t.Errorf("%s: lock file: %v", f.Path, err)
		}
	}
	for _, e := range listTree(t, filepath.Join(repoDir, "blobs")) {
		if strings.Contains(e, ".") {
			t.Errorf("leftover in blobs/: %s", e)
		}
	}
	// A second run fetches nothing.
	hub.ResetLog()
	res2, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/model", CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res2.Files {
		if f.Status != StatusCached {
			t.Errorf("second run: %s is %s", f.Path, f.Status)
		}
	}
	for _, r := range hub.Requests() {
		if r.Route == hubtest.RouteResolve || r.Route == hubtest.RouteCDN {
			t.Errorf("second run requested %s %s", r.Method, r.Path)
		}
	}
}
