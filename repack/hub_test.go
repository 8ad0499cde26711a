package repack

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/internal/tinymodel"
	"github.com/qpack-go/qpack/qpack"
)

// repoFiles serves the files of dir, safetensors as LFS.
func repoFiles(t testing.TB, dir string) []hubtest.File {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []hubtest.File
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, hubtest.File{Path: e.Name(), Data: data, LFS: strings.HasSuffix(e.Name(), ".safetensors")})
	}
	return files
}

func newHub(t testing.TB, cfg hubtest.Config) *hubtest.Server {
	t.Helper()
	s, err := hubtest.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// hubOpts are the options of a repack from the fake Hub, with short
// timeouts so fault tests stay fast.
func hubOpts(s *hubtest.Server, repo, out string) Options {
	return Options{
		FromHF: repo, Output: out, Endpoint: s.URL, Reserve: -1, RangeSize: 16 << 10, TileSize: 4 << 10, ToolVersion: "test",
		Connections: 4,
		Hub: hfhub.Options{Anonymous: true, MaxRetries: 4, RetryWaitMin: 5 * time.Millisecond, RetryWaitMax: 20 * time.Millisecond,
			MaxRetryAfter: 50 * time.Millisecond, StallTimeout: 300 * time.Millisecond},
	}
}

// manifestMap reads manifest.json as a generic map.
func manifestMap(t *testing.T, dir string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// sameContainer fails unless a and b hold the same files with the same
// bytes; manifest.json may differ only in the source's provenance (repo,
// revision, commit), which a Hub and a directory source cannot share.
func sameContainer(t *testing.T, a, b string, provenanceMayDiffer bool) {
	t.Helper()
	fa, fb := treeFiles(t, a), treeFiles(t, b)
	if len(fa) != len(fb) {
		t.Errorf("%d files vs %d", len(fa), len(fb))
	}
	for p, da := range fa {
		db, ok := fb[p]
		if !ok {
			t.Errorf("%s missing from %s", p, b)
			continue
		}
		if p == "manifest.json" && provenanceMayDiffer {
			continue
		}
		if !bytes.Equal(da, db) {
			t.Errorf("%s differs", p)
		}
	}
	if provenanceMayDiffer {
		ma, mb := manifestMap(t, a), manifestMap(t, b)
		for _, m := range []map[string]any{ma, mb} {
			src := m["qpack"].(map[string]any)["source"].(map[string]any)
			delete(src, "repo")
			delete(src, "revision")
			delete(src, "commit")
		}
		if !reflect.DeepEqual(ma, mb) {
			t.Errorf("manifests differ beyond provenance:\n%v\n%v", ma, mb)
		}
	}
}

func TestHubMatchesDir(t *testing.T) {
	for _, name := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q4g32", "qwen3_next-q8g32"} {
		t.Run(name, func(t *testing.T) {
			var spec tinymodel.Spec
			for _, v := range tinymodel.Variants() {
				if v.Name == name {
					spec = v.Spec
				}
			}
			src := tiny(t, name, spec)
			s := newHub(t, hubtest.Config{})
			commit := s.MustAddRepo("mlx-community/"+name, repoFiles(t, src), hubtest.RepoOptions{})
			tmp := t.TempDir()
			local := filepath.Join(tmp, "local.qpack")
			runDir(t, src, local, nil)
			remote := filepath.Join(tmp, "remote.qpack")
			res, err := Run(context.Background(), hubOpts(s, "mlx-community/"+name, remote))
			if err != nil {
				t.Fatal(err)
			}
			sameContainer(t, local, remote, true)
			checkAgainstSource(t, src, remote)
			if res.Commit != commit {
				t.Errorf("commit %s, want %s", res.Commit, commit)
			}
			for _, sh := range res.Shards {
				if !sh.Verified {
					t.Errorf("shard %s not verified against the Hub's sha256", sh.Name)
				}
			}
			m := manifestMap(t, remote)
			src2 := m["qpack"].(map[string]any)["source"].(map[string]any)
			if src2["commit"] != commit || src2["repo"] != "mlx-community/"+name {
				t.Errorf("manifest source %v", src2)
			}
			// No range was fetched twice: every CDN body byte belongs to
			// the shard bytes exactly once, plus the header reads.
			var cdn int64
			log, ok := s.SettledRequests()
			if !ok {
				t.Fatal("the fake Hub still has requests in progress after 5 s")
			}
			for _, r := range log {
				if r.Route == hubtest.RouteCDN && r.Method == "GET" {
					cdn += r.BodyBytes
				}
			}
			if cdn > res.SourceBytes+int64(len(res.Shards))*(1<<16) {
				t.Errorf("fetched %d CDN bytes for %d source bytes", cdn, res.SourceBytes)
			}
		})
	}
}

func TestHubFaults(t *testing.T) {
	name := "qwen3_next-q4g64"
	src := tiny(t, name, tinymodel.Variants()[1].Spec)
	ref := filepath.Join(t.TempDir(), "ref.qpack")
	runDir(t, src, ref, nil)
	shard := "model-00001-of-00002.safetensors"
	cases := []struct {
		name   string
		faults []hubtest.Fault
		fail   string // "" = must succeed
	}{
		{"cut", []hubtest.Fault{{Kind: hubtest.FaultCut, Route: hubtest.RouteCDN, Path: shard, Skip: 3, Times: 3, AfterBytes: 5000}}, ""},
		{"5xx", []hubtest.Fault{{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 503, Skip: 2, Times: 3}}, ""},
		{"429", []hubtest.Fault{{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 429, RetryAfter: "0", Skip: 4, Times: 2}}, ""},
		{"stall", []hubtest.Fault{{Kind: hubtest.FaultStall, Route: hubtest.RouteCDN, Path: shard, Skip: 5, Times: 1, AfterBytes: 1000, Delay: 2 * time.Second}}, ""},
		{"reset", []hubtest.Fault{{Kind: hubtest.FaultReset, Route: hubtest.RouteCDN, Skip: 1, Times: 2}}, ""},
		{"lying-range", []hubtest.Fault{{Kind: hubtest.FaultLyingRange, Route: hubtest.RouteCDN, Path: shard, Skip: 6, Times: 1, Shift: 100}}, "sha256"},
		{"wrong-bytes", []hubtest.Fault{{Kind: hubtest.FaultWrongBytes, Route: hubtest.RouteCDN, Path: shard, Skip: 4, Times: 1}}, "sha256"},
		{"500-forever", []hubtest.Fault{{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 500, Skip: 3, Times: -1}}, "500"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newHub(t, hubtest.Config{})
			s.MustAddRepo("mlx-community/"+name, repoFiles(t, src), hubtest.RepoOptions{})
			for _, f := range tc.faults {
				s.Inject(f)
			}
			out := filepath.Join(t.TempDir(), name+".qpack")
			_, err := Run(context.Background(), hubOpts(s, "mlx-community/"+name, out))
			if n := s.FaultsPending(); n != 0 && tc.faults[0].Times >= 0 {
				t.Errorf("%d injected faults never fired", n)
			}
			t.Logf("error: %v", err)
			if tc.fail == "" {
				if err != nil {
					t.Fatalf("repack failed: %v", err)
				}
				sameContainer(t, ref, out, true)
				return
			}
			if err == nil {
				t.Fatalf("repack succeeded despite %s", tc.name)
			}
			if !strings.Contains(err.Error(), tc.fail) {
				t.Errorf("error %q does not mention %q", err, tc.fail)
			}
			if tc.fail == "sha256" && !strings.Contains(err.Error(), shard) {
				t.Errorf("error %q does not name the shard %s", err, shard)
			}
			if _, err := os.Lstat(out); err == nil {
				t.Fatalf("a container was placed at %s despite the error", out)
			}
			// The faults are spent: a rerun must give the right container.
			s.ClearFaults()
			if _, err := Run(context.Background(), hubOpts(s, "mlx-community/"+name, out)); err != nil {
				t.Fatalf("rerun: %v", err)
			}
			sameContainer(t, ref, out, true)
			if _, err := qpack.Open(out); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Shards stored as regular git files (no LFS) are checked against their git
// blob id, also across a resume in the middle of a shard.
func TestHubGitBlobShards(t *testing.T) {
	name := "qwen3_next-q4g64"
	src := variant(t, name)
	files := repoFiles(t, src)
	for i := range files {
		files[i].LFS = false
	}
	s := newHub(t, hubtest.Config{})
	repo := "org/" + name
	s.MustAddRepo(repo, files, hubtest.RepoOptions{})
	ref := filepath.Join(t.TempDir(), "ref.qpack")
	runDir(t, src, ref, nil)

	out := filepath.Join(t.TempDir(), name+".qpack")
	mod, ctx := stopAt(7)
	o := hubOpts(s, repo, out)
	mod(&o)
	if _, err := Run(ctx, o); err == nil {
		t.Fatal("the stopped run finished")
	}
	data, _ := os.ReadFile(filepath.Join(out+".partial", JournalName))
	var j journal
	json.Unmarshal(data, &j)
	if j.BlobState == "" || j.HashState == "" {
		t.Fatalf("journal after a stop mid-shard has no blob hash state: %s", data)
	}
	res, err := Run(context.Background(), hubOpts(s, repo, out))
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range res.Shards {
		if !sh.Verified {
			t.Errorf("%s not verified", sh.Name)
		}
	}
	sameContainer(t, ref, out, true)

	// Wrong bytes are caught by the blob id, or earlier, where they fall
	// in the header, by the comparison with the header the plan used.
	s.Inject(hubtest.Fault{Kind: hubtest.FaultWrongBytes, Route: hubtest.RouteResolve, Path: "model-00002-of-00002.safetensors", Skip: 3, Times: -1})
	out2 := filepath.Join(t.TempDir(), "again.qpack")
	_, err = Run(context.Background(), hubOpts(s, repo, out2))
	if err == nil || !strings.Contains(err.Error(), "git blob sha1") && !strings.Contains(err.Error(), "safetensors header") || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
		t.Fatalf("err = %v", err)
	}
	mustNotExist(t, out2)
}
