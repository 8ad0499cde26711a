package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// clangCUDAShim stands in for the CUDA headers (NVRTC provides these names
// itself): the attribute macros, the math functions the prelude calls, and
// the intrinsics over clang's NVVM builtins.
const clangCUDAShim = `#include <__clang_cuda_builtin_vars.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
extern "C" {
__device__ float expf(float);
__device__ float log1pf(float);
__device__ float tanhf(float);
__device__ float sqrtf(float);
__device__ float rsqrtf(float);
__device__ float cosf(float);
__device__ float sinf(float);
__device__ float fmaxf(float, float);
}
__device__ inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
__device__ inline float __uint_as_float(unsigned u) { return __builtin_bit_cast(float, u); }
__device__ inline unsigned __float_as_uint(float f) { return __builtin_bit_cast(unsigned, f); }
__device__ inline float __shfl_xor_sync(unsigned mask, float v, int lane) {
    return __nvvm_shfl_sync_bfly_f32(mask, v, lane, 0x1f);
}
__device__ inline unsigned atomicAdd(unsigned* p, unsigned v) { return unsigned(__nvvm_atom_add_gen_i((int*)p, int(v))); }
__device__ inline void __threadfence() { __nvvm_membar_gl(); }
`

// clangCUDA compiles src for sm_80 with clang's CUDA front end (no CUDA
// toolkit: -nocudainc, the shim above) with extra arguments; it skips the
// test when clang is absent.
func clangCUDA(t *testing.T, src string, extra ...string) (dir, out string, err error) {
	t.Helper()
	clang, err := exec.LookPath("clang++")
	if err != nil {
		t.Skip("clang++ not installed: the CUDA syntax check needs it")
	}
	dir = t.TempDir()
	shim := filepath.Join(dir, "shim.h")
	file := filepath.Join(dir, "qpack_kernels.cu")
	if err := os.WriteFile(shim, []byte(clangCUDAShim), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-x", "cuda", "--cuda-gpu-arch=sm_80", "--cuda-device-only", "-nocudainc", "-nocudalib",
		"-Xclang", "-target-feature", "-Xclang", "+ptx70", "-std=c++17", "-Wall", "-Werror",
		"-include", shim}, extra...)
	args = append(args, file)
	cmd := exec.Command(clang, args...)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	return dir, string(b), err
}

// TestKernelSourceClang compiles Source() with clang's CUDA front end down
// to PTX, so a syntax or type error in the prelude or a body is caught
// without a GPU, and checks that every kernel the host looks up is a PTX
// entry.
func TestKernelSourceClang(t *testing.T) {
	dir, out, err := clangCUDA(t, Source(), "-O2", "-S", "-o", "kernels.ptx")
	if err != nil {
		t.Fatalf("clang rejects the kernel source: %v\n%s", err, out)
	}
	ptx, err := os.ReadFile(filepath.Join(dir, "kernels.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kernelNames {
		if !strings.Contains(string(ptx), ".entry "+k+"(") {
			t.Errorf("kernel %s is not an entry of the PTX", k)
		}
	}
}

// The check can fail: a body with an undeclared name is rejected.
func TestKernelSourceClangRejects(t *testing.T) {
	src := Source() + "\nQP_ENTRY(broken, Unary) { p.x[QP_TID] = qp_no_such_function(1.0f); }\n"
	_, out, err := clangCUDA(t, src, "-fsyntax-only")
	if err == nil || !strings.Contains(out, "qp_no_such_function") {
		t.Fatalf("clang accepted a broken body (err %v):\n%s", err, out)
	}
}
