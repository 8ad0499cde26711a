package treehash

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestSumSeesEveryChange(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "tree")
	must(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "sub", "a"), []byte("abc"), 0o644))
	must(t, os.Symlink("sub/a", filepath.Join(root, "link")))
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Logf("no FIFO: %v", err)
	}
	base := Must(t, root)
	if again := Must(t, root); again != base {
		t.Fatal("two digests of the same tree differ")
	}
	changes := []struct {
		name     string
		do, undo func() error
	}{
		{"content", func() error { return os.WriteFile(filepath.Join(root, "sub", "a"), []byte("abd"), 0o644) },
			func() error { return os.WriteFile(filepath.Join(root, "sub", "a"), []byte("abc"), 0o644) }},
		{"mode", func() error { return os.Chmod(filepath.Join(root, "sub", "a"), 0o600) },
			func() error { return os.Chmod(filepath.Join(root, "sub", "a"), 0o644) }},
		{"new file", func() error { return os.WriteFile(filepath.Join(root, "b"), nil, 0o644) },
			func() error { return os.Remove(filepath.Join(root, "b")) }},
		{"new empty dir", func() error { return os.Mkdir(filepath.Join(root, "d"), 0o755) },
			func() error { return os.Remove(filepath.Join(root, "d")) }},
		{"symlink target", func() error {
			os.Remove(filepath.Join(root, "link"))
			return os.Symlink("sub/b", filepath.Join(root, "link"))
		}, func() error {
			os.Remove(filepath.Join(root, "link"))
			return os.Symlink("sub/a", filepath.Join(root, "link"))
		}},
		{"rename", func() error { return os.Rename(filepath.Join(root, "sub", "a"), filepath.Join(root, "sub", "c")) },
			func() error { return os.Rename(filepath.Join(root, "sub", "c"), filepath.Join(root, "sub", "a")) }},
	}
	for _, c := range changes {
		must(t, c.do())
		if Must(t, root) == base {
			t.Errorf("%s: the digest did not change", c.name)
		}
		must(t, c.undo())
		if Must(t, root) != base {
			t.Fatalf("%s: undone, the digest differs", c.name)
		}
	}
	must(t, os.RemoveAll(root))
	if got := Must(t, root); got != "absent" {
		t.Errorf("a removed tree digests as %q", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
