//go:build !unix

package hfhub

import (
	"context"
	"os"
	"path/filepath"
)

// fileLock on systems without flock: the lock file is created but the lock
// is not exclusive (the official client is best-effort there too).
type fileLock struct{ f *os.File }

func acquireLock(ctx context.Context, path string, waiting func()) (*fileLock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o664)
	if err != nil {
		return nil, err
	}
	return &fileLock{f}, nil
}

func (l *fileLock) Unlock() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// tryLock cannot tell a held lock here: it never takes one, so nothing
// that might be in use is removed.
func tryLock(string) (*fileLock, bool) { return nil, false }
