// Matrix-vector products on MLX affine-quantized and dense weights.
//
// y[v][r] = sum_i W[r][i] * x[v][i] for every row r < rows and input vector
// v < n. One simdgroup computes one row (QP_TG / QP_SIMD rows per
// threadgroup); threadgroup (x, y) = (row block, vector). Quantized element i
// of a row dequantizes to s*q + b with s, b of group i / group_size.

struct QGemv {
    ulong w_off;  // byte offset of row 0 of the packed weight (even)
    ulong s_off;  // byte offset of the scales [rows][cols/group] (even)
    ulong b_off;  // byte offset of the biases, same shape and type
    ulong x_off;  // byte offset of x [n][cols] float32
    ulong y_off;  // byte offset of y [n][rows] float32
    uint rows;
    uint cols;
    uint group;   // quantization group size (32, 64, 128); unused for dense
    uint stype;   // type of scales and biases, or of the dense elements
    uint bits;    // 2..8; 0 for dense
    uint pad;
};

// 4-bit: each 32-bit word holds 8 elements, low nibble first. Lane l takes
// words l, l+32, ...: a word never straddles a group (groups are >= 32).
kernel void gemv_q4(device const uchar* wb [[buffer(0)]],
                    device const uchar* sb [[buffer(1)]],
                    device const uchar* bb [[buffer(2)]],
                    device const uchar* xb [[buffer(3)]],
                    device uchar* yb [[buffer(4)]],
                    constant QGemv& p [[buffer(5)]],
                    uint3 tgid [[threadgroup_position_in_grid]],
                    uint sg [[simdgroup_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]]) {
    uint row = tgid.x * QP_SIMDS + sg;
    if (row >= p.rows) {
        return;
    }
    ulong v = tgid.y;
    ulong sbase = ulong(row) * (p.cols / p.group);
    device const uchar* w = wb + p.w_off + ulong(row) * (p.cols / 2);
    device const float* x = (device const float*)(xb + p.x_off) + v * p.cols;
    float acc = 0.0f;
    uint words = p.cols / 8;
    for (uint i = lane; i < words; i += QP_SIMD) {
        uint q = qp_load_u32(w, ulong(i) * 4);
        ulong gi = sbase + (i * 8) / p.group;
        float s = qp_load_float(sb, p.s_off, gi, p.stype);
        float b = qp_load_float(bb, p.b_off, gi, p.stype);
        device const float* xs = x + i * 8;
        float dot = 0.0f;
        float xsum = 0.0f;
        for (uint k = 0; k < 8; k++) {
            float xv = xs[k];
            dot += float((q >> (4 * k)) & 0xfu) * xv;
            xsum += xv;
        }
        acc += s * dot + b * xsum;
    }
    acc = simd_sum(acc);
    if (lane == 0) {
        ((device float*)(yb + p.y_off))[v * p.rows + row] = acc;
    }
}

// 8-bit: each 32-bit word holds 4 elements, lowest byte first.
kernel void gemv_q8(device const uchar* wb [[buffer(0)]],
                    device const uchar* sb [[buffer(1)]],
                    device const uchar* bb [[buffer(2)]],
                    device const uchar* xb [[buffer(3)]],
                    device uchar* yb [[buffer(4)]],
                    constant QGemv& p [[buffer(5)]],
                    uint3 tgid [[threadgroup_position_in_grid]],
                    uint sg [[simdgroup_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]]) {
    uint row = tgid.x * QP_SIMDS + sg;
    if (row >= p.rows) {
        return;
    }
    ulong v = tgid.y;
    ulong sbase = ulong(row) * (p.cols / p.group);
    device const uchar* w = wb + p.w_off + ulong(row) * p.cols;
    device const float* x = (device const float*)(xb + p.x_off) + v * p.cols;
    float acc = 0.0f;
    uint words = p.cols / 4;
    for (uint i = lane; i < words; i += QP_SIMD) {
        uint q = qp_load_u32(w, ulong(i) * 4);
        ulong gi = sbase + (i * 4) / p.group;
        float s = qp_load_float(sb, p.s_off, gi, p.stype);
        float b = qp_load_float(bb, p.b_off, gi, p.stype);
        device const float* xs = x + i * 4;
        float dot = 0.0f;
        float xsum = 0.0f;
        for (uint k = 0; k < 4; k++) {
            float xv = xs[k];
            dot += float((q >> (8 * k)) & 0xffu) * xv;
            xsum += xv;
        }
        acc += s * dot + b * xsum;
    }
    acc = simd_sum(acc);
    if (lane == 0) {
        ((device float*)(yb + p.y_off))[v * p.rows + row] = acc;
    }
}

