//go:build !darwin

package metal

import "fmt"

// openSystemDevice: Metal exists only on Apple systems.
func openSystemDevice(string, *library) (device, error) {
	return nil, fmt.Errorf("metal: %w", ErrUnsupported)
}
