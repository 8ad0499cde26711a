//go:build linux

package verify

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directReader streams a local source shard. Blocks whose pages are not
// in the page cache are read with O_DIRECT: the disk writes straight into
// the buffer, which saves the kernel's copy and its cache bookkeeping
// (about 0.35 ns per byte here, a tenth of the CPU time of the deep check).
// Blocks mostly in the cache (mincore says so) are read from it as usual.
// Any refusal (a file system without O_DIRECT, an alignment the device
// does not accept) falls back to ordinary reads.
type directReader struct {
	buffered *os.File
	direct   *os.File
	m        []byte      // a mapping of the file, only for mincore (never touched)
	off      atomic.Bool // O_DIRECT failed: ordinary reads from then on
	drop     bool
}

// directAlign is the alignment of O_DIRECT buffers, offsets and lengths
// (a multiple of every logical block size in use).
const directAlign = 4096

// openDirect opens sh for direct reads, nil when it cannot be.
func openDirect(sh *SourceShard, drop bool) *directReader {
	if sh.file == nil || sh.path == "" || sh.Size <= 0 || int64(int(sh.Size)) != sh.Size {
		return nil
	}
	f, err := os.OpenFile(sh.path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	a, err1 := f.Stat()
	b, err2 := sh.file.Stat()
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		f.Close()
		return nil
	}
	d := &directReader{buffered: sh.file, direct: f, drop: drop}
	if m, err := mapFile(f, int(sh.Size)); err == nil {
		d.m = m
	}
	return d
}

func (d *directReader) close() {
	if d.m != nil {
		unmapFile(d.m)
	}
	d.direct.Close()
}

// cached reports whether most of the pages of [off, off+n) are in the page
// cache. Without an answer it says no.
func (d *directReader) cached(off int64, n int) bool {
	if d.m == nil || n <= 0 || off < 0 || off+int64(n) > int64(len(d.m)) {
		return false
	}
	page := int64(os.Getpagesize())
	a := off &^ (page - 1)
	vec := make([]byte, (off+int64(n)-a+page-1)/page)
	r := d.m[a : off+int64(n)]
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&r[0])), uintptr(len(r)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return false
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return 2*in > len(vec)
}

// readAt fills p with the bytes at off. off must be a multiple of
// directAlign, p must start at an address aligned to it and have room (its
// capacity) for len(p) rounded up to it.
func (d *directReader) readAt(p []byte, off int64) (int, error) {
	if d.off.Load() || d.cached(off, len(p)) {
		return d.readBuffered(p, off)
	}
	want := (len(p) + directAlign - 1) &^ (directAlign - 1)
	got, err := d.direct.ReadAt(p[:want], off)
	if got >= len(p) {
		return len(p), nil
	}
	if errors.Is(err, unix.EINVAL) {
		d.off.Store(true)
		return d.readBuffered(p, off)
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return got, err
}

func (d *directReader) readBuffered(p []byte, off int64) (int, error) {
	got, err := d.buffered.ReadAt(p, off)
	if d.drop {
		dropCache(d.buffered, off, int64(got))
	}
	return got, err
}

// openDirect opens a listed container file with O_DIRECT, nil when it
// cannot be (or is not the file the inventory saw).
func (v *verifier) openDirect(p string) *os.File {
	want, ok := v.stats[p]
	if !ok {
		return nil
	}
	f, err := v.root.OpenFile(filepath.FromSlash(p), os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || !os.SameFile(st, want) || st.Size() != want.Size() {
		f.Close()
		return nil
	}
	return f
}
