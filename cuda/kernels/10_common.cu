// Definitions shared by every kernel body (API-neutral: prelude names only).

// Threads per group (QP_TG, QP_SIMD, QP_SIMDS): in the prelude.

// Storage types of scales, biases and dense matrix elements (mlxq.Float).
#define QP_F32 0u
#define QP_F16 1u
#define QP_BF16 2u

// Element i of an array of type t (QP_F32, QP_F16, QP_BF16) at p.
QP_DEVICE float qp_load_float(QP_GLOBAL const uchar* p, ulong i, uint t) {
    if (t == QP_F32) {
        return ((QP_GLOBAL const float*)p)[i];
    }
    ushort u = ((QP_GLOBAL const ushort*)p)[i];
    if (t == QP_F16) {
        return qp_half_to_float(u);
    }
    return qp_as_float(uint(u) << 16);
}

QP_DEVICE float qp_sigmoid(float x) { return 1.0f / (1.0f + qp_exp(-x)); }

QP_DEVICE float qp_silu(float x) { return x * qp_sigmoid(x); }
