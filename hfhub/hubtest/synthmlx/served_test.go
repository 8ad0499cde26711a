package synthmlx

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/safetensors"
)

// TestServedThroughHub downloads the generated repo from the fake Hub with
// the real client, which checks every LFS file against the served sha256,
// and compares the files with the generator's bytes.
func TestServedThroughHub(t *testing.T) {
	c, err := New(smallConfig(t, "qwen3_5_moe.config.json"), 5, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	digests, err := c.CachedDigests(filepath.Join(t.TempDir(), "digests.json"), nil)
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.Files(digests, hubtest.File{Path: "tokenizer.json", Data: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	s, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.MustAddRepo("synth/model", files, hubtest.RepoOptions{})
	cl, err := hfhub.NewClient(hfhub.Options{Endpoint: s.URL, Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := cl.Download(context.Background(), hfhub.DownloadRequest{Repo: "synth/model", LocalDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	lfs := 0
	for _, f := range res.Files {
		if f.LFS {
			lfs++
			if f.SHA256 != digests[f.Path].SHA256 {
				t.Fatalf("%s: downloaded sha256 %s, generated %s", f.Path, f.SHA256, digests[f.Path].SHA256)
			}
		}
	}
	if lfs != len(c.Shards) {
		t.Fatalf("%d LFS files downloaded, %d shards", lfs, len(c.Shards))
	}
	for _, sh := range c.Shards {
		got, err := os.ReadFile(filepath.Join(dir, sh.Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, readAll(t, sh)) {
			t.Fatalf("%s: downloaded bytes differ from the generator's", sh.Name)
		}
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatalf("the downloaded checkpoint does not open: %v", err)
	}
	if n := len(ck.Names()); n == 0 {
		t.Fatal("no tensors")
	}
}
