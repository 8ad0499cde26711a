//go:build unix

package hfhub

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// fileLock is an advisory flock(2) lock, compatible with the official
// client's filelock on the same path.
type fileLock struct{ f *os.File }

// acquireLock blocks (polling, so ctx can cancel it) until the lock is held.
// File systems without flock (some NFS setups) give a best-effort lock, as
// the official client does. waiting, if set, is called once when the lock
// is still held by someone else after lockWaitNotice (flock locks die with
// their process, so only a live download holds one).
func acquireLock(ctx context.Context, path string, waiting func()) (*fileLock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o664)
	if err != nil {
		return nil, err
	}
	wait := 10 * time.Millisecond
	start := time.Now()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &fileLock{f}, nil
		}
		if errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
			return &fileLock{f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, &os.PathError{Op: "flock", Path: path, Err: err}
		}
		if waiting != nil && time.Since(start) >= lockWaitNotice {
			waiting()
			waiting = nil
		}
		if err := sleepCtx(ctx, wait); err != nil {
			f.Close()
			return nil, err
		}
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

func (l *fileLock) Unlock() {
	if l != nil && l.f != nil {
		unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}

// tryLock takes the lock only if it is free now.
func tryLock(path string) (*fileLock, bool) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return &fileLock{f}, true
}

// lockWaitNotice is how long a lock wait goes unreported.
const lockWaitNotice = 2 * time.Second
