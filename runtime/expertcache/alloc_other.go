//go:build !linux && !darwin

package expertcache

import "unsafe"

// allocAligned returns n bytes starting at an Align boundary.
func allocAligned(n int64) ([]byte, error) {
	b := make([]byte, n+Align)
	off := int64(uintptr(unsafe.Pointer(&b[0])) & (Align - 1))
	if off != 0 {
		off = Align - off
	}
	return b[off : off+n : off+n], nil
}

func freeAligned([]byte) {}
