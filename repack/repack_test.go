package repack

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/internal/tinymodel"
	"github.com/qpack-go/qpack/qpack"
)

func TestRepackDirVariants(t *testing.T) {
	for _, v := range tinymodel.Variants() {
		t.Run(v.Name, func(t *testing.T) {
			src := tiny(t, v.Name, v.Spec)
			out := filepath.Join(t.TempDir(), "m.qpack")
			res := runDir(t, src, out, nil)
			c, err := qpack.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			n := checkAgainstSource(t, src, out)
			want := 8 * 8 * 3 * 3 // layers x experts x projections x parts
			if v.Spec.Bits == 0 {
				want = 8 * 8 * 3
			}
			if n != want {
				t.Errorf("compared %d expert slices, want %d", n, want)
			}
			t.Logf("%+v", res.Shards)
		})
	}
}

var errStopped = errors.New("stopped by a test hook")

// A Hugging Face cache snapshot links its files to blobs: shards reached
// through symlinks are read like files.
func TestRepackSymlinkedSnapshot(t *testing.T) {
	src := variant(t, "qwen3_next-q4g64")
	snap := filepath.Join(t.TempDir(), "snapshots", "abc")
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(snap, e.Name())); err != nil {
			t.Skip("symlinks not available:", err)
		}
	}
	ref := filepath.Join(t.TempDir(), "ref.qpack")
	runDir(t, src, ref, nil)
	out := filepath.Join(t.TempDir(), "out.qpack")
	runDir(t, snap, out, nil)
	// Only the source directory's name (recorded in the manifest) differs.
	a, b := treeFiles(t, ref), treeFiles(t, out)
	for p := range a {
		if p != "manifest.json" && string(a[p]) != string(b[p]) {
			t.Errorf("%s differs", p)
		}
	}
	checkAgainstSource(t, src, out)
}
