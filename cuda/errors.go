package cuda

import (
	"errors"
	"fmt"
)

// ErrNoDevice is wrapped by every error that means "no usable NVIDIA GPU
// here": no driver library, no device, or an OS/architecture this package
// does not support. The CLI maps it to exit status 2.
var ErrNoDevice = errors.New("the cuda backend needs Linux with an NVIDIA GPU and its driver; use --backend cpu")

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
// whichever call noticed.
func (e *Error) Is(target error) bool {
	return target == ErrNoDevice && (e.Code == cudaErrorNoDevice || e.Code == cudaErrorNotInitialized && e.Call == "cuInit" ||
		e.Code == cudaErrorInsufficientDriver || e.Code == cudaErrorInvalidDevice && e.Call == "cuDeviceGet")
}

// CUresult values this package tells apart.
const (
	cudaSuccess                 = 0
	cudaErrorNotInitialized     = 3
	cudaErrorInsufficientDriver = 35
	cudaErrorNoDevice           = 100
	cudaErrorInvalidDevice      = 101
)
