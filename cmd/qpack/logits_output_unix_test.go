//go:build unix

package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// logits --output naming something that is not a regular file (a FIFO, a
// directory; /dev/null was the case found) is refused before the forward
// pass, exit 2, and the thing is left as it was: the atomic rename of the
// safetensors writer would replace it.
func TestLogitsOutputNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no FIFOs:", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "not a regular file (a FIFO)"},
		{link, "not a regular file (a FIFO)"},
		{sub, "not a regular file (a directory)"},
	} {
		_, err := runLogitsCLI(t, logitsModel, "--tokens", "1,2", "--output", tc.path)
		var ee *exitError
		if err == nil || !strings.Contains(err.Error(), "--output "+tc.path+": "+tc.want) || !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("--output %s: err = %v, want exit 2 with %q", tc.path, err, tc.want)
		}
	}
	if st, err := os.Stat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced: %v %v", st, err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", st, err)
	}
	if st, err := os.Stat(sub); err != nil || !st.IsDir() {
		t.Fatalf("the directory was replaced: %v %v", st, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Fatalf("files left behind in %s: %v", dir, entries)
	}
}

// An existing --output that qpack logits did not write (here a text file
// and another safetensors file) is refused and left as it was; an earlier
// logits output is replaced.
func TestLogitsOutputOnlyReplacesItsOwn(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "weights.safetensors")
	shard, err := filepath.Glob(filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-f32", "*.safetensors"))
	if err != nil || len(shard) == 0 {
		t.Fatal("no tiny shard", err)
	}
	data, err := os.ReadFile(shard[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{notes, other} {
		before, _ := os.ReadFile(p)
		_, err := runLogitsCLI(t, logitsModel, "--tokens", "1,2", "--output", p)
		var ee *exitError
		if err == nil || !strings.Contains(err.Error(), "--output "+p+" exists and is not a file qpack logits wrote") || !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("--output %s: err = %v, want exit 2, not written by qpack logits", p, err)
		}
		if after, _ := os.ReadFile(p); string(after) != string(before) {
			t.Errorf("%s was changed", p)
		}
	}
	own := filepath.Join(dir, "logits.safetensors")
	for i := range 2 {
		if out, err := runLogitsCLI(t, logitsModel, "--tokens", "1,2", "--output", own); err != nil {
			t.Fatalf("run %d onto %s: %v\n%s", i, own, err, out)
		}
	}
}
