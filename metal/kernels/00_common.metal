// qpack Metal kernels: shared definitions. The host concatenates every file in
// metal/kernels in name order into one source and compiles it at run time with
// newLibraryWithSource:options:error:, so this file comes first.
//
// Conventions (the host, metal/launch.go, relies on them):
//   - Buffers are bound at offset 0; every array is located by a 64-bit byte
//     offset in the kernel's parameter struct, so multi-gigabyte buffers work
//     and no binding offset alignment rule applies.
//   - Float vectors are float32 and 4-byte aligned. Weight data (packed words,
//     scales, biases, dense matrix elements) need only be 2-byte aligned: MLX
//     tensors inside safetensors files and expert blobs are not 4-byte aligned
//     in general, so 32-bit words are assembled from two 16-bit loads.
//   - Parameter structs hold 64-bit fields first, then 32-bit ones, and are a
//     multiple of 8 bytes; the host writes them field by field.
//   - Threadgroup memory is declared at kernel scope only, and simdgroup
//     functions are called in control flow that is uniform per simdgroup (both
//     keep the kernels runnable under the C++ shim in metal/shim).
#include <metal_stdlib>
using namespace metal;

// Threads per threadgroup of the reduction kernels and the GEMVs: 8
// simdgroups of 32 (the simdgroup width of every Apple GPU; the host checks).
#define QP_TG 256
#define QP_SIMD 32
#define QP_SIMDS (QP_TG / QP_SIMD)
// Largest head dimension the attention kernel keeps in threadgroup memory.
#define QP_MAX_HEAD_DIM 512

// Storage types of scales, biases and dense matrix elements (mlxq.Float).
#define QP_F32 0u
#define QP_F16 1u
#define QP_BF16 2u

// The little-endian 16-bit word at byte offset off of p (p + off even).
inline uint qp_load_u16(device const uchar* p, ulong off) {
    return uint(*((device const ushort*)(p + off)));
}

// The little-endian 32-bit word at byte offset off of p, assembled from two
// 16-bit loads: p + off need only be 2-byte aligned.
inline uint qp_load_u32(device const uchar* p, ulong off) {
    device const ushort* h = (device const ushort*)(p + off);
    return uint(h[0]) | (uint(h[1]) << 16);
}

// Element i of an array of type t (QP_F32, QP_F16, QP_BF16) that starts at
// byte offset off of p.
inline float qp_load_float(device const uchar* p, ulong off, ulong i, uint t) {
    if (t == QP_F32) {
        return as_type<float>(qp_load_u32(p, off + i * 4));
    }
    uint u = qp_load_u16(p, off + i * 2);
    if (t == QP_F16) {
        return float(as_type<half>(ushort(u)));
    }
    return as_type<float>(u << 16);
}

inline float qp_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

inline float qp_silu(float x) { return x * qp_sigmoid(x); }

// log(1 + e^x) with torch's threshold: x > 20 gives x.
inline float qp_softplus(float x) { return x > 20.0f ? x : log(1.0f + exp(x)); }
