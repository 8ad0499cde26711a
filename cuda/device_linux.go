//go:build linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Driver API functions used, by their exported (versioned) symbol names.
var driverSyms = []string{
	"cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuDeviceGetCount", "cuDeviceGet",
	"cuDeviceGetName", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
	"cuCtxSetCurrent", "cuStreamCreate", "cuStreamDestroy_v2", "cuStreamSynchronize",
	"cuMemAlloc_v2", "cuMemFree_v2", "cuMemHostAlloc", "cuMemFreeHost", "cuMemHostGetDevicePointer_v2",
	"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2",
	"cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction", "cuLaunchKernel",
	"cuEventCreate", "cuEventRecord", "cuEventSynchronize", "cuEventElapsedTime", "cuEventDestroy_v2",
	"cuMemsetD32Async", "cuStreamWaitEvent", "cuMemGetInfo_v2", "cuStreamQuery", "cuEventQuery",
}

var nvrtcSyms = []string{
	"nvrtcVersion", "nvrtcGetErrorString", "nvrtcCreateProgram", "nvrtcDestroyProgram", "nvrtcCompileProgram",
	"nvrtcGetProgramLogSize", "nvrtcGetProgramLog", "nvrtcGetCUBINSize", "nvrtcGetCUBIN",
}

// CUdevice_attribute values.
const (
	attrMultiprocessors = 16
	attrCanMapHost      = 19
	attrUnifiedAddress  = 41
	attrCCMajor         = 75
	attrCCMinor         = 76
)

const (
	memHostAllocPortable  = 1
	memHostAllocDeviceMap = 2
	streamNonBlocking     = 1
	eventDisableTiming    = 2
	nvrtcInvalidOption    = 5
)

// library is a dlopen'ed shared object and the symbols looked up in it.
type library struct {
	path string
	h    uintptr
	fn   map[string]uintptr
}

// openLibrary dlopens the first candidate that loads and has every symbol.
func openLibrary(what string, candidates, syms []string) (*library, error) {
	var errs []error
	for _, c := range candidates {
		h, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l := &library{path: c, h: h, fn: make(map[string]uintptr, len(syms))}
		for _, s := range syms {
			p, err := purego.Dlsym(h, s)
			if err != nil || p == 0 {
				errs = append(errs, fmt.Errorf("%s: no symbol %s", c, s))
				l = nil
				break
			}
			l.fn[s] = p
		}
		if l != nil {
			return l, nil
		}
		purego.Dlclose(h)
	}
	return nil, fmt.Errorf("cuda: cannot load %s (tried %d names; first: %v): %w", what, len(candidates), errors.Join(errs[:min(len(errs), 1)]...), ErrNoDevice)
}

