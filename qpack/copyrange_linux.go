//go:build linux

package qpack

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// copyRange copies n bytes of src from byte srcOff to dst at byte dstOff
// inside the kernel (copy_file_range), so they never pass through user
// memory; where the kernel or the file systems cannot, it falls back to
// reads and writes. A source that ends early is io.ErrUnexpectedEOF.
func copyRange(dst *os.File, dstOff int64, src *os.File, srcOff, n int64) error {
	sc, err := src.SyscallConn()
	if err != nil {
		return err
	}
	dc, err := dst.SyscallConn()
	if err != nil {
		return err
	}
	var done int64
	var opErr error
	fallback := false
	cerr := sc.Control(func(sfd uintptr) {
		cerr := dc.Control(func(dfd uintptr) {
			for done < n {
				so, do := srcOff+done, dstOff+done
				k, err := unix.CopyFileRange(int(sfd), &so, int(dfd), &do, int(min(n-done, 1<<30)), 0)
				switch {
				case errors.Is(err, unix.EINTR):
					continue
				case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EXDEV), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL):
					fallback = true
					return
				case err != nil:
					opErr = err
					return
				case k == 0:
					opErr = io.ErrUnexpectedEOF
					return
				}
				done += int64(k)
			}
		})
		if cerr != nil && opErr == nil {
			opErr = cerr
		}
	})
	if cerr != nil && opErr == nil {
		opErr = cerr
	}
	if fallback {
		return copyRangeRW(dst, dstOff+done, src, srcOff+done, n-done)
	}
	return opErr
}
