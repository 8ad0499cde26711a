package cuda

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoDevice is wrapped by every error that means "no usable NVIDIA GPU
// here": no driver library, no device, or an OS/architecture this package
// does not support. The CLI maps it to exit status 2.
var ErrNoDevice = errors.New("the cuda backend needs Linux with an NVIDIA GPU and its driver; use --backend cpu")

// ErrOutOfMemory is matched (errors.Is) by a driver call that found too
// little device memory, however deep in a layer op's error it is wrapped:
// the CLI then says what needs less (the expert cache, the prefill pass).
var ErrOutOfMemory = errors.New("the GPU is out of memory")

// Error is a failed call into the CUDA driver or NVRTC.
type Error struct {
	Call string // the API function, e.g. "cuMemAlloc_v2"
	Code int    // the CUresult or nvrtcResult
	Name string // the library's name for Code, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Log  string // NVRTC's compile log, if any
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s failed: %s (%d)", e.Call, e.Name, e.Code)
	if e.Log != "" {
		s += "\n" + e.Log
	}
	return s
}

// Is makes errors.Is(err, ErrNoDevice) true for the driver's "no device"
// and "no driver" results, so a machine without a GPU reads the same
// whichever call noticed, and errors.Is(err, ErrOutOfMemory) for the
// driver's out-of-memory result.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNoDevice:
		return e.Code == cudaErrorNoDevice || e.Code == cudaErrorNotInitialized && e.Call == "cuInit" ||
			e.Code == cudaErrorInsufficientDriver || e.Code == cudaErrorInvalidDevice && e.Call == "cuDeviceGet"
	case ErrOutOfMemory:
		return e.Code == cudaErrorOutOfMemory && !strings.HasPrefix(e.Call, "nvrtc")
	}
	return false
}

// CUresult values this package tells apart.
const (
	cudaSuccess                 = 0
	cudaErrorOutOfMemory        = 2
	cudaErrorNotInitialized     = 3
	cudaErrorInsufficientDriver = 35
	cudaErrorNoDevice           = 100
	cudaErrorInvalidDevice      = 101
	cudaErrorNotReady           = 600 // a query: the work is still running
)
