//go:build !darwin

package metal

// openSystemDevice: Metal exists only on Apple systems.
func openSystemDevice(string, *library) (device, error) {
	return nil, ErrUnsupported
}
