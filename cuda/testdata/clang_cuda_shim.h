// Declarations of the CUDA built-ins the kernels use, for checking the
// kernel source with clang without a CUDA toolkit (gemm_clang_test.go):
//   clang++ -x cuda --cuda-gpu-arch=sm_80 --cuda-device-only -nocudainc
//     -nocudalib -std=c++17 -include clang_cuda_shim.h ...
// Only what NVRTC provides implicitly is declared here; the bodies are
// never linked (a syntax and code-generation check, not a build).
#pragma once
#include <__clang_cuda_builtin_vars.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))

__device__ float __shfl_xor_sync(unsigned mask, float v, int lane, int width = 32);
__device__ unsigned atomicAdd(unsigned* p, unsigned v);
__device__ void __threadfence();
__device__ float __uint_as_float(unsigned u);
__device__ unsigned __float_as_uint(float f);
__device__ float expf(float x);
__device__ float rsqrtf(float x);
__device__ float sqrtf(float x);
__device__ float log1pf(float x);
__device__ float tanhf(float x);
__device__ float cosf(float x);
__device__ float sinf(float x);
__device__ float fmaxf(float a, float b);
__device__ int min(int a, int b);
__device__ unsigned min(unsigned a, unsigned b);
__device__ int max(int a, int b);
__device__ unsigned max(unsigned a, unsigned b);
