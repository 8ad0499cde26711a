// Host emulation of the CUDA prelude (kernels/00_prelude_cuda.h), for
// running kernels/10_common.cu and kernels/25_gemm.cu (gemm_emu_test.go),
// and 20_gemv.cu with 22_moe.cu (moe.cpp, layer_moe_emu_test.go) on the
// CPU: each group of threads is QP_TG fibers on one OS thread (run.h),
// shared memory is the kernel's static variables (one group runs at a
// time), a barrier suspends a thread until its group (or warp) has
// arrived, and mma.sync is a warp-collective step
// that gathers the 32 lanes' fragments and computes each lane's part of D
// from the PTX ISA's fragment layouts (the same layouts the kernel's
// comment states). The point is the kernels' own index arithmetic, tails,
// loads and barriers, checked before a GPU runs them; the numerics of the
// tensor cores are modelled only as "float32 sums of exact products".
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong; // 64 bits here, as the prelude's unsigned long long
struct alignas(16) qp_uint4 { uint x, y, z, w; };
struct alignas(16) qp_float4 { float x, y, z, w; };

uint qp_emu_thread_id(); // the running thread (a fiber: run.h)
extern uint qp_emu_gx, qp_emu_gy;
void qp_emu_barrier();
void qp_emu_warp_barrier(uint warp);