// cstring reads a NUL-terminated C string of at most max bytes.
func cstring(p uintptr, max int) string {
	if p == 0 {
		return ""
	}
	b := unsafe.Slice((*byte)(cptr(p)), max)
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// gpu is one CUDA device with its primary context, one non-blocking stream
// and the loaded kernel module.
type gpu struct {
	drv, rtc *library
	dev      int32
	ctx      uintptr
	stream   uintptr
	copier   uintptr // the copy stream
	module   uintptr
	label    string
	major    int
	minor    int
	// out holds the driver's out-parameters: heap memory that cannot move
	// while a call writes it (a Go stack can; calls are serialized).
	out [5]uint64
	// graphState: 0 not looked up, 1 the graph symbols are there, -1 not;
	// captureInfo is the cuStreamGetCaptureInfo version found.
	graphState  int
	captureInfo string
	// pdl: launches may be programmatic dependents of the kernel before
	// (pdl.go); afterKernel: the compute stream's last operation was a
	// kernel launch (cleared by every other call through do).
	pdl         bool
	afterKernel bool
	prevGroups  int  // groups of the last kernel launched
	capturing   bool // between beginCapture and endCapture
	// spin: how long a wait polls before it blocks (wait.go).
	spin time.Duration
	// busy: whether each stream (computeStream, copyStream) may have work
	// queued since its last wait that returned nil; a wait for streams
	// that are not busy returns at once, without a driver call (a decode
	// step's EndPass follows the selection's wait with nothing queued).
	busy [2]bool
}

// queueOn notes work queued on stream s (busy); every call that queues an
// operation on a stream makes it first.
func (g *gpu) queueOn(s stream) { g.busy[s] = true }

// outp is the address of out-parameter slot i.
func (g *gpu) outp(i int) uintptr { return uintptr(unsafe.Pointer(&g.out[i])) }

// cptr turns an address of C memory into a pointer.
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

func openDevice(ordinal int) (device, error) {
	drv, err := openLibrary("the CUDA driver (libcuda.so.1)", driverCandidates(os.Getenv), driverSyms)
	if err != nil {
		return nil, err
	}
	g := &gpu{drv: drv}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	if err := g.call("cuInit", 0); err != nil {
		if errors.Is(err, ErrNoDevice) { // say what to do, keep the *Error
			return nil, fmt.Errorf("%w: %w", err, ErrNoDevice)
		}
		return nil, err
	}
	if err := g.call("cuDeviceGetCount", g.outp(0)); err != nil {
		return nil, err
	}
	count := int32(g.out[0])
	if ordinal < 0 || int(count) <= ordinal {
		return nil, fmt.Errorf("cuda: device %d asked for, the driver sees %d: %w", ordinal, count, ErrNoDevice)
	}
	g.out[0] = 0
	if err := g.call("cuDeviceGet", g.outp(0), uintptr(ordinal)); err != nil {
		return nil, err
	}
	g.dev = int32(g.out[0])
	var pin goruntime.Pinner
	defer pin.Unpin()
	nameBuf := make([]byte, 256)
	pin.Pin(&nameBuf[0])
	if err := g.call("cuDeviceGetName", uintptr(unsafe.Pointer(&nameBuf[0])), uintptr(len(nameBuf)-1), uintptr(g.dev)); err != nil {
		return nil, err
	}
	attr := func(a int) (int, error) {
		g.out[0] = 0
		err := g.call("cuDeviceGetAttribute", g.outp(0), uintptr(a), uintptr(g.dev))
		return int(int32(g.out[0])), err
	}
	if g.major, err = attr(attrCCMajor); err != nil {
		return nil, err
	}
	if g.minor, err = attr(attrCCMinor); err != nil {
		return nil, err
	}
	for _, a := range []int{attrCanMapHost, attrUnifiedAddress} {
		v, err := attr(a)
		if err != nil {
			return nil, err
		}
		if v == 0 {
			return nil, fmt.Errorf("cuda: device %d lacks unified addressing or mapped host memory (attribute %d): %w", ordinal, a, ErrNoDevice)
		}
	}
	sms, err := attr(attrMultiprocessors)
	if err != nil {
		return nil, err
	}
	g.label = fmt.Sprintf("%s (sm_%d%d, %d SMs)", cstring(uintptr(unsafe.Pointer(&nameBuf[0])), len(nameBuf)), g.major, g.minor, sms)
	if err := g.call("cuDevicePrimaryCtxRetain", g.outp(0), uintptr(g.dev)); err != nil {
		return nil, err
	}
	g.ctx = uintptr(g.out[0])
	if err := g.call("cuCtxSetCurrent", g.ctx); err != nil {
		g.release()
		return nil, err
	}
	if err := g.call("cuStreamCreate", g.outp(0), streamNonBlocking); err != nil {
		g.release()
		return nil, err
	}
	g.stream = uintptr(g.out[0])
	if err := g.call("cuStreamCreate", g.outp(0), streamNonBlocking); err != nil {
		g.call("cuStreamDestroy_v2", g.stream)
		g.release()
		return nil, err
	}
	g.copier = uintptr(g.out[0])
	p, err := purego.Dlsym(g.drv.h, "cuLaunchKernelEx")
	if err == nil && p != 0 {
		g.drv.fn["cuLaunchKernelEx"] = p
	}
	g.pdl = pdlWanted(g.major, g.drv.fn["cuLaunchKernelEx"] != 0, os.Getenv)
	g.spin = spinFor(os.Getenv(spinEnv), goruntime.GOMAXPROCS(0))
	return g, nil
}

// query invokes a driver query of one argument (cuStreamQuery,
// cuEventQuery): done, still running (CUDA_ERROR_NOT_READY), or *Error.
// A poll's call: no error value is made for a running one.
func (g *gpu) query(name string, arg uintptr) (bool, error) {
	r, _, _ := purego.SyscallN(g.drv.fn[name], arg)
	switch uint32(r) {
	case cudaSuccess:
		return true, nil
	case cudaErrorNotReady:
		return false, nil
	}
	return false, g.errorOf(name, uint32(r))
}

// call invokes a driver function and turns a failing CUresult into *Error.
func (g *gpu) call(name string, args ...uintptr) error {
	r, _, _ := purego.SyscallN(g.drv.fn[name], args...)
	if code := uint32(r); code != cudaSuccess {
		return g.errorOf(name, code)
	}
	return nil
}

// errorOf is the *Error of a failing CUresult.
func (g *gpu) errorOf(name string, code uint32) error {
	msg := "unknown CUresult"
	g.out[3] = 0
	if rr, _, _ := purego.SyscallN(g.drv.fn["cuGetErrorName"], uintptr(code), g.outp(3)); uint32(rr) == 0 {
		msg = cstring(uintptr(g.out[3]), 128)
	}
	return &Error{Call: name, Code: int(code), Name: msg}
}

// enter makes the context current on this goroutine's OS thread (contexts
// are per thread; goroutines move between threads) until the returned
// function runs.
func (g *gpu) enter() (func(), error) {
	goruntime.LockOSThread()
	if err := g.call("cuCtxSetCurrent", g.ctx); err != nil {
		goruntime.UnlockOSThread()
		return nil, err
	}
	return goruntime.UnlockOSThread, nil
}

func (g *gpu) do(fn func() error) error {
	leave, err := g.enter()
	if err != nil {
		return err
	}
	defer leave()
	g.afterKernel = false
	return fn()
}

func (g *gpu) name() string                  { return g.label }
func (g *gpu) computeCapability() (int, int) { return g.major, g.minor }

func (g *gpu) compile(src, name string) (string, string, error) {
	if g.rtc == nil {
		rtc, err := openLibrary("NVRTC (libnvrtc.so.*, part of the CUDA toolkit; set QPACK_NVRTC to its path)",
			nvrtcCandidates(os.Getenv, filepath.Glob), nvrtcSyms)
		if err != nil {
			return "", "", err
		}
		g.rtc = rtc
	}
	g.out[0], g.out[1] = 0, 0
	if err := g.rtcCall("nvrtcVersion", g.outp(0), g.outp(1)); err != nil {
		return "", "", err
	}
	version := fmt.Sprintf("NVRTC %d.%d (%s)", int32(g.out[0]), int32(g.out[1]), g.rtc.path)
	var pin goruntime.Pinner
	defer pin.Unpin()
	cs := func(s string) uintptr {
		b := append([]byte(s), 0)
		pin.Pin(&b[0])
		return uintptr(unsafe.Pointer(&b[0]))
	}
	if err := g.rtcCall("nvrtcCreateProgram", g.outp(2), cs(src), cs(name), 0, 0, 0); err != nil {
		return version, "", err
	}
	prog := uintptr(g.out[2])
	defer func() {
		g.out[2] = uint64(prog)
		purego.SyscallN(g.rtc.fn["nvrtcDestroyProgram"], g.outp(2))
	}()
	arch := fmt.Sprintf("--gpu-architecture=sm_%d%d", g.major, g.minor)
	opts := []uintptr{cs(arch), cs("--std=c++17"), cs("-lineinfo"), cs("--fmad=true")}
	pin.Pin(&opts[0])
	cerr := g.rtcCall("nvrtcCompileProgram", prog, uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])))
	log := ""
	g.out[0] = 0
	if err := g.rtcCall("nvrtcGetProgramLogSize", prog, g.outp(0)); err == nil && g.out[0] > 1 && g.out[0] < 1<<24 {
		logSize := int(g.out[0])
		lb := make([]byte, logSize)
		pin.Pin(&lb[0])
		if g.rtcCall("nvrtcGetProgramLog", prog, uintptr(unsafe.Pointer(&lb[0]))) == nil {
			log = string(lb[:logSize-1])
		}
	}
	if cerr != nil {
		var e *Error
		if errors.As(cerr, &e) {
			e.Log = log
			if e.Code == nvrtcInvalidOption {
				e.Log = fmt.Sprintf("%s does not know %s (a GPU newer than the toolkit?)\n%s", version, arch, log)
			}
		}
		return version, log, cerr
	}
	g.out[0] = 0
	if err := g.rtcCall("nvrtcGetCUBINSize", prog, g.outp(0)); err != nil {
		return version, log, err
	}
	size := g.out[0]
	if size == 0 || size > 1<<30 {
		return version, log, fmt.Errorf("cuda: nvrtcGetCUBINSize gave %d bytes", size)
	}
	img := make([]byte, size)
	pin.Pin(&img[0])
	if err := g.rtcCall("nvrtcGetCUBIN", prog, uintptr(unsafe.Pointer(&img[0]))); err != nil {
		return version, log, err
	}
	err := g.do(func() error {
		if g.module != 0 {
			return fmt.Errorf("cuda: a module is already loaded")
		}
		if err := g.call("cuModuleLoadData", g.outp(0), uintptr(unsafe.Pointer(&img[0]))); err != nil {
			return err
		}
		g.module = uintptr(g.out[0])
		return nil
	})
	return version, log, err
}

