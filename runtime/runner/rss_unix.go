//go:build linux || darwin

package runner

import (
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// PeakRSS returns the process's peak resident set size in bytes
// (getrusage ru_maxrss: KiB on Linux, bytes on darwin), 0 if unknown.
func PeakRSS() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	if goruntime.GOOS == "darwin" {
		return ru.Maxrss
	}
	return ru.Maxrss << 10
}
