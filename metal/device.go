package metal

import (
	"errors"
	"unsafe"
)

// ErrUnsupported is returned by New where there is no Metal device.
var ErrUnsupported = errors.New("the metal backend needs macOS with an Apple GPU; use --backend cpu")

// device is what a Backend needs from a GPU: host memory that the device
// reads and writes in place (Apple GPUs share memory with the CPU), and
// synchronous kernel launches. device_darwin.go implements it with Metal;
// the tests implement it with the C++ shim, so everything above this
// interface (argument placement, parameter blocks, grid sizes) is exercised
// on Linux too.
type device interface {
	deviceName() string
	// alloc returns a region of at least n bytes of zeroed host memory that
	// the device uses in place.
	alloc(n int) (*region, error)
	free(r *region)
	// run executes the launches in order and waits until they are done.
	run(ls []*launch) error
	close() error
}

// region is a block of host memory the device can address: on darwin
// page-aligned anonymous memory wrapped by newBufferWithBytesNoCopy (shared
// storage), in the shim a Go slice.
type region struct {
	mem    []byte
	handle uintptr // the device's object for it (an MTLBuffer), if any
}

func (r *region) addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(r.mem))) }

// launch is one kernel dispatch: grid threadgroups of group threads, buffer i
// bound at offset 0 at index i, the parameter block at index len(bufs).
type launch struct {
	kernel string
	sig    *kernelSig
	grid   [3]uint32
	group  [3]uint32
	bufs   []*region
	params []byte
}
