//go:build !linux

package qpack

import "os"

// mapSourceFor: files are read, not mapped, here.
func mapSourceFor(f *os.File, size int64) (blockSource, bool, error) { return nil, false, nil }
