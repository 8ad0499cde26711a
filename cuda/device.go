package cuda

// devptr is a CUdeviceptr: an address in the GPU's (unified) address space.
type devptr = uint64

// event is a CUevent (made with timing disabled).
type event = uintptr

// stream picks one of the device's two streams.
type stream int

const (
	// computeStream runs the kernels; htod, dtoh, dtod, memset and launch
	// queue on it.
	computeStream stream = iota
	// copyStream carries the expert uploads that overlap compute.
	copyStream
)

// device is what a Backend needs from a GPU. device_linux.go implements it
// over the CUDA driver API; elsewhere openDevice returns ErrNoDevice. All
// methods are called with the Backend's lock held, from any goroutine: the
// implementation makes its context current on the calling OS thread.
type device interface {
	name() string
	// computeCapability is the device's (major, minor), e.g. (9, 0).
	computeCapability() (int, int)
	// compile compiles CUDA C++ source with NVRTC for this device and loads
	// the result; it returns NVRTC's version and the compile log.
	compile(src, name string) (version, log string, err error)
	// function looks up a kernel (extern "C") of the loaded module.
	function(name string) (uintptr, error)
	memAlloc(n int) (devptr, error)
	memFree(p devptr) error
	// hostAlloc returns n bytes of zeroed, page-locked host memory mapped
	// into the device's address space, and the device address of its first
	// byte.
	hostAlloc(n int) ([]byte, devptr, error)
	hostFree(b []byte) error
	// htod and dtoh queue copies on the device's stream between device
	// memory and memory from hostAlloc.
	htod(dst devptr, src []byte) error
	dtod(dst, src devptr, n int) error
	dtoh(dst []byte, src devptr) error
	// launch queues kernel f over grid blocks of block threads, with one
	// by-value parameter: the struct whose bytes are params, which it
	// must not keep past its return (Backend.launch reuses that buffer;
	// cuLaunchKernel copies the bytes, the recorder appends them to its
	// own).
	launch(f uintptr, grid, block [3]uint32, params []byte) error
	// htodOn queues a copy from memory from hostAlloc to device memory on
	// stream s.
	htodOn(s stream, dst devptr, src []byte) error
	// memset queues zeroing n bytes (a multiple of 4) at dst on the
	// compute stream.
	memset(dst devptr, n int) error
	// newEvent, record, waitEvent, eventSync and freeEvent are CUDA events:
	// record marks the point reached by the work queued on s so far,
	// waitEvent makes the work queued on s afterwards wait for that point
	// (on the device, the host does not wait), eventSync waits on the host.
	newEvent() (event, error)
	record(e event, s stream) error
	waitEvent(s stream, e event) error
	eventSync(e event) error
	freeEvent(e event) error
	// memInfo returns the device's free and total memory in bytes.
	memInfo() (free, total int64, err error)
	// sync waits until everything queued on the compute stream has
	// finished; syncAll waits for both streams.
	sync() error
	syncAll() error
	// timed runs fn (which queues work) between two events and returns the
	// GPU time between them in milliseconds.
	timed(fn func() error) (float32, error)
	close() error
}
