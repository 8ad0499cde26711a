//go:build linux || darwin

package expertcache

import "golang.org/x/sys/unix"

// allocAligned maps n bytes of anonymous memory: page-aligned, outside the
// Go heap (so the garbage collector neither scans it nor counts it towards
// its target), and given back to the OS by freeAligned.
func allocAligned(n int64) ([]byte, error) {
	return unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
}

func freeAligned(b []byte) {
	if b != nil {
		_ = unix.Munmap(b)
	}
}
