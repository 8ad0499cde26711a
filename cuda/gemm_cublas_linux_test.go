//go:build linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuBLAS constants (cublas_api.h, library_types.h).
const (
	cublasOpN         = 0
	cublasOpT         = 1
	cudaR32F          = 0
	cudaR16BF         = 14
	cublasCompute32F  = 68
	cublasGemmDefault = ^uintptr(0) // CUBLAS_GEMM_DEFAULT = -1
)

// cublasRate measures cuBLAS's bf16 GEMM (float32 output and compute) on
// the benchmark's square problem, Y = X·Wᵀ on the same device buffers as
// the baseline kernel, where a libcublas is found (never required: 0 and
// the reason otherwise). Column-major, as cuBLAS sees the row-major
// buffers: C[sq×sq] = op(A)·B with A = W (transposed), B = X.
func cublasRate(tb testing.TB, b *Backend, wp, xp, yp devptr, sq int) (float64, string) {
	g, ok := b.dev.(*gpu)
	if !ok {
		return 0, "not a driver device"
	}
	cands := []string{"libcublas.so.13", "libcublas.so.12"}
	for _, d := range append(nvrtcDirs(os.Getenv), "/usr/local/lib/python3*/dist-packages/nvidia/cublas/lib") {
		m, _ := filepath.Glob(filepath.Join(d, "libcublas.so.*"))
		cands = append(cands, m...)
	}
	lib, err := openLibrary("cuBLAS", cands, []string{"cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2", "cublasGemmEx"})
	if err != nil {
		return 0, err.Error()
	}
	call := func(name string, args ...uintptr) error {
		if r, _, _ := purego.SyscallN(lib.fn[name], args...); uint32(r) != 0 {
			return fmt.Errorf("%s: cublasStatus_t %d", name, uint32(r))
		}
		return nil
	}
	var pin goruntime.Pinner
	defer pin.Unpin()
	h := new(uintptr)
	alpha, beta := new(float32), new(float32)
	*alpha = 1
	pin.Pin(h)
	pin.Pin(alpha)
	pin.Pin(beta)
	if err := g.do(func() error { return call("cublasCreate_v2", uintptr(unsafe.Pointer(h))) }); err != nil {
		return 0, err.Error()
	}
	defer g.do(func() error { return call("cublasDestroy_v2", *h) })
	if err := g.do(func() error { return call("cublasSetStream_v2", *h, g.stream) }); err != nil {
		return 0, err.Error()
	}
	s := uintptr(sq)
	gemm := func() error {
		return g.do(func() error {
			return call("cublasGemmEx", *h, cublasOpT, cublasOpN, s, s, s, uintptr(unsafe.Pointer(alpha)),
				uintptr(wp), cudaR16BF, s, uintptr(xp), cudaR16BF, s, uintptr(unsafe.Pointer(beta)),
				uintptr(yp), cudaR32F, s, cublasCompute32F, cublasGemmDefault)
		})
	}
	if err := gemm(); err != nil {
		return 0, err.Error()
	}
	ms := msPer(tb, b, 5, gemm)
	return 2 * float64(sq) * float64(sq) * float64(sq) / (ms / 1e3) / 1e12, lib.path
}

// CUfunction_attribute values.
const (
	funcAttrSharedBytes = 1
	funcAttrLocalBytes  = 3
	funcAttrNumRegs     = 4
)

// kernelResources describes what the compiled kernel takes per thread and
// group (registers, local memory: spills show there, static shared
// memory), from cuFuncGetAttribute.
func kernelResources(b *Backend, kernel string) string {
	g, ok := b.dev.(*gpu)
	if !ok {
		return "not a driver device"
	}
	fn, err := purego.Dlsym(g.drv.h, "cuFuncGetAttribute")
	if err != nil || fn == 0 {
		return "no cuFuncGetAttribute"
	}
	v := new(int32)
	var pin goruntime.Pinner
	pin.Pin(v)
	defer pin.Unpin()
	var out [3]int32
	for i, a := range []uintptr{funcAttrNumRegs, funcAttrLocalBytes, funcAttrSharedBytes} {
		*v = 0
		if r, _, _ := purego.SyscallN(fn, uintptr(unsafe.Pointer(v)), a, b.fn[kernel]); uint32(r) != 0 {
			return fmt.Sprintf("cuFuncGetAttribute(%d): CUresult %d", a, uint32(r))
		}
		out[i] = *v
	}
	return fmt.Sprintf("%d registers, %d bytes local, %d bytes shared", out[0], out[1], out[2])
}
