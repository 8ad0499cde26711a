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
	// Again: the container exists.
	_, err = runCLI(t, "repack", "--from-dir", src, "--output", out, "--reserve", "-1")
	if err == nil || !strings.Contains(err.Error(), "--overwrite") {
		t.Errorf("second repack: %v", err)
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
	for _, args := range [][]string{
		{"repack", "--output", "x.qpack"},
		{"repack", "--from-hf", "a/b", "--from-dir", "d", "--output", "x.qpack"},
		{"repack", "--from-dir", "d", "--revision", "v1", "--output", "x.qpack"},
		{"repack", "--from-dir", "d", "--output", "x.qpack", "extra"},
	} {
		_, err := runCLI(t, args...)
		var ee *exitError
		if err == nil || !asExit(err, &ee) || ee.code != 2 {
			t.Errorf("%v: err %v, want a usage error (exit 2)", args, err)
		}
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
