// Row normalizations. One threadgroup of QP_TG threads per row; row r of x
// starts at x + r*x_stride (so the per-head q/k norms can run inside q_proj's
// interleaved output), row r of y at y + r*y_stride. In place (x == y) is
// allowed: every thread reads its elements before the barrier and writes
// only those elements after it.

struct RowNorm {
    ulong x_off;   // float32 rows
    ulong w_off;   // float32 weight [dim] (rms_norm, gated_rms_norm)
    ulong z_off;   // float32 gate rows (gated_rms_norm)
    ulong y_off;   // float32 output rows
    uint rows;
    uint dim;
    uint x_stride;
    uint y_stride;
    uint z_stride;
    uint pad;
    float eps;
    float scale;   // l2_norm: multiplies the result
};

// y = x / sqrt(mean(x^2) + eps) * w
kernel void rms_norm(device const uchar* xb [[buffer(0)]],
                     device const uchar* wb [[buffer(1)]],
                     device const uchar* zb [[buffer(2)]],
                     device uchar* yb [[buffer(3)]],
                     constant RowNorm& p [[buffer(4)]],
                     uint3 tgid [[threadgroup_position_in_grid]],
                     uint tid [[thread_index_in_threadgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]]) {
    ulong r = tgid.x;
    device const float* x = (device const float*)(xb + p.x_off) + r * p.x_stride;
    device const float* w = (device const float*)(wb + p.w_off);
    device float* y = (device float*)(yb + p.y_off) + r * p.y_stride;
    float ss = 0.0f;
    for (uint i = tid; i < p.dim; i += QP_TG) {
        float v = x[i];
        ss += v * v;
    }
    ss = simd_sum(ss);
    threadgroup float part[QP_SIMDS];
    if (lane == 0) {
        part[sg] = ss;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint i = 0; i < QP_SIMDS; i++) {
        total += part[i];
    }
    float inv = rsqrt(total / float(p.dim) + p.eps);
    for (uint i = tid; i < p.dim; i += QP_TG) {
        y[i] = x[i] * inv * w[i];
    }
}

// The Gated DeltaNet output norm: y = x / sqrt(mean(x^2) + eps) * w * silu(z)
kernel void gated_rms_norm(device const uchar* xb [[buffer(0)]],
                           device const uchar* wb [[buffer(1)]],
                           device const uchar* zb [[buffer(2)]],
                           device uchar* yb [[buffer(3)]],
                           constant RowNorm& p [[buffer(4)]],
                           uint3 tgid [[threadgroup_position_in_grid]],
                           uint tid [[thread_index_in_threadgroup]],
                           uint sg [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]]) {
    ulong r = tgid.x;
    device const float* x = (device const float*)(xb + p.x_off) + r * p.x_stride;
    device const float* w = (device const float*)(wb + p.w_off);
    device const float* z = (device const float*)(zb + p.z_off) + r * p.z_stride;
    device float* y = (device float*)(yb + p.y_off) + r * p.y_stride;
    float ss = 0.0f;
    for (uint i = tid; i < p.dim; i += QP_TG) {
        float v = x[i];
        ss += v * v;
    }
    ss = simd_sum(ss);
    threadgroup float part[QP_SIMDS];
    if (lane == 0) {
        part[sg] = ss;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint i = 0; i < QP_SIMDS; i++) {
        total += part[i];
    }
    float inv = rsqrt(total / float(p.dim) + p.eps);
    for (uint i = tid; i < p.dim; i += QP_TG) {
        y[i] = x[i] * inv * w[i] * qp_silu(z[i]);
    }
}

// The Gated DeltaNet q/k normalization: y = x / sqrt(sum(x^2) + eps) * scale
kernel void l2_norm(device const uchar* xb [[buffer(0)]],
                    device const uchar* wb [[buffer(1)]],
                    device const uchar* zb [[buffer(2)]],
                    device uchar* yb [[buffer(3)]],
                    constant RowNorm& p [[buffer(4)]],
                    uint3 tgid [[threadgroup_position_in_grid]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint sg [[simdgroup_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]]) {
    ulong r = tgid.x;
    device const float* x = (device const float*)(xb + p.x_off) + r * p.x_stride;
    device float* y = (device float*)(yb + p.y_off) + r * p.y_stride;
    float ss = 0.0f;
    for (uint i = tid; i < p.dim; i += QP_TG) {
        float v = x[i];
        ss += v * v;
    }
    ss = simd_sum(ss);
    threadgroup float part[QP_SIMDS];
    if (lane == 0) {
        part[sg] = ss;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint i = 0; i < QP_SIMDS; i++) {
        total += part[i];
    }
    float inv = rsqrt(total + p.eps) * p.scale;
    for (uint i = tid; i < p.dim; i += QP_TG) {
        y[i] = x[i] * inv;
    }
}
