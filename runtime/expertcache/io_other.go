//go:build !linux && !darwin

package expertcache

import "os"

// openDirect: no direct I/O on this system.
func openDirect(string) *os.File { return nil }