// Any width from 2 to 8 bits (used for 2, 3, 5 and 6): a row is one
// little-endian bit stream, element i at bits [i*bits, (i+1)*bits). Eight
// consecutive elements take exactly `bits` bytes, read bytewise (so this
// kernel accepts any alignment); lane l takes chunks l, l+32, ...
kernel void gemv_qn(device const uchar* wb [[buffer(0)]],
                    device const uchar* sb [[buffer(1)]],
                    device const uchar* bb [[buffer(2)]],
                    device const uchar* xb [[buffer(3)]],
                    device uchar* yb [[buffer(4)]],
                    constant QGemv& p [[buffer(5)]],
                    uint3 tgid [[threadgroup_position_in_grid]],
                    uint sg [[simdgroup_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]]) {
    uint row = tgid.x * QP_SIMDS + sg;
    if (row >= p.rows) {
        return;
    }
    ulong v = tgid.y;
    ulong sbase = ulong(row) * (p.cols / p.group);
    device const uchar* w = wb + p.w_off + ulong(row) * (ulong(p.cols) * p.bits / 8);
    device const float* x = (device const float*)(xb + p.x_off) + v * p.cols;
    uint mask = (1u << p.bits) - 1u;
    float acc = 0.0f;
    uint chunks = p.cols / 8;
    for (uint c = lane; c < chunks; c += QP_SIMD) {
        device const uchar* cp = w + ulong(c) * p.bits;
        ulong stream = 0;
        for (uint j = 0; j < p.bits; j++) {
            stream |= ulong(cp[j]) << (8 * j);
        }
        ulong gi = sbase + (c * 8) / p.group;
        float s = qp_load_float(sb, p.s_off, gi, p.stype);
        float b = qp_load_float(bb, p.b_off, gi, p.stype);
        device const float* xs = x + c * 8;
        float dot = 0.0f;
        float xsum = 0.0f;
        for (uint k = 0; k < 8; k++) {
            float xv = xs[k];
            dot += float(uint(stream >> (k * p.bits)) & mask) * xv;
            xsum += xv;
        }
        acc += s * dot + b * xsum;
    }
    acc = simd_sum(acc);
    if (lane == 0) {
        ((device float*)(yb + p.y_off))[v * p.rows + row] = acc;
    }
}

// Dense weights of type stype (float32, float16 or bfloat16), row-major.
kernel void gemv_dense(device const uchar* wb [[buffer(0)]],
                       device const uchar* sb [[buffer(1)]],
                       device const uchar* bb [[buffer(2)]],
                       device const uchar* xb [[buffer(3)]],
                       device uchar* yb [[buffer(4)]],
                       constant QGemv& p [[buffer(5)]],
                       uint3 tgid [[threadgroup_position_in_grid]],
                       uint sg [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]]) {
    uint row = tgid.x * QP_SIMDS + sg;
    if (row >= p.rows) {
        return;
    }
    ulong v = tgid.y;
    ulong esize = p.stype == QP_F32 ? 4 : 2;
    ulong roff = p.w_off + ulong(row) * p.cols * esize;
    device const float* x = (device const float*)(xb + p.x_off) + v * p.cols;
    float acc = 0.0f;
    for (uint i = lane; i < p.cols; i += QP_SIMD) {
        acc += qp_load_float(wb, roff, i, p.stype) * x[i];
    }
    acc = simd_sum(acc);
    if (lane == 0) {
        ((device float*)(yb + p.y_off))[v * p.rows + row] = acc;
    }
}
