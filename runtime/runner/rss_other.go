//go:build !linux && !darwin

package runner

// PeakRSS returns 0: unknown on this system.
func PeakRSS() int64 { return 0 }
