//go:build darwin

package verify

import (
	"os"

	"golang.org/x/sys/unix"
)

// On darwin F_NOCACHE turns off caching for reads through this descriptor
// (the unified buffer cache keeps no pages for them); there is no per-range
// drop as on Linux, so dropCache does nothing.

func adviseSequential(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_NOCACHE, 1) })
}

func adviseRandom(f *os.File) { adviseSequential(f) }

func adviseReadAhead(*os.File) {}

// canShare: pages cannot be dropped by range here, so the container files
// a shared pass left in the cache would all stay there; the digest pass
// and the deep check run in turn (unless Options.KeepCache).
const canShare = false

func dropCache(*os.File, int64, int64) {}
