package repack

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/checkpoint"
	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/internal/corrupt"
)

// propertyHub serves a tiny sharded checkpoint, repacks it once with no
// damage into ref and returns the keys of the responses that run saw.
func propertyHub(t *testing.T) (s *hubtest.Server, repo, ref string, keys []string) {
	t.Helper()
	name := "qwen3_5_moe-q4g32"
	s = newHub(t, hubtest.Config{})
	repo = "org/" + name
	s.MustAddRepo(repo, repoFiles(t, variant(t, name)), hubtest.RepoOptions{})
	rec := &corrupt.Transport{}
	ref = filepath.Join(t.TempDir(), "ref.qpack")
	if _, err := Run(context.Background(), corruptOpts(s, repo, ref, rec)); err != nil {
		t.Fatal(err)
	}
	if keys = rec.Keys(); len(keys) < 10 {
		t.Fatalf("only %d responses recorded", len(keys))
	}
	return s, repo, ref, keys
}

// corruptOpts are hubOpts through tr, reading nothing from any cache.
func corruptOpts(s *hubtest.Server, repo, out string, tr http.RoundTripper) Options {
	o := hubOpts(s, repo, out)
	o.NoCache = true
	if tr != nil {
		o.HTTPClient = &http.Client{Transport: tr}
	}
	return o
}

// One corrupted response of the fake Hub (any of them: API JSON, a header
// range, a data range, a small file; a flipped bit, two equal-length
// strings swapped, a truncation) ends in the byte-identical container or
// in a clear error that placed nothing; after an error, a clean rerun
// (resuming what the failed run journaled) gives the identical container,
// so no wrong range was recorded either.
func TestPropertySingleCorruption(t *testing.T) {
	s, repo, ref, keys := propertyHub(t)
	outcomes := map[string]int{}
	for seed := range corrupt.Seeds(t, 24) {
		tr := corrupt.Random(keys, uint64(seed))
		out := filepath.Join(t.TempDir(), "out.qpack")
		res, err := Run(context.Background(), corruptOpts(s, repo, out, tr))
		what := tr.Applied()
		if err != nil {
			outcomes["error"]++
			if msg := err.Error(); len(msg) < 20 {
				t.Errorf("seed %d (%s): unclear error %q", seed, what, msg)
			}
			mustNotExist(t, out)
			if _, err := Run(context.Background(), corruptOpts(s, repo, out, nil)); err != nil {
				t.Fatalf("seed %d (%s): clean rerun: %v", seed, what, err)
			}
		} else {
			outcomes["identical"]++
			for _, sh := range res.Shards {
				if !sh.Verified {
					t.Errorf("seed %d (%s): %s not verified", seed, what, sh.Name)
				}
			}
		}
		sameContainer(t, ref, out, false)
		if t.Failed() {
			t.Fatalf("seed %d: %s (err %v)", seed, what, err)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// The case from issue 11: two same-length tensor names swapped in the
// header response. The plan would put each tensor's bytes under the other's
// name; the comparison of the header with the hashed stream refuses it,
// nothing is placed, and a clean rerun gives the right container.
func TestSwappedHeaderNamesRefused(t *testing.T) {
	s, repo, ref, keys := propertyHub(t)
	src := variant(t, "qwen3_5_moe-q4g32")
	var target string
	for _, k := range keys {
		if strings.HasPrefix(k, "GET /repos/") && strings.HasSuffix(k, " bytes=8-"+headerEnd(t, src)) {
			target = k
		}
	}
	if target == "" {
		t.Fatalf("no header response among %v", keys)
	}
	for seed := range 4 {
		tr := &corrupt.Transport{Target: target, Kind: corrupt.SwapStrings, Seed: uint64(seed), MinLen: 12}
		out := filepath.Join(t.TempDir(), "out.qpack")
		_, err := Run(context.Background(), corruptOpts(s, repo, out, tr))
		var hm *checkpoint.HeaderMismatchError
		if !errors.As(err, &hm) || !strings.Contains(err.Error(), "model-00001-of-00003.safetensors") {
			t.Fatalf("%s: err = %v, want a header mismatch naming the shard", tr.Applied(), err)
		}
		mustNotExist(t, out)
		if _, err := Run(context.Background(), corruptOpts(s, repo, out, nil)); err != nil {
			t.Fatal(err)
		}
		sameContainer(t, ref, out, false)
	}
}

// headerEnd is the last byte of the first shard's header, as a range end.
func headerEnd(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "model-00001-of-00003.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	f.ReadAt(b[:], 0)
	n := int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16 | int64(b[3])<<24
	return strconv.FormatInt(8+n-1, 10)
}

// swapInFile swaps two different same-length tensor names inside the
// header of the safetensors file at path, in place (same inode).
func swapInFile(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	f.ReadAt(b[:], 0)
	n := int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16 | int64(b[3])<<24
	hdr := make([]byte, n)
	f.ReadAt(hdr, 8)
	bad, what := corrupt.Damage(hdr, corrupt.SwapStrings, rand.New(rand.NewPCG(1, 2)))
	if _, err := f.WriteAt(bad, 8); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", path, what)
}

// A directory whose shard header changes after the plan read it (here two
// tensor names swapped in place): the stream no longer starts with the
// header the plan used, and the repack is refused with nothing placed.
func TestDirHeaderChangedRefused(t *testing.T) {
	dir := t.TempDir()
	src := variant(t, "qwen3_5_moe-q4g32")
	for _, e := range mustV(os.ReadDir(src)) {
		os.WriteFile(filepath.Join(dir, e.Name()), mustV(os.ReadFile(filepath.Join(src, e.Name()))), 0o644)
	}
	ds, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	if _, err := PlanSource(context.Background(), ds); err != nil {
		t.Fatal(err)
	}
	swapInFile(t, filepath.Join(dir, "model-00002-of-00003.safetensors"))
	out := filepath.Join(t.TempDir(), "out.qpack")
	_, err = Run(context.Background(), Options{Source: ds, Output: out, Reserve: -1, RangeSize: 16 << 10, TileSize: 4 << 10})
	var hm *checkpoint.HeaderMismatchError
	if !errors.As(err, &hm) || hm.Shard != "model-00002-of-00003.safetensors" {
		t.Fatalf("err = %v, want a header mismatch naming the shard", err)
	}
	mustNotExist(t, out, out+".partial")
}

func mustV[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
