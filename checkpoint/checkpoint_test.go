package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// tinyDir is a bundled sharded checkpoint (three shards and an index).
const tinyDir = "../testdata/tiny/qwen3_5_moe-q4g32"

func TestOpenDir(t *testing.T) {
	s, err := OpenDir(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Kind() != KindDir || len(s.Shards()) != 3 || s.Index() == nil {
		t.Fatalf("kind %s, %d shards, index %v", s.Kind(), len(s.Shards()), s.Index() != nil)
	}
	for _, sh := range s.Shards() {
		data, err := os.ReadFile(filepath.Join(tinyDir, sh.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if sh.Size() != int64(len(data)) || sh.File() == nil || sh.Remote() {
			t.Errorf("%s: size %d of %d, local %v", sh.Name(), sh.Size(), len(data), sh.File() != nil)
		}
		// The header bytes are the file's first DataStart bytes.
		if n := sh.Header().DataStart; !bytes.Equal(sh.HeaderBytes(), data[:n]) {
			t.Errorf("%s: HeaderBytes are not the file's first %d bytes", sh.Name(), n)
		}
		if sh.Expect().Kind != "" {
			t.Errorf("%s: a plain directory publishes no digest, got %v", sh.Name(), sh.Expect())
		}
	}
	cfg, err := s.ReadFile(context.Background(), "config.json", 1<<20)
	want, _ := os.ReadFile(filepath.Join(tinyDir, "config.json"))
	if err != nil || !bytes.Equal(cfg, want) {
		t.Fatalf("config.json: %v", err)
	}
	if _, err := s.ReadFile(context.Background(), "nope.json", 1<<20); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := s.ReadFile(context.Background(), "config.json", 10); err == nil || !strings.Contains(err.Error(), "more than the 10") {
		t.Fatalf("over the limit: %v", err)
	}
	if !strings.HasPrefix(s.Identity(), "dir:") {
		t.Fatalf("identity %q", s.Identity())
	}
}

// copyDir copies the regular files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestStreamCheck(t *testing.T) {
	sh := &Shard{name: "s", raw: []byte("0123456789")}
	c := sh.NewStreamCheck(4)
	c.Write([]byte("45"))
	c.Write([]byte("6789abc"))
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	c = sh.NewStreamCheck(0)
	c.Write([]byte("01234X"))
	var hm *HeaderMismatchError
	if !errors.As(c.Err(), &hm) || hm.Offset != 5 || hm.Shard != "s" {
		t.Fatalf("err = %v", c.Err())
	}
	if sh.NewStreamCheck(10) != nil {
		t.Fatal("a check for a range past the header")
	}
	var none *StreamCheck
	none.Write([]byte("x"))
	if none.Err() != nil {
		t.Fatal("nil check failed")
	}
}

// hubWithTiny serves the tiny checkpoint (shards as LFS files).
func hubWithTiny(t *testing.T) (*hubtest.Server, string) {
	t.Helper()
	s, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ents, _ := os.ReadDir(tinyDir)
	var files []hubtest.File
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(tinyDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, hubtest.File{Path: e.Name(), Data: data, LFS: strings.HasSuffix(e.Name(), ".safetensors")})
	}
	repo := "org/tiny"
	s.MustAddRepo(repo, files, hubtest.RepoOptions{})
	return s, repo
}

func testClient(t *testing.T, s *hubtest.Server) *hfhub.Client {
	t.Helper()
	c, err := hfhub.NewClient(hfhub.Options{Endpoint: s.URL, Anonymous: true, MaxRetries: 2,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fillCache downloads repo into a fresh cache with our own downloader.
func fillCache(t *testing.T, s *hubtest.Server, repo string) string {
	t.Helper()
	cache := t.TempDir()
	if _, err := testClient(t, s).Download(context.Background(), hfhub.DownloadRequest{Repo: repo, CacheDir: cache}); err != nil {
		t.Fatal(err)
	}
	return cache
}

// fileBytes sums the body bytes the fake Hub sent for each repository file.
func fileBytes(s *hubtest.Server) map[string]int64 {
	out := map[string]int64{}
	log, _ := s.SettledRequests() // a handler logs its bytes after the client may have read them
	for _, r := range log {
		if r.File != "" && r.Method == "GET" {
			out[r.File] += r.BodyBytes
		}
	}
	return out
}

// readAll reads every shard and small file of s, as a repack would.
func readAll(t *testing.T, s *Source) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	if err := s.OpenShards(ctx); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, sh := range s.Shards() {
		b := make([]byte, sh.Size())
		if _, err := sh.ReadAtContext(ctx, b, 0); err != nil {
			t.Fatal(err)
		}
		out[sh.Name()] = b
	}
	for _, n := range []string{"config.json", "tokenizer.json"} {
		b, err := s.ReadFile(ctx, n, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// readOnline opens repo on the fake Hub with the cache, reads everything
// (checked against the bundled files) and closes it; the fake Hub's log
// then holds only that run's requests.
func readOnline(t *testing.T, s *hubtest.Server, repo, cache string) *Source {
	t.Helper()
	s.ResetLog()
	src, err := OpenHub(context.Background(), HubOptions{Repo: repo, Client: testClient(t, s), CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, readAll(t, src))
	src.Close()
	return src
}

func checkSame(t *testing.T, got map[string][]byte) {
	t.Helper()
	for n, b := range got {
		want, _ := os.ReadFile(filepath.Join(tinyDir, n))
		if !bytes.Equal(b, want) {
			t.Errorf("%s: the bytes read are not the file's", n)
		}
	}
}

// A Hub source reads what the cache holds from the cache and fetches only
// the rest: with a complete cache no file byte is fetched; with one shard
// and config.json removed from the cache, exactly those are.
func TestHubUsesCache(t *testing.T) {
	s, repo := hubWithTiny(t)
	cache := fillCache(t, s, repo)
	src := readOnline(t, s, repo, cache)
	if fb := fileBytes(s); len(fb) != 0 {
		t.Fatalf("with everything cached, file bytes were fetched: %v", fb)
	}
	for _, sh := range src.Shards() {
		if sh.Remote() || sh.Expect().Kind != hfhub.HashSHA256 {
			t.Errorf("%s: remote %v, expect %v", sh.Name(), sh.Remote(), sh.Expect())
		}
	}

	// A partial cache: drop one shard's blob and config.json's.
	snap, err := hfhub.ReadCachedSnapshot(cache, repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	var dropped int64
	for _, f := range snap.Files {
		if f.Path == "model-00002-of-00003.safetensors" || f.Path == "config.json" {
			os.Remove(f.BlobPath)
			dropped += f.Size
		}
	}
	src = readOnline(t, s, repo, cache)
	// The remote shard's header is read once more before it streams.
	for _, sh := range src.Shards() {
		if sh.Remote() {
			dropped += sh.Header().DataStart
		}
	}
	fb := fileBytes(s)
	var total int64
	for f, n := range fb {
		if f != "model-00002-of-00003.safetensors" && f != "config.json" {
			t.Errorf("%s was fetched although cached (%d bytes)", f, n)
		}
		total += n
	}
	if total != dropped {
		t.Errorf("fetched %d file bytes, the missing files have %d", total, dropped)
	}

	// A damaged cached small file is not used: it is fetched again.
	snap, _ = hfhub.ReadCachedSnapshot(cache, repo, "main")
	for _, f := range snap.Files {
		if f.Path == "tokenizer.json" {
			os.Chmod(f.BlobPath, 0o644)
			data, _ := os.ReadFile(f.BlobPath)
			data[10] ^= 1
			os.WriteFile(f.BlobPath, data, 0o644)
		}
	}
	src = readOnline(t, s, repo, cache)
	if fileBytes(s)["tokenizer.json"] == 0 {
		t.Error("a damaged cached tokenizer.json was used, not fetched again")
	}
}

// Offline, everything comes from the cached snapshot; what it lacks is an
// ErrNotCached error naming the file; a damaged cached file is refused.
func TestHubOffline(t *testing.T) {
	s, repo := hubWithTiny(t)
	cache := fillCache(t, s, repo)
	s.Close() // nothing may reach the Hub now
	ctx := context.Background()
	src, err := OpenHub(ctx, HubOptions{Repo: repo, CacheDir: cache, Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, readAll(t, src))
	for _, sh := range src.Shards() {
		if sh.Expect().Kind != hfhub.HashSHA256 || sh.ExpectFrom() == "" {
			t.Errorf("%s: expect %v from %q", sh.Name(), sh.Expect(), sh.ExpectFrom())
		}
	}
	if src.Identity() != "hub:"+repo+"@"+src.Commit() || src.Client() != nil {
		t.Fatalf("identity %q", src.Identity())
	}
	src.Close()

	// A cache without trees/ (written by huggingface_hub before 1.22): the
	// blobs' names say what the bytes must hash to.
	trees := filepath.Join(cache, "models--org--tiny", "trees")
	if _, err := os.Stat(trees); err != nil {
		t.Fatalf("no cached listing to remove: %v", err)
	}
	os.Rename(trees, trees+".away")
	src, err = OpenHub(ctx, HubOptions{Repo: repo, CacheDir: cache, Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, readAll(t, src))
	for _, sh := range src.Shards() {
		if sh.Expect().Kind != hfhub.HashSHA256 || sh.ExpectFrom() != "the name of its cache blob" {
			t.Errorf("%s: expect %v from %q", sh.Name(), sh.Expect(), sh.ExpectFrom())
		}
	}
	src.Close()
	os.Rename(trees+".away", trees)

	snap, _ := hfhub.ReadCachedSnapshot(cache, repo, "main")
	for _, f := range snap.Files {
		switch f.Path {
		case "model-00003-of-00003.safetensors":
			os.Remove(f.BlobPath)
		case "tokenizer.json":
			os.Chmod(f.BlobPath, 0o644)
			data, _ := os.ReadFile(f.BlobPath)
			data[0] ^= 1
			os.WriteFile(f.BlobPath, data, 0o644)
		}
	}
	src, err = OpenHub(ctx, HubOptions{Repo: repo, CacheDir: cache, Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	err = src.OpenShards(ctx)
	if !errors.Is(err, hfhub.ErrNotCached) || !strings.Contains(err.Error(), "model-00003-of-00003.safetensors") {
		t.Fatalf("missing shard offline: %v", err)
	}
	if _, err := src.ReadFile(ctx, "tokenizer.json", 1<<20); !errors.Is(err, hfhub.ErrHashMismatch) || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Fatalf("damaged cached file offline: %v", err)
	}
	if _, err := OpenHub(ctx, HubOptions{Repo: "org/other", CacheDir: cache, Offline: true}); !errors.Is(err, hfhub.ErrNotCached) {
		t.Fatalf("uncached repo offline: %v", err)
	}
}

// A snapshot directory of the cache opened as a directory: its links give
// each shard the digest its blob is named after.
func TestOpenDirCacheSnapshot(t *testing.T) {
	s, repo := hubWithTiny(t)
	cache := fillCache(t, s, repo)
	snap, err := hfhub.ReadCachedSnapshot(cache, repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	src, err := OpenDir(snap.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, sh := range src.Shards() {
		if sh.Expect().Kind != hfhub.HashSHA256 || sh.ExpectFrom() != "the name of its HF cache blob" {
			t.Errorf("%s: expect %v from %q", sh.Name(), sh.Expect(), sh.ExpectFrom())
		}
	}
}

// A cache written without symlinks keeps its files in the snapshot: they
// are read from there.
func TestHubUsesSnapshotCopies(t *testing.T) {
	s, repo := hubWithTiny(t)
	cache := fillCache(t, s, repo)
	snap, err := hfhub.ReadCachedSnapshot(cache, repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range snap.Files {
		data, err := os.ReadFile(f.BlobPath)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(f.LocalPath)
		os.Remove(f.BlobPath)
		if err := os.WriteFile(f.LocalPath, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	readOnline(t, s, repo, cache)
	if fb := fileBytes(s); len(fb) != 0 {
		t.Fatalf("file bytes fetched although the snapshot holds copies: %v", fb)
	}
}
