package qpack

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// CopyFileRange copies n bytes of src from byte srcOff to dst at byte
// dstOff, as CopyFrom does: inside the kernel on Linux (copy_file_range),
// with reads and writes elsewhere or where the file systems cannot. A
// source that ends early is io.ErrUnexpectedEOF.
func CopyFileRange(dst *os.File, dstOff int64, src *os.File, srcOff, n int64) error {
	if n < 0 || srcOff < 0 || dstOff < 0 {
		return fmt.Errorf("copy of %d bytes from %d to %d: negative size or offset", n, srcOff, dstOff)
	}
	return copyRange(dst, dstOff, src, srcOff, n)
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// copyRangeRW is copyRange with reads and writes through a pooled buffer.
func copyRangeRW(dst *os.File, dstOff int64, src *os.File, srcOff, n int64) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for n > 0 {
		b := buf[:min(int64(len(buf)), n)]
		k, err := src.ReadAt(b, srcOff)
		if k < len(b) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if _, err := dst.WriteAt(b, dstOff); err != nil {
			return err
		}
		srcOff += int64(k)
		dstOff += int64(k)
		n -= int64(k)
	}
	return nil
}
