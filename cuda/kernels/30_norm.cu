// Row normalizations. One group of QP_TG threads per row. In place (x == y)
// is allowed: every thread reads its elements before the barrier and writes
// only those elements after it.

struct RowNorm {
    const float* x;  // [rows][dim]
    const float* w;  // [dim]
    float* y;        // [rows][dim]
    uint rows;
    uint dim;
    float eps;
    uint pad;
};
QP_STATIC_ASSERT(sizeof(RowNorm) == 40, "RowNorm layout");

// y = x / sqrt(mean(x^2) + eps) * w
QP_KERNEL rms_norm(RowNorm p) {
    qp_grid_begin();
    QP_SHARED float part[QP_SIMDS];
    ulong r = QP_GROUP_X;
    uint tid = QP_TID;
    QP_GLOBAL const float* x = p.x + r * p.dim;
    QP_GLOBAL float* y = p.y + r * p.dim;
    float ss = 0.0f;
    for (uint i = tid; i < p.dim; i += QP_TG) {
        float v = x[i];
        ss += v * v;
    }
    ss = qp_simd_sum(ss);
    if (QP_LANE == 0) {
        part[QP_SIMD_ID] = ss;
    }
    QP_BARRIER();
    float total = 0.0f;
    for (uint i = 0; i < QP_SIMDS; i++) {
        total += part[i];
    }
    float inv = qp_rsqrt(total / float(p.dim) + p.eps);
    for (uint i = tid; i < p.dim; i += QP_TG) {
        y[i] = x[i] * inv * p.w[i];
    }
}