func (g *gpu) rtcCall(name string, args ...uintptr) error {
	r, _, _ := purego.SyscallN(g.rtc.fn[name], args...)
	if code := uint32(r); code != 0 {
		s, _, _ := purego.SyscallN(g.rtc.fn["nvrtcGetErrorString"], uintptr(code))
		return &Error{Call: name, Code: int(code), Name: cstring(s, 128)}
	}
	return nil
}

func (g *gpu) function(name string) (uintptr, error) {
	var f uintptr
	var pin goruntime.Pinner
	defer pin.Unpin()
	b := append([]byte(name), 0)
	pin.Pin(&b[0])
	err := g.do(func() error {
		if err := g.call("cuModuleGetFunction", g.outp(0), g.module, uintptr(unsafe.Pointer(&b[0]))); err != nil {
			return fmt.Errorf("kernel %s: %w", name, err)
		}
		f = uintptr(g.out[0])
		return nil
	})
	return f, err
}

func (g *gpu) memAlloc(n int) (devptr, error) {
	var p devptr
	err := g.do(func() error {
		if err := g.call("cuMemAlloc_v2", g.outp(0), uintptr(n)); err != nil {
			return fmt.Errorf("%d bytes: %w", n, err)
		}
		p = g.out[0]
		return nil
	})
	return p, err
}

