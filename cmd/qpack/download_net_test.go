package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// runNetCLI runs the qpack app in-process.
func runNetCLI(args ...string) (string, error) {
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(append([]string{"qpack"}, args...))
	return out.String(), err
}

// `qpack download` end to end against servers RFC 9110 allows and that the
// old client refused: a proxy answering every Range with the whole file,
// one honouring Range only at offset 0, ModelScope's 200 with the exact
// slice and Content-Range. Each must give byte-identical files.
func TestDownloadCommandRangeSemantics(t *testing.T) {
	weights := bytes.Repeat([]byte("0123456789abcdef"), 40_000) // 640 KB: several ranges
	for _, kind := range []hubtest.FaultKind{hubtest.FaultIgnoreRange, hubtest.FaultIgnoreLaterRange, hubtest.FaultSliceOK} {
		t.Run(kind.String(), func(t *testing.T) {
			hub, err := hubtest.NewServer(hubtest.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer hub.Close()
			commit := hub.MustAddRepo("org/m", []hubtest.File{
				{Path: "config.json", Data: []byte(`{"x":1}`)},
				{Path: "model.safetensors", Data: weights, LFS: true},
			}, hubtest.RepoOptions{})
			hub.Inject(hubtest.Fault{Kind: kind, Route: hubtest.RouteAny, Times: -1})
			t.Setenv("HF_ENDPOINT", hub.URL)
			t.Setenv("HF_TOKEN", "")
			t.Setenv("HF_HOME", t.TempDir())
			cache := t.TempDir()
			out, err := runNetCLI("download", "org/m", "--cache-dir", cache, "--connections", "4")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			snap := filepath.Join(cache, "models--org--m", "snapshots", commit)
			if b, err := os.ReadFile(filepath.Join(snap, "model.safetensors")); err != nil || !bytes.Equal(b, weights) {
				t.Fatalf("model.safetensors: %v", err)
			}
			applied := false
			for _, r := range hub.Requests() {
				applied = applied || r.Fault == kind.String()
			}
			if !applied {
				t.Fatal("the server behaviour never applied")
			}
		})
	}
}

// `qpack download --local-dir` refuses to overwrite a user's file of the
// same name and other content, and leaves it unchanged.
func TestDownloadCommandLocalDirKeepsUserFile(t *testing.T) {
	hub, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hub.MustAddRepo("org/m", []hubtest.File{{Path: "config.json", Data: []byte(`{"x":1}`)}}, hubtest.RepoOptions{})
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	dir := t.TempDir()
	mine := filepath.Join(dir, "config.json")
	os.WriteFile(mine, []byte("my own notes"), 0o644)
	out, err := runNetCLI("download", "org/m", "--local-dir", dir)
	if err == nil {
		t.Fatalf("want a refusal, got success:\n%s", out)
	}
	if msg := err.Error() + out; !strings.Contains(msg, "refusing to overwrite") || !strings.Contains(msg, "config.json") {
		t.Fatalf("unclear refusal: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(mine); string(b) != "my own notes" {
		t.Fatalf("the user's file changed: %q", b)
	}
}
