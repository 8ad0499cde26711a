package hfhub

import (
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves size bytes for f so a full disk fails now, not at
// 90 %; file systems without fallocate just get the size set.
func preallocate(f *os.File, size int64) error {
	if size > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err == unix.ENOSPC {
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
		}
	}
	return f.Truncate(size)
}
