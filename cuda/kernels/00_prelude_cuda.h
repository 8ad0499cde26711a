// qpack CUDA kernels: the CUDA prelude. The host (cuda/kernels.go)
// concatenates this file and every *.cu file in name order into one source
// and compiles it with NVRTC for the device's compute capability.
//
// The kernel bodies use only the macros and helpers below for what differs
// between CUDA and Metal (address spaces, thread and group ids, barriers,
// 32-wide simd reductions, bit casts), so a Metal prelude defining the same
// names can compile the same bodies later (Apple simdgroups and NVIDIA warps
// are both 32 wide).
//
// Conventions the host relies on (cuda/backend.go):
//   - Each kernel takes one parameter struct by value; device addresses are
//     64-bit fields first, then 32-bit fields; sizes are static_asserted.
//   - Float vectors are float32, 16-byte aligned at every row start (the
//     host guarantees it: rows are multiples of 32 values and buffers are
//     256-byte aligned); packed 4- and 8-bit weights are 16-byte aligned at
//     every row start, scales and biases 4-byte aligned.

#define QP_KERNEL extern "C" __global__ void
// A kernel launched with QP_TG threads a group that the compiler is to fit
// at least min groups of on a multiprocessor (registers permitting).
#define QP_KERNEL_BOUNDS(min) extern "C" __global__ void __launch_bounds__(QP_TG, min)
#define QP_DEVICE __device__ __forceinline__

// Programmatic dependent launch (sm_90 on; cuda/pdl.go): the host may
// launch a kernel while the kernel before it on the stream still runs, so
// that its groups are resident and its weights on their way to the L2
// when that one ends. qp_grid_wait() returns once every earlier kernel of
// the stream has completed and its writes are visible (at once when the
// kernel was launched the ordinary way); every kernel calls it before it
// reads or writes memory another kernel may write or read: QP_ENTRY's
// wrapper and the first statement of every QP_KERNEL call qp_grid_begin()
// (cuda/source_test.go checks it), and only prefetches of weights (no
// kernel writes them) may come before. qp_grid_launch_dependents() lets
// the next kernel's groups start; called after the wait, so at most one
// kernel waits ahead of the one running.
QP_DEVICE void qp_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
QP_DEVICE void qp_grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
QP_DEVICE void qp_grid_begin() {
    qp_grid_wait();
    qp_grid_launch_dependents();
}
// A hint that the 128-byte line at p will be read: it is fetched into the
// L2 (a prefetch never faults and never changes memory).
QP_DEVICE void qp_prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// QP_ENTRY(name, Params) opens a kernel of the shared bodies
// (internal/gpukernels): one parameter struct p, by value; the host always
// launches QP_TG threads per group. The kernel is a wrapper that calls
// qp_grid_begin() and then the body, an inlined function of p.
#define QP_ENTRY(name, P)                                                   \
    QP_DEVICE void name##_body(const P& p);                                \
    extern "C" __global__ void __launch_bounds__(256) name(const P p) {     \
        qp_grid_begin();                                                    \
        name##_body(p);                                                     \
    }                                                                       \
    QP_DEVICE void name##_body(const P& p)
#define QP_GLOBAL                      // address space of buffer pointers
#define QP_SHARED __shared__           // threadgroup memory
#define QP_SHARED_PTR                  // address space of pointers to threadgroup memory
#define QP_BARRIER() __syncthreads()   // threadgroup barrier (memory too)
#define QP_TID ((unsigned)threadIdx.x) // thread index in the group (1-D groups)
#define QP_LANE (QP_TID & 31u)         // index in the simdgroup / warp
#define QP_SIMD_ID (QP_TID >> 5)       // simdgroup / warp index in the group
#define QP_GROUP_X ((unsigned)blockIdx.x)
#define QP_GROUP_Y ((unsigned)blockIdx.y)
#define QP_GLOBAL_X ((unsigned)(blockIdx.x * blockDim.x + threadIdx.x))
#define QP_GROUPS ((unsigned)(gridDim.x * gridDim.y)) // groups of the launch (x·y)

// Threads per group (every launch), simdgroup width, simdgroups per group.
#define QP_TG 256
#define QP_SIMD 32
#define QP_SIMDS (QP_TG / QP_SIMD)

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long long ulong;
// 16-byte vectors: one 128-bit load each (LDG.128).
struct alignas(16) qp_uint4 { uint x, y, z, w; };
struct alignas(16) qp_float4 { float x, y, z, w; };

