package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/repack"
)

// srcTiny is a bundled sharded checkpoint.
const srcTiny = "../../testdata/tiny/qwen3_5_moe-q4g32"

func srcCopy(t *testing.T, from string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(from))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(from)
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644)
	}
	return dst
}

// srcHub serves the bundled checkpoint as org/tiny-moe.
func srcHub(t *testing.T) *hubtest.Server {
	t.Helper()
	hub, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	ents, _ := os.ReadDir(srcTiny)
	var files []hubtest.File
	for _, e := range ents {
		data, _ := os.ReadFile(filepath.Join(srcTiny, e.Name()))
		files = append(files, hubtest.File{Path: e.Name(), Data: data, LFS: strings.HasSuffix(e.Name(), ".safetensors")})
	}
	hub.MustAddRepo("org/tiny-moe", files, hubtest.RepoOptions{})
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")
	return hub
}

// srcDownload fills a fresh cache from the fake Hub with qpack download
// and returns it and the snapshot directory.
func srcDownload(t *testing.T) (cache, snapDir string) {
	t.Helper()
	cache = t.TempDir()
	out, err := runCLI(t, "download", "org/tiny-moe", "--cache-dir", cache, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var dl struct {
		SnapshotDir string `json:"snapshot_dir"`
	}
	if err := json.Unmarshal([]byte(out), &dl); err != nil || dl.SnapshotDir == "" {
		t.Fatalf("download summary: %v\n%s", err, out)
	}
	return cache, dl.SnapshotDir
}

// sameFiles fails unless the containers a and b hold the same files with
// the same bytes, except manifest.json, whose file digests must agree (its
// provenance names the source, a repository or a directory).
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	read := func(dir string) map[string][]byte {
		out := map[string][]byte{}
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				rel, _ := filepath.Rel(dir, p)
				out[rel], _ = os.ReadFile(p)
			}
			return nil
		})
		return out
	}
	fa, fb := read(a), read(b)
	if len(fa) != len(fb) || len(fa) < 4 {
		t.Fatalf("%d files vs %d", len(fa), len(fb))
	}
	for p, da := range fa {
		if p == "manifest.json" {
			var ma, mb struct {
				Files map[string]int64 `json:"files"`
				Ext   struct {
					FileDigests map[string]string `json:"fileDigests"`
				} `json:"qpack"`
			}
			json.Unmarshal(da, &ma)
			json.Unmarshal(fb[p], &mb)
			ja, _ := json.Marshal(ma)
			jb, _ := json.Marshal(mb)
			if !bytes.Equal(ja, jb) || len(ma.Files) == 0 {
				t.Errorf("manifests list other files or digests:\n%s\n%s", ja, jb)
			}
			continue
		}
		if !bytes.Equal(da, fb[p]) {
			t.Errorf("%s differs", p)
		}
	}
}

// repack --from-hf and verify-install --deep --source REPO work offline
// from a cache written by qpack download, with the Hub stopped; the
// container is the one repack --from-dir makes of the snapshot. What the
// cache lacks is exit 2, naming the file.
func TestRepackOfflineFromCache(t *testing.T) {
	hub := srcHub(t)
	cache, snapDir := srcDownload(t)
	hub.Close()
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1")

	fromDir := filepath.Join(t.TempDir(), "dir.qpack")
	if out, err := runCLI(t, "repack", "--from-dir", snapDir, "--output", fromDir, "--reserve", "-1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, how := range []string{"flag", "env"} {
		args := []string{"repack", "--from-hf", "org/tiny-moe", "--cache-dir", cache, "--output", filepath.Join(t.TempDir(), how+".qpack"), "--reserve", "-1", "--json"}
		if how == "flag" {
			args = append(args, "--offline")
		} else {
			t.Setenv("HF_HUB_OFFLINE", "1")
		}
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("offline repack (%s): %v\n%s", how, err, out)
		}
		var res repack.Result
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, s := range res.Shards {
			if !s.Verified {
				t.Errorf("%s: not verified against the cached digest", s.Name)
			}
		}
		sameFiles(t, fromDir, args[6])
		vout, err := runCLI(t, "verify-install", args[6], "--deep", "--source", "org/tiny-moe", "--cache-dir", cache, "--offline", "--no-receipt")
		if err != nil {
			t.Fatalf("offline deep verify: %v\n%s", err, vout)
		}
	}

	// A shard missing from the cache: exit 2, naming it.
	var blob string
	ents, _ := os.ReadDir(snapDir)
	for _, e := range ents {
		if e.Name() == "model-00003-of-00003.safetensors" {
			blob, _ = filepath.EvalSymlinks(filepath.Join(snapDir, e.Name()))
		}
	}
	if blob == "" || os.Remove(blob) != nil {
		t.Fatal("no blob to remove")
	}
	out, err := runCLI(t, "repack", "--from-hf", "org/tiny-moe", "--cache-dir", cache, "--offline", "--output", filepath.Join(t.TempDir(), "x.qpack"), "--reserve", "-1")
	if vfExitCode(err) != 2 || !strings.Contains(err.Error(), "model-00003-of-00003.safetensors") || !strings.Contains(err.Error(), "not in the local cache") {
		t.Fatalf("missing shard: exit %d, %v\n%s", vfExitCode(err), err, out)
	}
	out, err = runCLI(t, "verify-install", fromDir, "--deep", "--source", "org/tiny-moe", "--cache-dir", cache, "--offline", "--no-receipt")
	if vfExitCode(err) != 2 || !strings.Contains(err.Error()+out, "model-00003-of-00003.safetensors") {
		t.Fatalf("missing shard, deep verify: exit %d, %v\n%s", vfExitCode(err), err, out)
	}
}

