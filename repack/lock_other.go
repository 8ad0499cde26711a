//go:build !unix

package repack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// lockOutput creates "<output>.lock" exclusively; a stale one (left by a
// killed process) must be removed by hand.
func lockOutput(output string) (unlock func(), err error) {
	p := output + ".lock"
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s exists: another qpack process is writing %s, or one was killed (then remove the lock file)", p, output)
	}
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	return func() { f.Close(); os.Remove(p) }, nil
}

// freeSpace is not measured on this platform.
var freeSpace = func(dir string) (int64, error) { return -1, nil }
