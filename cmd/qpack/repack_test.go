package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/internal/tinymodel"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/repack"
)

func TestRepackCLI(t *testing.T) {
	src := filepath.Join(t.TempDir(), "qwen3_next-q4g64")
	if err := tinymodel.Generate(src, tinymodel.Spec{Arch: tinymodel.ArchQwen3Next, Bits: 4, GroupSize: 64, Shards: 2, Seed: tinymodel.SeedQwen3Next}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.qpack")
	stdout, err := runCLI(t, "repack", "--from-dir", src, "--output", out, "--json", "--reserve", "-1")
	if err != nil {
		t.Fatalf("repack: %v\n%s", err, stdout)
	}
	var res repack.Result
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, stdout)
	}
	if res.Output != out || res.Mode != "repack" || len(res.Shards) != 2 || res.SourceBytes <= 0 || res.OutputBytes <= 0 {
		t.Errorf("summary %+v", res)
	}
	for _, s := range res.Shards {
		if len(s.SHA256) != 64 {
			t.Errorf("shard %+v has no sha256", s)
		}
	}
	c, err := qpack.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Again: the container exists (a usage error, exit 2).
	_, err = runCLI(t, "repack", "--from-dir", src, "--output", out, "--reserve", "-1")
	if err == nil || !strings.Contains(err.Error(), "--overwrite") || vfExitCode(err) != 2 {
		t.Errorf("second repack: %v (exit %d)", err, vfExitCode(err))
	}
	stdout, err = runCLI(t, "repack", "--from-dir", src, "--output", out, "--overwrite", "--reserve", "-1")
	if err != nil || !strings.Contains(stdout, "repacked") || !strings.Contains(stdout, "sha256 recorded") {
		t.Errorf("overwrite: %v\n%s", err, stdout)
	}
	if _, err := os.Stat(out + ".partial"); err == nil {
		t.Error("partial directory left behind")
	}
}

func TestRepackCLIUsage(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "ckpt")
	if err := tinymodel.Generate(src, tinymodel.Spec{Arch: tinymodel.ArchQwen3Next, Bits: 4, GroupSize: 64, Shards: 1, Seed: tinymodel.SeedQwen3Next}); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(tmp, "empty")
	configOnly := filepath.Join(tmp, "config-only")
	notCkpt := filepath.Join(tmp, "not-a-checkpoint")
	for _, d := range []string{empty, configOnly, notCkpt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(configOnly, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	// Shards, but a config.json that names no known model.
	shards, _ := filepath.Glob(filepath.Join(src, "*.safetensors"))
	for _, sh := range shards {
		data, err := os.ReadFile(sh)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(notCkpt, filepath.Base(sh)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(notCkpt, "config.json"), []byte(`{"model_type": "llama"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	aFile := filepath.Join(src, "config.json")
	out := filepath.Join(tmp, "x.qpack")
	for _, args := range [][]string{
		{"repack", "--output", "x.qpack"},
		{"repack", "--from-hf", "a/b", "--from-dir", "d", "--output", "x.qpack"},
		{"repack", "--from-dir", "d", "--revision", "v1", "--output", "x.qpack"},
		{"repack", "--from-dir", "d", "--output", "x.qpack", "extra"},
		{"repack", "--from-dir", src},                                                  // no --output
		{"repack", "--from-dir", src, "--output", ""},                                  // empty --output
		{"repack", "--from-dir", src, "--output", filepath.Join(tmp, "no", "x.qpack")}, // its directory is missing
		{"repack", "--from-dir", filepath.Join(tmp, "nosuch"), "--output", out},        // source does not exist
		{"repack", "--from-dir", aFile, "--output", out},                               // source is a file
		{"repack", "--from-dir", empty, "--output", out},                               // no checkpoint in it
		{"repack", "--from-dir", configOnly, "--output", out},                          // config.json, no shards
		{"repack", "--from-dir", notCkpt, "--output", out},                             // shards, unknown model
		{"repack", "--from-hf", "not a repo id", "--output", out},
		{"repack", "--from-dir", src, "--output", out, "--connections", "many"}, // a flag that does not parse
		{"repack", "--from-dir", src, "--output", out, "--nosuchflag"},
	} {
		stdout, err := runCLI(t, args...)
		var ee *exitError
		if err == nil || !asExit(err, &ee) || ee.code != 2 {
			t.Errorf("%q: err %v, want a usage error (exit 2)\n%s", args, err, stdout)
		}
		t.Logf("%v: %v", args[1:], err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a container was written")
	}
	// A failure during the repack (here: the output's disk lacks the free
	// space asked for) is exit 1.
	_, err = runCLI(t, "repack", "--from-dir", src, "--output", out, "--reserve", "4611686018427387904")
	if code := vfExitCode(err); code != 1 {
		t.Errorf("no space: err %v, exit %d, want 1", err, code)
	}
}

func asExit(err error, target **exitError) bool {
	for err != nil {
		if e, ok := err.(*exitError); ok {
			*target = e
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// An offline repack checked its shards against the cached listing, not the
// Hub: the summary says which.
func TestRepackSummaryOffline(t *testing.T) {
	r := &repack.Result{Output: "x.qpack", Repo: "org/m", Commit: strings.Repeat("a", 40),
		Shards: []repack.ShardResult{{Name: "model.safetensors", Size: 10, SHA256: strings.Repeat("b", 64), Verified: true}}}
	for _, offline := range []bool{false, true} {
		var b strings.Builder
		printRepackSummary(&b, r, offline)
		hub, cached := strings.Contains(b.String(), "verified against the Hub"), strings.Contains(b.String(), "cached Hub listing (offline)")
		if hub == offline || cached != offline {
			t.Errorf("offline %v:\n%s", offline, b.String())
		}
	}
}