// The partial-cache half of testdata/hubcheck/offline.sh, with a cache our
// own downloader wrote: one shard and tokenizer.json are removed from the
// cache; repack --from-hf fetches exactly those (the removed shard's
// header once more before it streams), writes nothing to the cache, and
// makes the container a full fetch makes.
func TestRepackPartialCacheFetchesOnlyMissing(t *testing.T) {
	hub := srcHub(t)
	cache, snapDir := srcDownload(t)
	full := filepath.Join(t.TempDir(), "full.qpack")
	if out, err := runCLI(t, "repack", "--from-hf", "org/tiny-moe", "--no-cache", "--output", full, "--reserve", "-1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	missing := []string{"model-00002-of-00003.safetensors", "tokenizer.json"}
	for _, m := range missing {
		blob, err := filepath.EvalSymlinks(filepath.Join(snapDir, m))
		if err != nil || os.Remove(blob) != nil {
			t.Fatalf("removing %s: %v", m, err)
		}
	}
	hub.ResetLog()
	part := filepath.Join(t.TempDir(), "part.qpack")
	if out, err := runCLI(t, "repack", "--from-hf", "org/tiny-moe", "--cache-dir", cache, "--output", part, "--reserve", "-1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]int64{}
	log, _ := hub.SettledRequests()
	for _, r := range log {
		if r.Method == "GET" && r.File != "" {
			got[r.File] += r.BodyBytes
		}
	}
	shard := filepath.Join(srcTiny, missing[0])
	want := map[string]int64{missing[0]: fileSize(t, shard) + headerLen(t, shard), missing[1]: fileSize(t, filepath.Join(srcTiny, missing[1]))}
	if len(got) != 2 || got[missing[0]] != want[missing[0]] || got[missing[1]] != want[missing[1]] {
		t.Fatalf("fetched %v, want %v", got, want)
	}
	for _, m := range missing {
		if _, err := os.Stat(filepath.Join(snapDir, m)); err == nil {
			t.Errorf("%s was written back to the cache", m)
		}
	}
	sameFiles(t, full, part)
}

// A cached shard blob damaged at its full size: the repack fails on its
// sha256 naming the blob and the way out; --no-cache then succeeds.
func TestRepackDamagedCacheBlob(t *testing.T) {
	srcHub(t)
	cache, snapDir := srcDownload(t)
	blob, err := filepath.EvalSymlinks(filepath.Join(snapDir, "model-00001-of-00003.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(blob, 0o644)
	data, _ := os.ReadFile(blob)
	data[len(data)-1] ^= 1
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.qpack")
	_, err = runCLI(t, "repack", "--from-hf", "org/tiny-moe", "--cache-dir", cache, "--output", out, "--reserve", "-1")
	if err == nil || !strings.Contains(err.Error(), blob) || !strings.Contains(err.Error(), "--no-cache") || vfExitCode(err) != 1 {
		t.Fatalf("exit %d, %v", vfExitCode(err), err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a container was placed")
	}
	// Offline the way out is to remove the blob (not the snapshot link,
	// which a download would relink to the same blob) and download again.
	_, err = runCLI(t, "repack", "--from-hf", "org/tiny-moe", "--cache-dir", cache, "--offline", "--output", out, "--discard-partial", "--reserve", "-1")
	if err == nil || !strings.Contains(err.Error(), blob) || !strings.Contains(err.Error(), "remove it") || vfExitCode(err) != 1 {
		t.Fatalf("offline: exit %d, %v", vfExitCode(err), err)
	}
	if o, err := runCLI(t, "repack", "--from-hf", "org/tiny-moe", "--cache-dir", cache, "--no-cache", "--output", out, "--discard-partial", "--reserve", "-1"); err != nil {
		t.Fatalf("--no-cache: %v\n%s", err, o)
	}
}

// verify-install --deep --offline against a cache whose shard blob is
// damaged blames the source and names the blob itself (not the snapshot
// link, which a download would relink to the same blob).
func TestVerifyDeepDamagedCacheBlobOffline(t *testing.T) {
	srcHub(t)
	cache, snapDir := srcDownload(t)
	good := filepath.Join(t.TempDir(), "g.qpack")
	if out, err := runCLI(t, "repack", "--from-dir", snapDir, "--output", good, "--reserve", "-1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	link := filepath.Join(snapDir, "model-00001-of-00003.safetensors")
	blob, err := filepath.EvalSymlinks(link)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(blob, 0o644)
	data, _ := os.ReadFile(blob)
	data[len(data)-1] ^= 1
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "verify-install", good, "--deep", "--source", "org/tiny-moe", "--cache-dir", cache, "--offline", "--no-receipt")
	if vfExitCode(err) != 2 || !strings.Contains(out, "HF cache blob "+blob+":") {
		t.Fatalf("exit %d, %v\n%s", vfExitCode(err), err, out)
	}
}
