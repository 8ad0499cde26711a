package expertcache

import (
	"os"

	"golang.org/x/sys/unix"
)

// openDirect opens path with F_NOCACHE set (darwin has no O_DIRECT), or
// returns nil if that fails.
func openDirect(path string) *os.File {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_NOCACHE, 1); err != nil {
		f.Close()
		return nil
	}
	return f
}
