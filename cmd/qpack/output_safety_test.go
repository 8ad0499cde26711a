package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/internal/treehash"
)

// TestRepackCLIRefusesOutput: repack --overwrite on something that is not
// a container, or on the source, exits 2 with a message naming the
// directory and why, and leaves it (and the source) unchanged.
func TestRepackCLIRefusesOutput(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "ckpt")
	if err := os.CopyFS(src, os.DirFS(genModel)); err != nil {
		t.Fatal(err)
	}
	user := filepath.Join(tmp, "Documents")
	if err := os.Mkdir(user, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(user, "taxes.pdf"), []byte("%PDF-1.7"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		out, why string
	}{
		{user, "--overwrite replaces only a qpack container, and it is not a qpack container (no manifest.json)"},
		{src, "it is the source directory"},
		{tmp, "it contains the source directory"},
	} {
		before := treehash.Must(t, tmp)
		out, err := runCLI(t, "repack", "--from-dir", src, "--output", c.out, "--overwrite")
		if code := exitStatus(io.Discard, err); code != 2 {
			t.Errorf("repack --output %s --overwrite: exit %d (%v), want 2\n%s", c.out, code, err, out)
		}
		if err == nil || !strings.Contains(err.Error(), "refusing to write "+c.out+": ") || !strings.Contains(err.Error(), c.why) {
			t.Errorf("repack --output %s: error %v does not name it and say %q", c.out, err, c.why)
		}
		if treehash.Must(t, tmp) != before {
			t.Fatalf("repack --output %s --overwrite changed files although it was refused", c.out)
		}
	}
}

// TestQuickstartRefusesWorkdirPath: quickstart --workdir replaces its own
// tiny.qpack from an earlier run, but not a tiny.qpack it did not write.
func TestQuickstartRefusesWorkdirPath(t *testing.T) {
	work := t.TempDir()
	mine := filepath.Join(work, "tiny.qpack")
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mine, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := treehash.Must(t, work)
	out, err := runCLI(t, "quickstart", "--workdir", work)
	if code := exitStatus(io.Discard, err); code != 2 || !strings.Contains(err.Error(), mine) {
		t.Fatalf("quickstart over a tiny.qpack it did not write: exit %d, %v\n%s", code, err, out)
	}
	if treehash.Must(t, work) != before {
		t.Fatal("quickstart changed the workdir although it refused")
	}

	if err := os.RemoveAll(mine); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if out, err := runCLI(t, "quickstart", "--workdir", work); err != nil {
			t.Fatalf("quickstart run %d in %s: %v\n%s", i+1, work, err, out)
		}
	}
}

// TestQuickstartOutsideRepoKeepsWorkdir: outside the repository quickstart
// generates the tiny model itself, into a temporary directory of its own
// (removed afterwards), never over a same-named directory in --workdir.
func TestQuickstartOutsideRepoKeepsWorkdir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", filepath.Join(tmp, "tmp"))
	if err := os.Mkdir(filepath.Join(tmp, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(tmp, "work")
	mine := filepath.Join(work, bundledVariant)
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(mine, f), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := treehash.Must(t, mine)
	t.Chdir(tmp) // no testdata/tiny above: the model is generated
	if findBundled() != "" {
		t.Fatal("a bundled model is visible from the temp dir")
	}
	if out, err := runCLI(t, "quickstart", "--workdir", work); err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out)
	}
	if treehash.Must(t, mine) != before {
		t.Errorf("quickstart changed %s", mine)
	}
	if left, _ := os.ReadDir(filepath.Join(tmp, "tmp")); len(left) != 0 {
		t.Errorf("left in the temp dir: %v", left)
	}
}
