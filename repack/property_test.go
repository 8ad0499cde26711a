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

// propertySeeds is how many random corruptions the property test tries:
// QPACK_PROPERTY_SEEDS overrides it (bench/soak runs thousands).
func propertySeeds(t *testing.T, def int) int {
	if v := os.Getenv("QPACK_PROPERTY_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("QPACK_PROPERTY_SEEDS=%q", v)
		}
		return n
	}
	if testing.Short() {
		return def / 4
	}
	return def
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
	name := "qwen3_5_moe-q4g32"
	src := variant(t, name)
	s := newHub(t, hubtest.Config{})
	repo := "org/" + name
	s.MustAddRepo(repo, repoFiles(t, src), hubtest.RepoOptions{})

	rec := &corrupt.Transport{}
	ref := filepath.Join(t.TempDir(), "ref.qpack")
	if _, err := Run(context.Background(), corruptOpts(s, repo, ref, rec)); err != nil {
		t.Fatal(err)
	}
	keys := rec.Keys()
	if len(keys) < 10 {
		t.Fatalf("only %d responses recorded", len(keys))
	}
	outcomes := map[string]int{}
	for seed := range propertySeeds(t, 32) {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		tr := &corrupt.Transport{Target: keys[rng.IntN(len(keys))], Kind: corrupt.Kind(rng.IntN(int(corrupt.NumKinds))), Seed: uint64(seed)}
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
	name := "qwen3_5_moe-q4g32"
	src := variant(t, name)
	s := newHub(t, hubtest.Config{})
	repo := "org/" + name
	s.MustAddRepo(repo, repoFiles(t, src), hubtest.RepoOptions{})
	rec := &corrupt.Transport{}
	ref := filepath.Join(t.TempDir(), "ref.qpack")
	if _, err := Run(context.Background(), corruptOpts(s, repo, ref, rec)); err != nil {
		t.Fatal(err)
	}
	var target string
	for _, k := range rec.Keys() {
		if strings.HasPrefix(k, "GET /repos/") && strings.HasSuffix(k, " bytes=8-"+headerEnd(t, src)) {
			target = k
		}
	}
	if target == "" {
		t.Fatalf("no header response among %v", rec.Keys())
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
