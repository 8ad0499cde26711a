//go:build unix

package verify

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the first size bytes of f read-only.
func mapFile(f *os.File, size int) ([]byte, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var m []byte
	cerr := rc.Control(func(fd uintptr) {
		m, err = unix.Mmap(int(fd), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	})
	if cerr != nil {
		return nil, cerr
	}
	return m, err
}

func unmapFile(m []byte) { _ = unix.Munmap(m) }
