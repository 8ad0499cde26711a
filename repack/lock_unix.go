//go:build unix

package repack

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockOutput takes an exclusive, non-blocking flock on "<output>.lock", so
// two repacks never write the same partial container. The kernel drops the
// lock when the process dies, however it dies.
func lockOutput(output string) (unlock func(), err error) {
	p := output + ".lock"
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another qpack process is writing %s (it holds %s); wait for it to finish", output, p)
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return func() {
		// Remove the file while still holding the lock, then release it.
		os.Remove(p)
		f.Close()
	}, nil
}

// freeSpace returns the bytes available to an unprivileged user on the
// file system holding dir.
var freeSpace = func(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