func (g *gpu) memFree(p devptr) error {
	return g.do(func() error { return g.call("cuMemFree_v2", uintptr(p)) })
}

func (g *gpu) hostAlloc(n int) ([]byte, devptr, error) {
	var h uintptr
	var d devptr
	err := g.do(func() error {
		if err := g.call("cuMemHostAlloc", g.outp(0), uintptr(n), memHostAllocPortable|memHostAllocDeviceMap); err != nil {
			return fmt.Errorf("%d bytes: %w", n, err)
		}
		h = uintptr(g.out[0])
		if err := g.call("cuMemHostGetDevicePointer_v2", g.outp(0), h, 0); err != nil {
			g.call("cuMemFreeHost", h)
			return err
		}
		d = g.out[0]
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	b := unsafe.Slice((*byte)(cptr(h)), n)
	clear(b)
	return b, d, nil
}

func (g *gpu) hostFree(b []byte) error {
	return g.do(func() error { return g.call("cuMemFreeHost", uintptr(unsafe.Pointer(unsafe.SliceData(b)))) })
}

func (g *gpu) htod(dst devptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	g.queueOn(computeStream)
	return g.do(func() error {
		return g.call("cuMemcpyHtoDAsync_v2", uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), g.stream)
	})
}

func (g *gpu) dtod(dst, src devptr, n int) error {
	g.queueOn(computeStream)
	return g.do(func() error { return g.call("cuMemcpyDtoDAsync_v2", uintptr(dst), uintptr(src), uintptr(n), g.stream) })
}

func (g *gpu) dtoh(dst []byte, src devptr) error {
	if len(dst) == 0 {
		return nil
	}
	g.queueOn(computeStream)
	return g.do(func() error {
		return g.call("cuMemcpyDtoHAsync_v2", uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)), g.stream)
	})
}

