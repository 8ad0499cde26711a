package expertcache

import (
	"os"

	"golang.org/x/sys/unix"
)

// openDirect opens path with O_DIRECT, or returns nil where the file
// system refuses it (tmpfs gives EINVAL).
func openDirect(path string) *os.File {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	return f
}
