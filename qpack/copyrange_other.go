//go:build !linux

package qpack

import "os"

// copyRange copies n bytes of src from byte srcOff to dst at byte dstOff
// (reads and writes; Linux copies inside the kernel).
func copyRange(dst *os.File, dstOff int64, src *os.File, srcOff, n int64) error {
	return copyRangeRW(dst, dstOff, src, srcOff, n)
}