// kernelArgs copies a launch's parameter block and returns the
// kernelParams array the driver reads (one pointer, to the copy), both
// pinned by pin until the caller unpins it after the call.
func kernelArgs(pin *goruntime.Pinner, params []byte) uintptr {
	p := make([]byte, len(params))
	copy(p, params)
	pin.Pin(&p[0])
	args := []uintptr{uintptr(unsafe.Pointer(&p[0]))}
	pin.Pin(&args[0])
	return uintptr(unsafe.Pointer(&args[0]))
}

// setDependentLaunch implements pdlSwitch.
func (g *gpu) setDependentLaunch(on bool) bool {
	was := g.pdl
	g.pdl = on && pdlWanted(g.major, g.drv.fn["cuLaunchKernelEx"] != 0, func(string) string { return "" })
	return was
}

// launch queues kernel f on the compute stream: a programmatic dependent
// of the kernel before it (pdl.go) when the stream's last operation was a
// kernel launch.
func (g *gpu) launch(f uintptr, grid, block [3]uint32, params []byte) error {
	var pin goruntime.Pinner
	defer pin.Unpin()
	args := kernelArgs(&pin, params)
	groups := int(grid[0]) * int(grid[1]) * int(grid[2])
	dependent := g.pdl && g.capturing && g.afterKernel && groups <= pdlMaxGroups && g.prevGroups <= pdlMaxGroups
	g.queueOn(computeStream)
	err := g.do(func() error {
		if dependent {
			attr := &launchAttr{id: launchAttrProgrammaticSerialization}
			attr.value[0] = 1
			pin.Pin(attr)
			cfg := &launchConfig{grid: grid, block: block, stream: g.stream,
				attrs: uintptr(unsafe.Pointer(attr)), numAttrs: 1}
			pin.Pin(cfg)
			return g.call("cuLaunchKernelEx", uintptr(unsafe.Pointer(cfg)), f, args, 0)
		}
		return g.call("cuLaunchKernel", f, uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
			uintptr(block[0]), uintptr(block[1]), uintptr(block[2]), 0, g.stream, args, 0)
	})
	g.afterKernel, g.prevGroups = err == nil, groups
	return err
}

func (g *gpu) sync() error { return g.waitStreams(false) }

func (g *gpu) syncAll() error { return g.waitStreams(true) }

// waitStreams waits until the compute stream (and, with both, the copy
// stream) has run everything queued on it. A stream that is not busy is
// not asked; when neither is, the wait returns at once.
func (g *gpu) waitStreams(both bool) error {
	var streams [2]uintptr
	n := 0
	for s, id := range [2]uintptr{g.stream, g.copier} {
		if g.busy[s] && (s == int(computeStream) || both) {
			streams[n] = id
			n++
		}
	}
	if n == 0 {
		return nil
	}
	err := g.pollThenWait("cuStreamSynchronize", func() (bool, error) {
		for _, s := range streams[:n] {
			if ok, err := g.query("cuStreamQuery", s); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	}, func() error {
		var errs [2]error
		for i, s := range streams[:n] {
			errs[i] = g.call("cuStreamSynchronize", s)
		}
		return errors.Join(errs[:n]...)
	})
	if err == nil {
		g.busy[computeStream] = false
		if both {
			g.busy[copyStream] = false
		}
	}
	return err
}

// pollThenWait is every wait for the device (wait.go): ready, a query, is
// polled for up to g.spin, then block (the driver's blocking wait, what
// names it) runs under bounded; both inside the context.
func (g *gpu) pollThenWait(what string, ready func() (bool, error), block func() error) error {
	if g.spin > 0 {
		var done bool
		err := g.do(func() error {
			var err error
			done, err = spinUntil(g.spin, ready)
			return err
		})
		if err != nil || done {
			return err
		}
	}
	return bounded(what, syncTimeout, func() error { return g.do(block) })
}

func (g *gpu) streamOf(s stream) uintptr {
	if s == copyStream {
		return g.copier
	}
	return g.stream
}

func (g *gpu) htodOn(s stream, dst devptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	g.queueOn(s)
	return g.do(func() error {
		return g.call("cuMemcpyHtoDAsync_v2", uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), g.streamOf(s))
	})
}

