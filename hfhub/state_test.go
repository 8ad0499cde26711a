package hfhub

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// A failed run leaves its partial blob and no ref; after the branch moves,
// a completed run removes the old commit's partial and its record, and
// writes the ref. A partial of another file is not touched.
func TestStalePartsAndRefs(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	old := []hubtest.File{{Path: lfsPath, Data: randBytes(400_000, 31), LFS: true}, {Path: regPath, Data: []byte(`{"a":1}`)}}
	hub.MustAddRepo("org/m", old, hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, func(o *Options) { o.MaxRetries = 1 })
	cache := t.TempDir()
	req := DownloadRequest{Repo: "org/m", CacheDir: cache, ChunkSize: 64 << 10, Connections: 2}
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 503, Skip: 2, Times: -1})
	if _, err := c.Download(ctxT(t), req); err == nil {
		t.Fatal("want a failure")
	}
	repoDir := filepath.Join(cache, "models--org--m")
	oldPart := filepath.Join(repoDir, "blobs", sha256Hex(old[0].Data)+".qpack-part")
	for _, p := range []string{oldPart, oldPart + ".json"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the failed run should leave %s: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(repoDir, "refs", "main")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refs/main written after a failed run: %v", err)
	}
	// A record written before records named their file is attributed by
	// the cached listing of its commit.
	rec := readFile(t, oldPart+".json")
	var m map[string]any
	if err := json.Unmarshal(rec, &m); err != nil || m["path"] != lfsPath {
		t.Fatalf("record %s: %v", rec, err)
	}
	delete(m, "path")
	delete(m, "commit")
	legacy, _ := json.Marshal(m)
	os.WriteFile(oldPart+".json", legacy, 0o644)
	// Another file's partial (a record naming another path) stays.
	foreign := filepath.Join(repoDir, "blobs", strings.Repeat("ab", 32)+".qpack-part")
	os.WriteFile(foreign, []byte("x"), 0o644)
	os.WriteFile(foreign+".json", []byte(`{"version":1,"etag":"`+strings.Repeat("ab", 32)+`","size":1,"chunk_size":1,"done":[],"path":"other.bin"}`), 0o644)

	hub.ClearFaults()
	newFiles := []hubtest.File{{Path: lfsPath, Data: randBytes(400_000, 32), LFS: true}, {Path: regPath, Data: []byte(`{"a":2}`)}}
	commit, err := hub.Commit("org/m", "main", newFiles)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Download(ctxT(t), req); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{oldPart, oldPart + ".json"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s should be gone: %v", p, err)
		}
	}
	for _, p := range []string{foreign, foreign + ".json"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s (another file's) was removed", p)
		}
	}
	if ref := string(readFile(t, filepath.Join(repoDir, "refs", "main"))); ref != commit {
		t.Fatalf("refs/main = %q, want %s", ref, commit)
	}
	checkFiles(t, filepath.Join(repoDir, "snapshots", commit), newFiles)
}

// Errors name each file once ("config.json: config.json: …" never).
func TestErrorsNameTheFileOnce(t *testing.T) {
	for _, tc := range faultCases() {
		if tc.ok {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hub := newHub(t, hubtest.Config{})
			hub.MustAddRepo("org/m", faultRepo(), hubtest.RepoOptions{})
			hub.Inject(tc.fault)
			c, _ := newTestClient(t, hub, fastStall)
			_, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: t.TempDir(), ChunkSize: 64 << 10})
			if err == nil {
				t.Skip("no error in this setup")
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				line = " " + line
				for _, p := range []string{lfsPath, regPath} {
					// (a URL ending in the name does not count)
					if n := strings.Count(line, " "+p+":") + strings.Count(line, `"`+p+`"`); n > 1 {
						t.Fatalf("%s named %d times in %q", p, n, line)
					}
				}
			}
		})
	}
}

