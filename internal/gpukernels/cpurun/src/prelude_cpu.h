// The CPU prelude of the shared kernel bodies: plain C++17 for g++, so the
// bodies' arithmetic can be checked on the host (cpurun, exec.cpp). Each
// group's QP_TG threads are fibers of one OS thread; barriers and simdgroup
// reductions are suspension points of exec.cpp's scheduler. Thread ids are
// locals of the QP_ENTRY function, so a helper using QP_TID fails to
// compile here as it would on Metal.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong; // as glibc's sys/types.h (64 bits on the LP64 hosts)

namespace qkcpu {
struct Ids {
    uint tid, lane, simd, gx, gy;
};
Ids ids();
void barrier();
float simd_op(float v, int op); // 0: sum, 1: max
float simd_xor(float v, uint o); // lane ^ o's v
uint simd_op_u(uint v, int op);  // 2: max, 3: min, 5: sum
typedef void (*Fn)(const void*);
struct Reg {
    Reg(const char* name, unsigned size, Fn fn);
};
}  // namespace qkcpu

#define QP_ENTRY(name, P)                                                          \
    static void name##_qkbody(const P p, const qkcpu::Ids qp_ids_);                \
    static void name##_qkrun(const void* raw) {                                    \
        P p;                                                                       \
        std::memcpy(&p, raw, sizeof(P));                                           \
        name##_qkbody(p, qkcpu::ids());                                            \
    }                                                                              \
    static qkcpu::Reg name##_qkreg(#name, sizeof(P), name##_qkrun);                \
    static void name##_qkbody(const P p, const qkcpu::Ids qp_ids_)

#define QP_DEVICE static inline
#define QP_GLOBAL
#define QP_SHARED static
#define QP_SHARED_PTR
#define QP_BARRIER() qkcpu::barrier()
#define QP_TID (qp_ids_.tid)
#define QP_LANE (qp_ids_.lane)
#define QP_SIMD_ID (qp_ids_.simd)
#define QP_GROUP_X (qp_ids_.gx)
#define QP_GROUP_Y (qp_ids_.gy)
#define QP_TG 256
#define QP_SIMD 32
#define QP_SIMDS (QP_TG / QP_SIMD)
#define QP_STATIC_ASSERT(c, m) static_assert(c, m)
#define QP_UNROLL

static inline float qp_simd_sum(float v) { return qkcpu::simd_op(v, 0); }
static inline float qp_simd_max(float v) { return qkcpu::simd_op(v, 1); }
static inline float qp_simd_xor(float v, uint o) { return qkcpu::simd_xor(v, o); }
static inline uint qp_simd_max_u(uint v) { return qkcpu::simd_op_u(v, 2); }
static inline uint qp_simd_min_u(uint v) { return qkcpu::simd_op_u(v, 3); }
static inline uint qp_simd_sum_u(uint v) { return qkcpu::simd_op_u(v, 5); }
static inline float qp_exp(float x) { return std::exp(x); }
static inline float qp_log1p(float x) { return std::log1p(x); }
static inline float qp_tanh(float x) { return std::tanh(x); }
static inline float qp_sqrt(float x) { return std::sqrt(x); }
static inline float qp_rsqrt(float x) { return 1.0f / std::sqrt(x); }
static inline float qp_cos(float x) { return std::cos(x); }
static inline float qp_sin(float x) { return std::sin(x); }
// A float's bits and back.
static inline uint qp_as_uint(float x) {
    uint u;
    std::memcpy(&u, &x, 4);
    return u;
}
static inline float qp_as_float(uint u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}