// The sum over the 32 lanes of a simdgroup, in every lane (butterfly: the
// same order in every lane, so every lane holds the same bits). Called in
// control flow that is uniform per simdgroup.
QP_DEVICE float qp_simd_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// The sum over each half (lanes 0-15, 16-31) of a simdgroup, in every lane
// of that half (the butterfly's last four steps). Where the other half's
// lanes hold zeros, qp_simd_sum gives the same value: its first step adds
// those zeros.
QP_DEVICE float qp_half_sum(float v) {
    for (int o = 8; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// Lane ^ o's v (o below 32): one exchange of a butterfly. Called in
// control flow that is uniform per simdgroup.
QP_DEVICE float qp_simd_xor(float v, uint o) { return __shfl_xor_sync(0xffffffffu, v, (int)o); }

// The maximum over the 32 lanes of a simdgroup, in every lane (butterfly).
QP_DEVICE float qp_simd_max(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    return v;
}

// The maximum and the minimum of an unsigned integer over the 32 lanes of a
// simdgroup, in every lane: one redux.sync from sm_80 on, a butterfly
// before (an integer's maximum is the same in any order).
QP_DEVICE uint qp_simd_max_u(uint v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint r;
    asm volatile("redux.sync.max.u32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
#else
    for (int o = 16; o > 0; o >>= 1) {
        uint w = __shfl_xor_sync(0xffffffffu, v, o);
        v = v > w ? v : w;
    }
    return v;
#endif
}
QP_DEVICE uint qp_simd_min_u(uint v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint r;
    asm volatile("redux.sync.min.u32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
#else
    for (int o = 16; o > 0; o >>= 1) {
        uint w = __shfl_xor_sync(0xffffffffu, v, o);
        v = v < w ? v : w;
    }
    return v;
#endif
}

// An unsigned integer's sum over the 32 lanes (modulo 2^32), in every
// lane: one redux.sync from sm_80 on, a butterfly before (any order gives
// the same sum).
QP_DEVICE uint qp_simd_sum_u(uint v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint r;
    asm volatile("redux.sync.add.u32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
#else
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
#endif
}

// A float's bits and back.
QP_DEVICE float qp_as_float(uint u) { return __uint_as_float(u); }
QP_DEVICE uint qp_as_uint(float x) { return __float_as_uint(x); }

// *p += v, atomically for the whole device; the value before.
QP_DEVICE uint qp_atomic_add(uint* p, uint v) { return atomicAdd(p, v); }
// This thread's memory accesses before the fence are seen by every thread
// of the device before its accesses after it.
QP_DEVICE void qp_fence() { __threadfence(); }

QP_DEVICE float qp_half_to_float(ushort h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// PTX prmt.b32 (default mode, selector nibbles 0-7): byte n of the result
// is byte ((s >> 4n) & 7) of the 8 bytes {a.b0 .. a.b3, b.b0 .. b.b3}.
QP_DEVICE uint qp_byte_perm(uint a, uint b, uint s) {
    uint r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
    return r;
}

QP_DEVICE qp_uint4 qp_load_uint4(QP_GLOBAL const uchar* p) { return *(const qp_uint4*)p; }
QP_DEVICE qp_float4 qp_load_float4(QP_GLOBAL const float* p) { return *(const qp_float4*)p; }

QP_DEVICE float qp_exp(float x) { return expf(x); }
QP_DEVICE float qp_rsqrt(float x) { return rsqrtf(x); }
// The accurate library versions (NVRTC without fast math), not the
// intrinsics (__expf, __cosf, ...).
QP_DEVICE float qp_sqrt(float x) { return sqrtf(x); }
QP_DEVICE float qp_log1p(float x) { return log1pf(x); }
QP_DEVICE float qp_tanh(float x) { return tanhf(x); }
QP_DEVICE float qp_cos(float x) { return cosf(x); }
QP_DEVICE float qp_sin(float x) { return sinf(x); }

#define QP_STATIC_ASSERT(c, m) static_assert(c, m)
#define QP_UNROLL _Pragma("unroll")
#define QP_MIN(a, b) min(a, b)