// Download with LocalDir never overwrites or deletes what it did not
// create: one case per thing that can be in the way.
func TestLocalDirNeverClobbers(t *testing.T) {
	files := []hubtest.File{{Path: regPath, Data: []byte(`{"hidden_size":8}`)}, {Path: lfsPath, Data: randBytes(70_000, 33), LFS: true}}
	type setup func(t *testing.T, dir, target string)
	write := func(b []byte) setup {
		return func(t *testing.T, dir, target string) {
			os.MkdirAll(filepath.Dir(target), 0o755)
			if err := os.WriteFile(target, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	outside := t.TempDir()
	cases := []struct {
		name    string
		setup   setup
		refused bool
	}{
		{"user file, other content", write([]byte(`{"mine":true}`)), true},
		{"user file, same size other content", write([]byte(`{"hidden_size":9}`)), true},
		{"user file, the right content", write(files[0].Data), false},
		{"symlink to a user file", func(t *testing.T, dir, target string) {
			os.WriteFile(filepath.Join(outside, "mine.json"), []byte("mine"), 0o644)
			os.Symlink(filepath.Join(outside, "mine.json"), target)
		}, true},
		{"symlink to the right content", func(t *testing.T, dir, target string) {
			os.WriteFile(filepath.Join(outside, "right.json"), files[0].Data, 0o644)
			os.Symlink(filepath.Join(outside, "right.json"), target)
		}, true},
		{"directory", func(t *testing.T, dir, target string) {
			os.MkdirAll(filepath.Join(target, "sub"), 0o755)
			os.WriteFile(filepath.Join(target, "sub", "f"), []byte("f"), 0o644)
		}, true},
		{"FIFO", func(t *testing.T, dir, target string) {
			if err := mkfifo(target); err != nil {
				t.Skip("no FIFOs here:", err)
			}
		}, true},
		{"an older download (metadata)", func(t *testing.T, dir, target string) {
			write([]byte(`{"hidden_size":1}`))(t, dir, target)
			p := localPaths(dir, regPath)
			writeLocalMetadata(p, strings.Repeat("0", 40), GitBlobSHA1([]byte(`{"hidden_size":1}`)), nowUnix()+5)
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hub := newHub(t, hubtest.Config{})
			hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
			c, _ := newTestClient(t, hub, nil)
			dir := t.TempDir()
			target := filepath.Join(dir, regPath)
			tc.setup(t, dir, target)
			before := snapshotTree(t, dir)
			beforeOut := snapshotTree(t, outside)
			done := make(chan error, 1)
			go func() {
				_, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", LocalDir: dir})
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("download blocked")
			}
			if !bytes.Equal(readFile(t, filepath.Join(dir, lfsPath)), files[1].Data) {
				t.Fatal("the other file was not downloaded")
			}
			if !tc.refused {
				if err != nil {
					t.Fatal(err)
				}
				checkFiles(t, dir, files)
				return
			}
			var le *LocalFileError
			if !errors.Is(err, ErrLocalFileConflict) || !errors.As(err, &le) || le.Path != regPath {
				t.Fatalf("want a LocalFileError for %s, got %v", regPath, err)
			}
			after := snapshotTree(t, dir)
			if before[regPath] != after[regPath] {
				t.Fatalf("%s changed: %q → %q", regPath, before[regPath], after[regPath])
			}
			for k, v := range before {
				if strings.HasPrefix(k, regPath+"/") && after[k] != v {
					t.Fatalf("%s changed", k)
				}
			}
			if a := snapshotTree(t, outside); len(a) != len(beforeOut) {
				t.Fatal("files outside the local dir changed")
			} else {
				for k, v := range beforeOut {
					if a[k] != v {
						t.Fatalf("%s outside the local dir changed", k)
					}
				}
			}
		})
	}
}

// snapshotTree maps each path under dir to its type, mode, size, mtime and
// content (or link target), without following links or opening FIFOs.
func snapshotTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		v := info.Mode().String() + " " + info.ModTime().String()
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			tgt, _ := os.Readlink(p)
			v += " -> " + tgt
		case info.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	return out
}

// A local dir inside the cache is refused before anything is written.
func TestLocalDirInsideCacheRefused(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	hub.MustAddRepo("org/m", faultRepo(), hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, nil)
	cache := t.TempDir()
	for _, ld := range []string{cache, filepath.Join(cache, "models--org--m", "snapshots", "x")} {
		_, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, LocalDir: ld})
		if !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("%s: want ErrInvalidInput, got %v", ld, err)
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Fatalf("the cache was written: %v", ents)
	}
	if n := len(hub.Requests()); n != 0 {
		t.Fatalf("%d requests before the refusal", n)
	}
	// Beside the cache is fine.
	if _, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, LocalDir: cache + "-local"}); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(cache + "-local")
}
