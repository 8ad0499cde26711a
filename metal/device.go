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
	// submit starts the launches, in order, after everything submitted
	// before (one command buffer), and returns a function that waits until
	// they are done and reports their error. Every returned wait must be
	// called once, in submission order. The shim runs them at once.
	submit(ls []*launch) (wait func() error, err error)
	// addressable reports whether regions have GPU addresses (region.gpu),
	// which the kernels of the shared dialect need.
	addressable() bool
	// unusable names the kernels the device cannot run as the host
	// launches them (fewer than QP_TG threads per threadgroup for that
	// pipeline); the layer device computes their ops on the CPU.
	unusable() map[string]bool
	close() error
}

// run executes the launches in order and waits until they are done.
func run(d device, ls []*launch) error {
	wait, err := d.submit(ls)
	if err != nil {
		return err
	}
	return wait()
}

// region is a block of host memory the device can address: on darwin
// page-aligned anonymous memory wrapped by newBufferWithBytesNoCopy (shared
// storage), in the shim a Go slice.
type region struct {
	mem    []byte
	handle uintptr // the device's object for it (an MTLBuffer), if any
	// gpu is the address the device's kernels use for mem[0] (the
	// MTLBuffer's gpuAddress; in the shim, mem's host address).
	gpu uint64
}

func (r *region) addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(r.mem))) }

// launch is one kernel dispatch: grid threadgroups of group threads, buffer i
// bound at offset 0 at index i, the parameter block at index len(bufs). A
// kernel of the shared dialect (sig.Entry) binds no buffer: its parameter
// block (at index 0) holds GPU addresses into the regions of uses, which
// are made resident for the dispatch (useResource:usage:).
type launch struct {
	kernel string
	sig    *kernelSig
	layout *structLayout // the parameter block's layout
	grid   [3]uint32
	group  [3]uint32
	bufs   []*region
	uses   []use
	params []byte
}

// use is a region a launch reaches through a GPU address.
type use struct {
	r     *region
	write bool
}