#define QP_KERNEL extern "C" void
#define QP_KERNEL_BOUNDS(min) extern "C" void
// The shared bodies' entry points as plain functions (the fused norm's
// tests run add_rms_norm_rows of internal/gpukernels/10_norm.qk here).
#define QP_ENTRY(name, P)                               \
    static void name##_body(const P& p);                \
    extern "C" void name(const P p) { name##_body(p); } \
    static void name##_body(const P& p)
// One group runs at a time here: no launch overlaps another, nothing to wait for.
static inline void qp_grid_begin() {}
// A prefetch changes nothing; a program may watch them (moe.cpp checks
// where they fall) through this hook, 0 for none.
static void (*qp_emu_prefetch_hook)(const void*) = 0;
static inline void qp_prefetch_l2(const void* p) {
    if (qp_emu_prefetch_hook) {
        qp_emu_prefetch_hook(p);
    }
}
#define QP_DEVICE static inline
#define QP_GLOBAL
#define QP_SHARED static
#define QP_SHARED_PTR
#define QP_BARRIER() qp_emu_barrier()
#define QP_TID qp_emu_thread_id()
#define QP_LANE (QP_TID & 31u)
#define QP_SIMD_ID (QP_TID >> 5)
#define QP_GROUP_X qp_emu_gx
#define QP_GROUP_Y qp_emu_gy
#define QP_GLOBAL_X (qp_emu_gx * 256u + qp_emu_thread_id())
extern uint qp_emu_groups;
#define QP_GROUPS qp_emu_groups
#define QP_STATIC_ASSERT(c, m) static_assert(c, m)
#define QP_UNROLL
#define QP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define QP_HOST_EMULATION 1
// As the CUDA prelude (and, token for token, as 10_common.cu has had them).
#define QP_TG 256
#define QP_SIMD 32
#define QP_SIMDS (QP_TG / QP_SIMD)

// One group runs at a time (run.h); the builtins keep TSan's threads
// ordered too.
QP_DEVICE uint qp_atomic_add(uint* p, uint v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
QP_DEVICE void qp_fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

QP_DEVICE float qp_as_float(uint u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

QP_DEVICE uint qp_as_uint(float f) {
    uint u;
    memcpy(&u, &f, 4);
    return u;
}

// IEEE half to float, exactly (normals, subnormals, inf, NaN).
QP_DEVICE float qp_half_to_float(ushort h) {
    uint sign = (h >> 15) & 1u, exp = (h >> 10) & 31u, man = h & 1023u;
    float v;
    if (exp == 0) {
        v = std::ldexp(float(man), -24);
    } else if (exp == 31) {
        v = man ? NAN : INFINITY;
    } else {
        v = std::ldexp(float(man | 1024u), int(exp) - 25);
    }
    return sign ? -v : v;
}

QP_DEVICE qp_uint4 qp_load_uint4(const uchar* p) {
    qp_uint4 v;
    memcpy(&v, p, 16);
    return v;
}

// prmt.b32, default mode with selector nibbles 0-7 (the prelude's
// qp_byte_perm).
QP_DEVICE uint qp_byte_perm(uint a, uint b, uint s) {
    unsigned long long v = (unsigned long long)a | ((unsigned long long)b << 32);
    uint r = 0;
    for (int n = 0; n < 4; n++) {
        r |= uint((v >> (8 * ((s >> (4 * n)) & 7u))) & 0xffu) << (8 * n);
    }
    return r;
}

QP_DEVICE qp_float4 qp_load_float4(const float* p) {
    qp_float4 v;
    memcpy(&v, p, 16);
    return v;
}

QP_DEVICE float qp_exp(float x) { return std::exp(x); }
QP_DEVICE float qp_rsqrt(float x) { return 1.0f / std::sqrt(x); }
QP_DEVICE float qp_sqrt(float x) { return std::sqrt(x); }
QP_DEVICE float qp_tanh(float x) { return std::tanh(x); }
QP_DEVICE float qp_log1p(float x) { return std::log1p(x); }

// The 32-lane butterflies (the prelude's qp_simd_sum and qp_simd_max:
// v = op(v, shfl_xor(v, o)) for o = 16 .. 1), warp-collective through a
// per-warp exchange array, so a lane that skipped the call would hang the
// emulator rather than pass.
extern float qp_emu_shfl[8][32];
template <typename Op>
QP_DEVICE float qp_emu_butterfly(float v, Op op, uint first = 16) {
    uint w = QP_SIMD_ID, l = QP_LANE;
    for (uint o = first; o > 0; o >>= 1) {
        qp_emu_shfl[w][l] = v;
        qp_emu_warp_barrier(w);
        float other = qp_emu_shfl[w][l ^ o];
        qp_emu_warp_barrier(w);
        v = op(v, other);
    }
    return v;
}
QP_DEVICE float qp_simd_sum(float v) {
    return qp_emu_butterfly(v, [](float a, float b) { return a + b; });
}
// The prelude's qp_half_sum: the butterfly's steps 8 .. 1.
QP_DEVICE float qp_half_sum(float v) {
    return qp_emu_butterfly(v, [](float a, float b) { return a + b; }, 8);
}
QP_DEVICE float qp_simd_max(float v) {
    return qp_emu_butterfly(v, [](float a, float b) { return std::fmax(a, b); });
}
// redux.sync.max.u32 and .min.u32: the integers carried through the float
// exchange by their bits (copies only, never arithmetic on them).
QP_DEVICE uint qp_simd_max_u(uint v) {
    return qp_as_uint(qp_emu_butterfly(qp_as_float(v), [](float a, float b) {
        return qp_as_uint(a) > qp_as_uint(b) ? a : b;
    }));
}
QP_DEVICE uint qp_simd_min_u(uint v) {
    return qp_as_uint(qp_emu_butterfly(qp_as_float(v), [](float a, float b) {
        return qp_as_uint(a) < qp_as_uint(b) ? a : b;
    }));
}
// redux.sync.add.u32: the integers' sum modulo 2^32 (the bits carried as
// above, the addition on the integers).
QP_DEVICE uint qp_simd_sum_u(uint v) {
    return qp_as_uint(qp_emu_butterfly(qp_as_float(v), [](float a, float b) {
        return qp_as_float(qp_as_uint(a) + qp_as_uint(b));
    }));
}

// cvt.rn.bf16x2.f32: round to nearest even, NaN kept a (quiet) NaN.
QP_DEVICE uint qp_emu_bf16(float f) {
    uint u = qp_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (u >> 16) | 0x40u;
    }
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

QP_DEVICE uint qp_pack_bf16(float lo, float hi) { return qp_emu_bf16(lo) | (qp_emu_bf16(hi) << 16); }

// cvt.rna.tf32.f32: round to nearest, ties away from zero, to 10 stored
// mantissa bits (adding half of the dropped unit to the magnitude, then
// truncating); NaN kept.
QP_DEVICE uint qp_tf32(float f) {
    uint u = qp_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return u | 0x400000u;
    }
    return (u + 0x1000u) & 0xffffe000u;
}

struct QpEmuWarp {
    uint a[32][4];
    uint b[32][2];
};
extern QpEmuWarp qp_emu_warps[8];

QP_DEVICE float qp_emu_half(uint word, uint k) { return qp_as_float((k & 1u ? word >> 16 : word & 0xffffu) << 16); }

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, warp-collective.
// Fragments (g = lane>>2, t = lane&3): A[row][k] is in lane 4*(row%8) +
// (k%8)/2, register (row >= 8) + 2*(k >= 8), half k%2; B[k][col] in lane
// 4*col + (k%8)/2, register (k >= 8), half k%2; this lane's D elements are
// (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
QP_DEVICE void qp_mma_bf16(float* c, const uint* a, const uint* b) {
    uint w = QP_SIMD_ID, l = QP_LANE;
    QpEmuWarp& s = qp_emu_warps[w];
    memcpy(s.a[l], a, 16);
    memcpy(s.b[l], b, 8);
    qp_emu_warp_barrier(w);
    uint g = l >> 2, t = l & 3u;
    float d[4];
    for (uint e = 0; e < 4; e++) {
        uint row = g + 8 * (e >> 1), col = 2 * t + (e & 1u);
        double sum = 0;
        for (uint k = 0; k < 16; k++) {
            float av = qp_emu_half(s.a[4 * (row % 8) + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k);
            float bv = qp_emu_half(s.b[4 * col + (k % 8) / 2][k >= 8], k);
            sum += double(av) * double(bv);
        }
        d[e] = c[e] + float(sum);
    }
    qp_emu_warp_barrier(w); // every lane has read the fragments
    memcpy(c, d, 16);
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, warp-collective:
// A[row][k] in lane 4*(row%8) + k%4, register (row >= 8) + 2*(k >= 4);
// B[k][col] in lane 4*col + k%4, register (k >= 4); D as above.
QP_DEVICE void qp_mma_tf32(float* c, const uint* a, const uint* b) {
    uint w = QP_SIMD_ID, l = QP_LANE;
    QpEmuWarp& s = qp_emu_warps[w];
    memcpy(s.a[l], a, 16);
    memcpy(s.b[l], b, 8);
    qp_emu_warp_barrier(w);
    uint g = l >> 2, t = l & 3u;
    float d[4];
    for (uint e = 0; e < 4; e++) {
        uint row = g + 8 * (e >> 1), col = 2 * t + (e & 1u);
        double sum = 0;
        for (uint k = 0; k < 8; k++) {
            float av = qp_as_float(s.a[4 * (row % 8) + k % 4][(row >= 8) + 2 * (k >= 4)]);
            float bv = qp_as_float(s.b[4 * col + k % 4][k >= 4]);
            sum += double(av) * double(bv);
        }
        d[e] = c[e] + float(sum);
    }
    qp_emu_warp_barrier(w);
    memcpy(c, d, 16);
}
