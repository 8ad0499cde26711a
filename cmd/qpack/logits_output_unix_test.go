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
