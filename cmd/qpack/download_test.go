package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

func TestDownloadCommand(t *testing.T) {
	hub, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	weights := []byte(strings.Repeat("w", 100_000))
	commit := hub.MustAddRepo("org/m", []hubtest.File{
		{Path: "config.json", Data: []byte(`{"x":1}`)},
		{Path: "w/model.safetensors", Data: weights, LFS: true},
	}, hubtest.RepoOptions{})
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	cache := t.TempDir()

	// Flags after the repository, repeated --include, --json.
	out, err := runCLI(t, "download", "org/m", "--cache-dir", cache, "--include", "*.json", "--include", "w/", "--json", "--connections", "2")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var res struct {
		Commit      string `json:"commit"`
		SnapshotDir string `json:"snapshot_dir"`
		Files       []struct {
			Path, Status, SHA256 string
			Size                 int64
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Commit != commit || len(res.Files) != 2 || res.Files[1].Path != "w/model.safetensors" || res.Files[1].Status != "downloaded" || res.Files[1].Size != 100_000 {
		t.Fatalf("summary %+v", res)
	}
	b, err := os.ReadFile(filepath.Join(res.SnapshotDir, "w", "model.safetensors"))
	if err != nil || string(b) != string(weights) {
		t.Fatalf("snapshot file: %v", err)
	}

	// Offline: prints the snapshot directory and touches no network.
	hub.ResetLog()
	out, err = runCLI(t, "download", "--offline", "--cache-dir", cache, "org/m")
	if err != nil || strings.TrimSpace(out) != res.SnapshotDir {
		t.Fatalf("offline: %v %q", err, out)
	}
	if n := len(hub.Requests()); n != 0 {
		t.Fatalf("offline made %d requests", n)
	}

	// Dry run into an empty cache lists both files as planned.
	out, err = runCLI(t, "download", "org/m", "--dry-run", "--cache-dir", t.TempDir())
	if err != nil || strings.Count(out, "planned") != 2 {
		t.Fatalf("dry run: %v\n%s", err, out)
	}

	// Usage errors.
	if _, err := runCLI(t, "download"); err == nil {
		t.Fatal("no repo accepted")
	}
	if _, err := runCLI(t, "download", "../evil"); err == nil {
		t.Fatal("bad repo id accepted")
	}
	if _, err := runCLI(t, "download", "org/m", "--connections", "0"); err == nil {
		t.Fatal("--connections 0 accepted")
	}
	out, err = runCLI(t, "download", "org/missing", "--cache-dir", cache)
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing repo: %v", err)
	}
}

// An empty --local-dir (an unset shell variable) is a usage error, before
// any request: it must not quietly mean the default cache.
func TestDownloadEmptyDirFlag(t *testing.T) {
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1")
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	for _, args := range [][]string{
		{"download", "--local-dir", "", "org/m"},
		{"download", "org/m", "--local-dir", ""},
	} {
		_, err := runCLI(t, args...)
		if vfExitCode(err) != 2 || !strings.Contains(err.Error(), "is empty") {
			t.Errorf("%q: exit %d, %v", args, vfExitCode(err), err)
		}
	}
	if ents, _ := os.ReadDir(home); len(ents) != 0 {
		t.Errorf("HF_HOME written: %v", ents)
	}
}

// A repeatable flag's value is taken whole, commas and all (before or
// after the repository): --include "a,b.json" is one glob, as in hf
// download, not the two globs "a" and "b.json".
func TestDownloadIncludeWithComma(t *testing.T) {
	hub, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hub.MustAddRepo("org/m", []hubtest.File{
		{Path: "a,b.json", Data: []byte(`{"x":1}`)},
		{Path: "a", Data: []byte("a")},
		{Path: "b.json", Data: []byte(`{}`)},
	}, hubtest.RepoOptions{})
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	for _, args := range [][]string{
		{"download", "--include", "a,b.json", "--json", "--cache-dir", t.TempDir(), "org/m"},
		{"download", "org/m", "--include", "a,b.json", "--json", "--cache-dir", t.TempDir()},
	} {
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var res struct {
			Files []struct{ Path string } `json:"files"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if len(res.Files) != 1 || res.Files[0].Path != "a,b.json" {
			t.Errorf("%q: got %+v", args, res.Files)
		}
	}
}

// A --local-dir that is a file or a dangling link is bad input (exit 2,
// naming it) before any request, and is left as it was.
func TestDownloadLocalDirNotADirectory(t *testing.T) {
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("HF_HOME", t.TempDir())
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	dangling := filepath.Join(tmp, "dangling")
	os.Symlink(filepath.Join(tmp, "nothing"), dangling)
	for _, d := range []string{file, dangling} {
		_, err := runCLI(t, "download", "org/m", "--local-dir", d)
		if vfExitCode(err) != 2 || !strings.Contains(err.Error(), d) {
			t.Errorf("%s: exit %d, %v", d, vfExitCode(err), err)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Errorf("file changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(tmp, "nothing")); err == nil {
		t.Error("the dangling link's target was created")
	}
}

// A bad flag value is one line naming the flag as typed (--name), exit 2,
// for a boolean as for any other flag, before or after the repository.
func TestDownloadBadFlagValue(t *testing.T) {
	for _, tc := range []struct {
		flag string
		args []string
	}{
		{"--json", []string{"download", "--json=maybe", "org/m"}},
		{"--json", []string{"download", "org/m", "--json=maybe"}},
		{"--connections", []string{"download", "--connections", "abc", "org/m"}},
	} {
		_, err := runCLI(t, tc.args...)
		if vfExitCode(err) != 2 || !strings.Contains(err.Error(), " for "+tc.flag+":") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: exit %d, %v", tc.args, vfExitCode(err), err)
		}
	}
}
