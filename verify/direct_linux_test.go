//go:build linux

package verify

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Direct reads return the file's bytes, cold or cached, whole blocks and
// the short last one, and fall back to ordinary reads where O_DIRECT is
// refused.
func TestDirectReader(t *testing.T) {
	p := filepath.Join(t.TempDir(), "shard")
	data := make([]byte, 5*directAlign+1234)
	r := rand.NewChaCha8([32]byte{3})
	r.Read(data)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	sh := &SourceShard{Name: "shard", Size: int64(len(data)), file: f, path: p}
	d := openDirect(sh, true)
	if d == nil {
		t.Skip("no O_DIRECT on this file system")
	}
	defer d.close()
	const bs = 2 * directAlign
	buf := alignedBuffer(bs)
	read := func(what string) {
		t.Helper()
		for off := int64(0); off < int64(len(data)); off += bs {
			n := min(bs, int64(len(data))-off)
			got, err := d.readAt(buf[:n], off)
			if err != nil || int64(got) != n || !bytes.Equal(buf[:n], data[off:off+n]) {
				t.Fatalf("%s: block at %d: %d bytes, %v, equal %v", what, off, got, err, bytes.Equal(buf[:got], data[off:off+int64(got)]))
			}
		}
	}
	dropCache(f, 0, 0)
	read("cold")
	if _, err := f.ReadAt(make([]byte, len(data)), 0); err != nil {
		t.Fatal(err)
	}
	read("cached")
	d.off.Store(true)
	read("ordinary reads")
}

func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{directAlign, 3 * directAlign, 100 << 10} {
		b := alignedBuffer(n)
		if len(b) != n || cap(b) < n || addr(b)%directAlign != 0 {
			t.Fatalf("%d: len %d cap %d addr %#x", n, len(b), cap(b), addr(b))
		}
	}
}
