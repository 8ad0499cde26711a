// The shared kernel dialect (internal/gpukernels/doc.go is the contract)
// for the Metal Shading Language. Kernel bodies written once for CUDA and
// Metal use only these names; cuda/kernels/00_prelude_cuda.h defines them
// for CUDA. QP_TG (256 threads per threadgroup: the host always launches
// that many for a QP_ENTRY kernel), QP_SIMD (32) and QP_SIMDS (8) come from
// 00_common.metal.
//
// Parameters: a kernel takes one parameter struct p, bound with setBytes at
// buffer index 0. Arrays are QP_GLOBAL pointers inside it: Metal 3 GPU
// addresses (MTLBuffer.gpuAddress + byte offset, Apple silicon with macOS
// 13 or later), each buffer made resident for the dispatch with
// useResource:usage: (the host does both; see metal/layer.go). Pointer
// fields come first (8 bytes each), then 32-bit fields.
//
// Ids: QP_TID is the thread's index in its threadgroup (0..QP_TG-1),
// QP_LANE its lane in its simdgroup, QP_SIMD_ID its simdgroup's index,
// QP_GROUP_X / QP_GROUP_Y the threadgroup's position in the grid.
//
// Math is float only (Metal has no double) with the precise variants of
// the library functions, so results do not depend on the fast-math mode.

// QP_ENTRY(name, Params) opens a kernel; the body follows in braces. The
// host parses this exact list (metal/kernels.go, entryParams).
#define QP_ENTRY(name, Params) \
    kernel void name(constant Params& p [[buffer(0)]], \
                     uint3 qp_tgid [[threadgroup_position_in_grid]], \
                     uint qp_tid [[thread_index_in_threadgroup]], \
                     uint qp_lane [[thread_index_in_simdgroup]], \
                     uint qp_simd_id [[simdgroup_index_in_threadgroup]])

#define QP_GLOBAL device
#define QP_SHARED threadgroup
#define QP_DEVICE inline
#define QP_TID qp_tid
#define QP_LANE qp_lane
#define QP_SIMD_ID qp_simd_id
#define QP_GROUP_X qp_tgid.x
#define QP_GROUP_Y qp_tgid.y
// A full fence for both address spaces, like CUDA's __syncthreads: bodies
// exchange data through threadgroup memory and through their outputs.
#define QP_BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device)
#define QP_STATIC_ASSERT(c, msg) static_assert(c, msg)
// The Metal compiler unrolls constant-trip loops on its own.
#define QP_UNROLL
// Threadgroup memory as a helper's pointer parameter. The C++ shim
// (metal/shim/metal_stdlib) makes `threadgroup` storage `static`, which a
// parameter cannot be: there it is empty.
#ifdef QPACK_METAL_SHIM
#define QP_SHARED_PTR
#else
#define QP_SHARED_PTR threadgroup
#endif

// Reductions over the 32 lanes of the calling simdgroup (all active), as
// the dialect specifies them: a butterfly, v op= shuffle_xor(v, o) for
// o = 16, 8, 4, 2, 1, so every lane holds the same bits and the order is
// the CUDA prelude's (simd_sum's hardware order is unspecified).
inline float qp_simd_sum(float v) {
    for (ushort o = 16; o > 0; o >>= 1) {
        v += simd_shuffle_xor(v, o);
    }
    return v;
}
// Lane ^ o's v (o below 32): one exchange of a butterfly.
inline float qp_simd_xor(float v, uint o) { return simd_shuffle_xor(v, ushort(o)); }
inline float qp_simd_max(float v) {
    for (ushort o = 16; o > 0; o >>= 1) {
        float w = simd_shuffle_xor(v, o);
        v = v > w ? v : w;
    }
    return v;
}

// An unsigned integer's maximum and minimum over the lanes: the same in any
// order, so the hardware's own reductions.
inline uint qp_simd_max_u(uint v) { return simd_max(v); }
inline uint qp_simd_min_u(uint v) { return simd_min(v); }
// An unsigned integer's sum over the lanes (modulo 2^32; any order).
inline uint qp_simd_sum_u(uint v) { return simd_sum(v); }

inline float qp_exp(float x) { return precise::exp(x); }
inline float qp_tanh(float x) { return precise::tanh(x); }
inline float qp_sqrt(float x) { return precise::sqrt(x); }
inline float qp_rsqrt(float x) { return precise::rsqrt(x); }
inline float qp_cos(float x) { return precise::cos(x); }
inline float qp_sin(float x) { return precise::sin(x); }
// A float's bits and back.
inline uint qp_as_uint(float x) { return as_type<uint>(x); }
inline float qp_as_float(uint u) { return as_type<float>(u); }
inline float qp_log(float x) { return precise::log(x); }
// MSL has no log1p: log(u)·x/(u−1) with u = 1+x corrects the rounding of
// 1+x (exact to a few ulps for small x), and is x itself where 1+x rounds
// to 1.
inline float qp_log1p(float x) {
    float u = 1.0f + x;
    if (u == 1.0f) {
        return x;
    }
    if (isinf(u)) {
        return u;
    }
    return precise::log(u) * (x / (u - 1.0f));
}
