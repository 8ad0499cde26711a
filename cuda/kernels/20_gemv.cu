// Matrix-vector products on MLX affine-quantized and dense weights.
//
// y[v][r] = sum_i W[r][i] * x[v][i] for every row r < rows and input vector
// v < n. One simdgroup computes one row (QP_SIMDS rows per group of QP_TG
// threads); group (x, y) = (row block, vector). Quantized element i of a row
// dequantizes to s*q + b with s, b of group i / group_size, so a chunk of
// elements inside one group contributes s*sum(q*x) + b*sum(x).

struct QGemv {
    const uchar* w;   // packed weight (or dense elements), row-major
    const uchar* s;   // scales [rows][cols/group] (quantized)
    const uchar* b;   // biases, same shape and type
    const float* x;   // [n][cols]
    float* y;         // [n][rows]
    uint rows;
    uint cols;
    uint group;       // quantization group size (32, 64, 128); unused for dense
    uint stype;       // type of scales and biases, or of the dense elements
    uint bits;        // 2..8; 0 for dense
    uint pad;
};
QP_STATIC_ASSERT(sizeof(QGemv) == 64, "QGemv layout");

// The contribution of one 32-bit word of 32/bits elements (bits 4 or 8) at
// x: s*sum(q*x) + b*sum(x).
template <int BITS>
QP_DEVICE void qp_word(uint q, QP_GLOBAL const float* x, float& dot, float& xsum) {
    const int per = 32 / BITS;
    const uint mask = (1u << BITS) - 1u;
    for (int k = 0; k < per; k += 4) {
        qp_float4 xv = qp_load_float4(x + k);
        dot += float((q >> (BITS * k)) & mask) * xv.x;
        dot += float((q >> (BITS * (k + 1))) & mask) * xv.y;
        dot += float((q >> (BITS * (k + 2))) & mask) * xv.z;
        dot += float((q >> (BITS * (k + 3))) & mask) * xv.w;
        xsum += (xv.x + xv.y) + (xv.z + xv.w);
    }
}

// 4 and 8 bits: lane l takes 16-byte chunks l, l+32, ... of the row (32
// elements at 4 bits, 16 at 8): a chunk never straddles a group, since
// groups are >= 32 elements and multiples of the chunk.
template <int BITS>
QP_DEVICE void qp_gemv_q(QGemv p) {
    uint row = QP_GROUP_X * QP_SIMDS + QP_SIMD_ID;
    if (row >= p.rows) {
        return; // uniform per simdgroup
    }
    uint lane = QP_LANE;
    ulong v = QP_GROUP_Y;
    const uint per = 128 / BITS; // elements per chunk
    ulong groups = p.cols / p.group;
    QP_GLOBAL const uchar* w = p.w + ulong(row) * (ulong(p.cols) * BITS / 8);
    QP_GLOBAL const uchar* sp = p.s + ulong(row) * groups * (p.stype == QP_F32 ? 4 : 2);
    QP_GLOBAL const uchar* bp = p.b + ulong(row) * groups * (p.stype == QP_F32 ? 4 : 2);
    QP_GLOBAL const float* x = p.x + v * p.cols;
    float acc = 0.0f;
    uint chunks = p.cols / per;
    for (uint c = lane; c < chunks; c += QP_SIMD) {
        qp_uint4 q = qp_load_uint4(w + ulong(c) * 16);
        uint gi = (c * per) / p.group;
        float s = qp_load_float(sp, gi, p.stype);
        float b = qp_load_float(bp, gi, p.stype);
        QP_GLOBAL const float* xs = x + ulong(c) * per;
        const uint wper = 32 / BITS;
        float dot = 0.0f;
        float xsum = 0.0f;
        qp_word<BITS>(q.x, xs, dot, xsum);
        qp_word<BITS>(q.y, xs + wper, dot, xsum);
        qp_word<BITS>(q.z, xs + 2 * wper, dot, xsum);
        qp_word<BITS>(q.w, xs + 3 * wper, dot, xsum);
        acc += s * dot + b * xsum;
    }
    acc = qp_simd_sum(acc);
    if (lane == 0) {
        p.y[v * p.rows + row] = acc;
    }
}

QP_KERNEL gemv_q4(QGemv p) { qp_gemv_q<4>(p); }

QP_KERNEL gemv_q8(QGemv p) { qp_gemv_q<8>(p); }

// Any width from 2 to 8 bits (used for 2, 3, 5 and 6): a row is one
// little-endian bit stream, element i at bits [i*bits, (i+1)*bits). Eight
// consecutive elements take exactly `bits` bytes, read bytewise; lane l
// takes chunks l, l+32, ...
QP_KERNEL gemv_qn(QGemv p) {
    uint row = QP_GROUP_X * QP_SIMDS + QP_SIMD_ID;
    if (row >= p.rows) {
        return;
    }
    uint lane = QP_LANE;
    ulong v = QP_GROUP_Y;
    ulong groups = p.cols / p.group;
    ulong esize = p.stype == QP_F32 ? 4 : 2;
    QP_GLOBAL const uchar* w = p.w + ulong(row) * (ulong(p.cols) * p.bits / 8);
    QP_GLOBAL const uchar* sp = p.s + ulong(row) * groups * esize;
    QP_GLOBAL const uchar* bp = p.b + ulong(row) * groups * esize;
    QP_GLOBAL const float* x = p.x + v * p.cols;
    uint mask = (1u << p.bits) - 1u;
    float acc = 0.0f;
    uint chunks = p.cols / 8;
    for (uint c = lane; c < chunks; c += QP_SIMD) {
        QP_GLOBAL const uchar* cp = w + ulong(c) * p.bits;
        ulong stream = 0;
        for (uint j = 0; j < p.bits; j++) {
            stream |= ulong(cp[j]) << (8 * j);
        }
        uint gi = (c * 8) / p.group;
        float s = qp_load_float(sp, gi, p.stype);
        float b = qp_load_float(bp, gi, p.stype);
        QP_GLOBAL const float* xs = x + ulong(c) * 8;
        float dot = 0.0f;
        float xsum = 0.0f;
        for (uint k = 0; k < 8; k++) {
            float xv = xs[k];
            dot += float(uint(stream >> (k * p.bits)) & mask) * xv;
            xsum += xv;
        }
        acc += s * dot + b * xsum;
    }
    acc = qp_simd_sum(acc);
    if (lane == 0) {
        p.y[v * p.rows + row] = acc;
    }
}

// Dense weights of type stype (float32, float16 or bfloat16), row-major.
QP_KERNEL gemv_dense(QGemv p) {
    uint row = QP_GROUP_X * QP_SIMDS + QP_SIMD_ID;
    if (row >= p.rows) {
        return;
    }
    uint lane = QP_LANE;
    ulong v = QP_GROUP_Y;
    ulong esize = p.stype == QP_F32 ? 4 : 2;
    QP_GLOBAL const uchar* w = p.w + ulong(row) * p.cols * esize;
    QP_GLOBAL const float* x = p.x + v * p.cols;
    float acc = 0.0f;
    for (uint i = lane; i < p.cols; i += QP_SIMD) {
        acc += qp_load_float(w, i, p.stype) * x[i];
    }
    acc = qp_simd_sum(acc);
    if (lane == 0) {
        p.y[v * p.rows + row] = acc;
    }
}
