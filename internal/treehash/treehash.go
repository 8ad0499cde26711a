package treehash

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Sum returns the digest of the tree at root (which may be a file or a
// symlink; it is not followed). A root that does not exist has the digest
// "absent".
func Sum(root string) (string, error) {
	if _, err := os.Lstat(root); os.IsNotExist(err) {
		return "absent", nil
	}
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%q %v %d\n", filepath.ToSlash(rel), info.Mode(), info.Size())
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "-> %q\n", target)
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			fh := sha256.New()
			if _, err := io.Copy(fh, f); err != nil {
				return err
			}
			fmt.Fprintf(h, "= %x\n", fh.Sum(nil))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// TB is the part of testing.TB that Must uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Must is Sum for tests: it fails t on an error.
func Must(t TB, root string) string {
	t.Helper()
	s, err := Sum(root)
	if err != nil {
		t.Fatalf("digesting %s: %v", root, err)
	}
	return s
}
