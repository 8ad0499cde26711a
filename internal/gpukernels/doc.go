// Package gpukernels holds the GPU kernels of the whole-layer ops that are
// not matrix products (RMSNorm rows, RoPE, attention, the Gated DeltaNet
// conv, norms and recurrence, routing, the element-wise and index ops),
// written once in a dialect that a CUDA prelude (cuda/kernels/
// 00_prelude_cuda.h) and a Metal prelude both compile. Bodies returns them.
//
// # The dialect (the contract between the bodies and each prelude)
//
// A body uses C++ (the common subset of CUDA C++ and the Metal Shading
// Language: no templates, no references, no double, no recursion, no
// standard library) and only these names for what differs between APIs:
//
//   - QP_ENTRY(name, Params) { ... } opens a kernel taking one parameter
//     struct named p. CUDA: extern "C" __global__ void name(const Params p);
//     Metal: kernel void name(constant Params& p [[buffer(0)]], <the thread
//     ids>). The host always launches QP_TG threads per group, groups along
//     x only (QP_GROUP_Y is kept for the CUDA-only kernels).
//   - Parameter structs: pointers first, declared QP_GLOBAL float* x (or
//     QP_GLOBAL const float*, QP_GLOBAL const int* for int32 index vectors,
//     QP_GLOBAL int*), 8 bytes each; then 32-bit fields (uint, int, float).
//     Each struct is followed by QP_STATIC_ASSERT(sizeof(S) == N, "S
//     layout"), and the Go side writes exactly N bytes in field order.
//   - QP_TID (thread index in the group), QP_LANE (index in the
//     simdgroup), QP_SIMD_ID (simdgroup in the group), QP_GROUP_X,
//     QP_GROUP_Y: unsigned, and usable ONLY in a QP_ENTRY body (Metal
//     passes them as kernel arguments); helpers take them as arguments.
//   - QP_TG (256), QP_SIMD (32), QP_SIMDS (8): constants.
//   - QP_SHARED declares threadgroup memory, ONLY at the top level of a
//     QP_ENTRY body (fixed size); QP_SHARED_PTR is the address space of a
//     pointer to it in a helper's parameter (CUDA: nothing; Metal:
//     threadgroup).
//   - QP_BARRIER(): a threadgroup barrier with memory ordering for shared
//     and device memory, reached by every thread of the group (uniform
//     control flow; no thread may have returned).
//   - QP_DEVICE marks a helper function (CUDA: __device__ inline; Metal:
//     inline).
//   - qp_simd_sum(float), qp_simd_max(float): over the 32 lanes, the same
//     bits in every lane (a butterfly: v op= shuffle_xor(v, o) for o = 16,
//     8, 4, 2, 1), called with all 32 lanes active.
//   - qp_simd_max_u(uint), qp_simd_min_u(uint), qp_simd_sum_u(uint): an
//     unsigned integer's maximum, minimum and sum (modulo 2^32) over the
//     32 lanes, in every lane (CUDA: one redux.sync from sm_80 on; Metal:
//     simd_max, simd_min, simd_sum), called with all 32 lanes active.
//   - qp_exp, qp_log1p, qp_tanh, qp_sqrt, qp_rsqrt, qp_cos, qp_sin: float
//     functions, the accurate versions (CUDA without fast math; Metal's
//     precise:: ones), except qp_rsqrt which may be approximate (the
//     bodies use 1/qp_sqrt where accuracy matters).
//   - qp_as_uint(float), qp_as_float(uint): a float's bits and back.
//   - QP_STATIC_ASSERT(cond, "message").
//   - QP_UNROLL before a loop of constant trip count asks for it unrolled
//     (CUDA: #pragma unroll, so arrays indexed by its counter stay in
//     registers); elsewhere it may expand to nothing.
//
// Every sum is in float, in an order fixed by the code (never atomics), so
// a kernel gives the same bits on every run of the same device. Results
// differ from the host's float64-accumulated reference by float round-off
// only (and, on CUDA, by multiply-add contraction).
//
// Bodies' own helpers are named qk_* and their constants QK_*; prelude
// names are QP_* and qp_*. The kernels, their parameter structs, geometry
// and limits are documented in each file (00_common.qk ... 70_route.qk).
package gpukernels
