//go:build linux

package verify

import (
	"os"

	"golang.org/x/sys/unix"
)

// The page cache is kept clean with posix_fadvise: the whole file is marked
// sequential when opened (the kernel reads ahead further), and every block is
// dropped with POSIX_FADV_DONTNEED as soon as it has been copied out, so a
// 45 GB verification leaves the cache as it found it (apart from pages that
// were cached before and are dropped too). O_DIRECT is not used: it needs
// aligned buffers, offsets and lengths, fails on some file systems (tmpfs,
// some FUSE and network mounts), and buys nothing over fadvise here.

func adviseSequential(f *os.File) {
	withFd(f, func(fd int) { _ = unix.Fadvise(fd, 0, 0, unix.FADV_SEQUENTIAL) })
}

// adviseReadAhead asks for a larger read-ahead on a file whose pages are
// kept.
func adviseReadAhead(f *os.File) { adviseSequential(f) }

// canShare: the pages a shared file leaves in the cache can be dropped
// once compared (see share).
const canShare = true

func adviseRandom(f *os.File) {
	withFd(f, func(fd int) { _ = unix.Fadvise(fd, 0, 0, unix.FADV_RANDOM) })
}

func dropCache(f *os.File, off, n int64) {
	withFd(f, func(fd int) { _ = unix.Fadvise(fd, off, n, unix.FADV_DONTNEED) })
}

func withFd(f *os.File, fn func(fd int)) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { fn(int(fd)) })
}