func (g *gpu) memset(dst devptr, n int) error {
	if n == 0 {
		return nil
	}
	if n%4 != 0 {
		return fmt.Errorf("cuda: memset of %d bytes (not a multiple of 4)", n)
	}
	g.queueOn(computeStream)
	return g.do(func() error { return g.call("cuMemsetD32Async", uintptr(dst), 0, uintptr(n/4), g.stream) })
}

func (g *gpu) newEvent() (event, error) {
	var e event
	err := g.do(func() error {
		if err := g.call("cuEventCreate", g.outp(0), eventDisableTiming); err != nil {
			return err
		}
		e = event(g.out[0])
		return nil
	})
	return e, err
}

func (g *gpu) record(e event, s stream) error {
	g.queueOn(s)
	return g.do(func() error { return g.call("cuEventRecord", e, g.streamOf(s)) })
}

func (g *gpu) waitEvent(s stream, e event) error {
	g.queueOn(s)
	return g.do(func() error { return g.call("cuStreamWaitEvent", g.streamOf(s), e, 0) })
}

func (g *gpu) eventSync(e event) error {
	return g.pollThenWait("cuEventSynchronize", func() (bool, error) { return g.query("cuEventQuery", e) },
		func() error { return g.call("cuEventSynchronize", e) })
}

func (g *gpu) freeEvent(e event) error {
	return g.do(func() error { return g.call("cuEventDestroy_v2", e) })
}

func (g *gpu) memInfo() (int64, int64, error) {
	var free, total int64
	err := g.do(func() error {
		if err := g.call("cuMemGetInfo_v2", g.outp(0), g.outp(1)); err != nil {
			return err
		}
		free, total = int64(g.out[0]), int64(g.out[1])
		return nil
	})
	return free, total, err
}

func (g *gpu) timed(fn func() error) (float32, error) {
	var ms float32
	g.queueOn(computeStream)
	err := g.do(func() error {
		var ev [2]uintptr
		for i := range ev {
			if err := g.call("cuEventCreate", g.outp(0), 0); err != nil {
				return err
			}
			ev[i] = uintptr(g.out[0])
			defer g.call("cuEventDestroy_v2", ev[i])
		}
		if err := g.call("cuEventRecord", ev[0], g.stream); err != nil {
			return err
		}
		if err := fn(); err != nil {
			return err
		}
		if err := g.call("cuEventRecord", ev[1], g.stream); err != nil {
			return err
		}
		if err := g.call("cuEventSynchronize", ev[1]); err != nil {
			return err
		}
		g.out[1] = 0
		if err := g.call("cuEventElapsedTime", g.outp(1), ev[0], ev[1]); err != nil {
			return err
		}
		ms = math.Float32frombits(uint32(g.out[1]))
		return nil
	})
	return ms, err
}

func (g *gpu) release() {
	g.call("cuDevicePrimaryCtxRelease_v2", uintptr(g.dev))
}

func (g *gpu) close() error {
	return g.do(func() error {
		var errs []error
		if g.module != 0 {
			errs = append(errs, g.call("cuModuleUnload", g.module))
			g.module = 0
		}
		if g.stream != 0 {
			errs = append(errs, g.call("cuStreamDestroy_v2", g.stream))
			g.stream = 0
		}
		if g.copier != 0 {
			errs = append(errs, g.call("cuStreamDestroy_v2", g.copier))
			g.copier = 0
		}
		errs = append(errs, g.call("cuDevicePrimaryCtxRelease_v2", uintptr(g.dev)))
		return errors.Join(errs...)
	})
}

// newTimingEvent and elapsed implement kernelTimer (profile.go).
func (g *gpu) newTimingEvent() (event, error) {
	e, err := g.callOut("cuEventCreate", g.outp(0), 0)
	return event(e), err
}

func (g *gpu) elapsed(from, to event) (float32, error) {
	var ms float32
	err := g.do(func() error {
		g.out[1] = 0
		if err := g.call("cuEventElapsedTime", g.outp(1), from, to); err != nil {
			return err
		}
		ms = math.Float32frombits(uint32(g.out[1]))
		return nil
	})
	return ms, err
}
