package verify

import (
	"context"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/internal/corrupt"
)

// propHub serves the fixture's checkpoint and returns a function that
// opens it as a deep-check source through tr.
func propHub(t *testing.T, f *fixture) func(tr http.RoundTripper) (*Source, error) {
	t.Helper()
	t.Setenv("HF_HUB_CACHE", t.TempDir()) // nothing cached: every byte over HTTP
	hub, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	var files []hubtest.File
	ents, _ := os.ReadDir(f.src)
	for _, e := range ents {
		files = append(files, hubtest.File{Path: e.Name(), Data: must(os.ReadFile(filepath.Join(f.src, e.Name()))), LFS: strings.HasSuffix(e.Name(), ".safetensors")})
	}
	const repo = "test-org/tiny"
	hub.MustAddRepo(repo, files, hubtest.RepoOptions{})
	return func(tr http.RoundTripper) (*Source, error) {
		c, err := hfhub.NewClient(hfhub.Options{Endpoint: hub.URL, Anonymous: true, MaxRetries: 2, HTTPClient: &http.Client{Transport: tr},
			RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond, StallTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return OpenHubSource(context.Background(), c, repo, "main", hfhub.ReaderOptions{})
	}
}

// propertyFixture is a good container, an opener of its source on a fake
// Hub, and the keys of the responses a clean, passing deep check saw.
func propertyFixture(t *testing.T) (*fixture, func(http.RoundTripper) (*Source, error), []string) {
	t.Helper()
	f := newFixture(t, "qwen3_5_moe-q4g32")
	open := propHub(t, f)
	rec := &corrupt.Transport{}
	src, err := open(rec)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, run(t, f.dir, Options{Deep: &DeepOptions{Source: src}}), StatusOK)
	src.Close()
	return f, open, rec.Keys()
}

// One corrupted response while a good container is deep-checked against
// the Hub: the report is ok with every shard's hash checked, or the source
// is reported (or refused) — the good container is never called damaged,
// and nothing unchecked is called ok.
func TestPropertyDeepSingleCorruption(t *testing.T) {
	f, open, keys := propertyFixture(t)
	outcomes := map[string]int{}
	for seed := range corrupt.Seeds(t, 24) {
		tr := corrupt.Random(keys, uint64(seed))
		src, err := open(tr)
		if err != nil {
			outcomes["refused at open"]++
			continue
		}
		r := run(t, f.dir, Options{Deep: &DeepOptions{Source: src}})
		src.Close()
		outcomes[string(r.Status)]++
		if len(r.ContainerProblems()) != 0 {
			t.Fatalf("seed %d (%s): the good container is blamed:\n%s", seed, tr.Applied(), dump(r))
		}
		if r.Status == StatusOK {
			for _, s := range r.Deep.Shards {
				if s.Status != "ok" {
					t.Fatalf("seed %d (%s): ok with shard %s %s", seed, tr.Applied(), s.Name, s.Status)
				}
			}
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// Two tensor names swapped in a header response: the deep map would
// compare each tensor with the other's bytes. The header is checked
// against the hashed stream: the source is reported, not the container.
func TestDeepSwappedHeaderNames(t *testing.T) {
	f, open, keys := propertyFixture(t)
	var target string
	for _, k := range keys {
		if strings.HasPrefix(k, "GET /repos/") && strings.Contains(k, " bytes=8-") {
			target = k
			break
		}
	}
	if target == "" {
		t.Fatalf("no header read among %v", keys)
	}
	tr := &corrupt.Transport{Target: target, Kind: corrupt.SwapStrings, MinLen: 12}
	src, err := open(tr)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r := run(t, f.dir, Options{Deep: &DeepOptions{Source: src}})
	wantStatus(t, r, StatusUnusable)
	if len(r.ContainerProblems()) != 0 || len(find(r, func(p Problem) bool {
		return p.Kind == KindSourceHash && strings.Contains(p.Message, "safetensors header")
	})) != 1 {
		t.Fatalf("%s:\n%s", tr.Applied(), dump(r))
	}
}

// A directory source whose shard header changes after it was read (two
// tensor names swapped in place): the deep check reports the source, not
// the good container.
func TestDeepDirHeaderChanged(t *testing.T) {
	f := newFixture(t, "qwen3_5_moe-q4g32")
	src, err := OpenDirSource(f.src)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	p := filepath.Join(f.src, "model-00002-of-00003.safetensors")
	data := must(os.ReadFile(p))
	n := int(data[0]) | int(data[1])<<8 | int(data[2])<<16
	bad, what := corrupt.Damage(data[8:8+n], corrupt.SwapStrings, rand.New(rand.NewPCG(1, 2)))
	w := must(os.OpenFile(p, os.O_WRONLY, 0))
	_, err = w.WriteAt(bad, 8)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, f.dir, Options{Deep: &DeepOptions{Source: src}})
	wantStatus(t, r, StatusUnusable)
	if len(r.ContainerProblems()) != 0 || len(find(r, func(p Problem) bool {
		return p.Kind == KindSourceHash && p.File == "model-00002-of-00003.safetensors" && strings.Contains(p.Message, "safetensors header")
	})) != 1 {
		t.Fatalf("%s:\n%s", what, dump(r))
	}
}
