// CUDA only (tensor cores: no Metal twin). Batched products for n > 1 input
// vectors (prefill, an expert chosen by several tokens):
//
//   Y[v][r] = sum_k X[v][k] * W[r][k]   for v < n, r < rows   (Y = X Wᵀ)
//
// X is float32 [n][cols]; W is MLX affine-quantized (4 or 8 bits; element
// k of row r is s*q + b with s, b of group k / group) or dense
// (bf16/f16/f32), row-major [rows][cols]; Y is float32 with row stride ldy.
//
// gemm_q4, gemm_q8, gemm_bf16, gemm_f16, gemm_f32: tensor cores
// (mma.sync m16n8k16, bf16 inputs, float32 accumulation). A group of 256
// threads computes a 128 x 128 tile of Y (128 vectors x 128 weight rows);
// its 8 warps each compute 64 x 32 of it (warp w: vectors 64*(w&1) ..,
// rows 32*(w>>1) ..), as 4 x 4 mma tiles of 16 x 8. K advances 32 columns
// at a time: the X tile (128 x 32, converted to bf16) and the W tile
// (128 x 32, dequantized in float32, rounded to bf16) are written to shared
// memory, double buffered; the global loads of step k+1 are issued into
// registers before the mma of step k, so their latency overlaps it.
// Preconditions (the host checks them): cols % 32 == 0; w and x 16-byte
// aligned (then so is every row start); for the quantized kernels every
// 32-column chunk lies in one quantization group (groups are 32, 64, 128).
//
// gemm_fma: the fallback for every other shape (any cols, any alignment,
// 2..8 bits): float32 FMA, 64 x 64 tiles, 4 x 4 outputs per thread.
//
// gemm_bf16_bf16: the rate baseline of the benchmark (BenchmarkGemmRate):
// the same tensor-core kernel with X already bf16 [n][cols], so it measures
// the mma pipeline without the conversions.
//
// Accuracy (tensor-core kernels): x and w are rounded to bf16 (8
// significant bits, relative error <= 2^-9 each), products are exact and
// sums are float32, so |y - y_exact| <= (2^-8 + 2^-18 + c*2^-24) *
// sum_k |w_rk x_vk| with c about cols/16 (the float32 additions of the mma
// chain). Each output is computed by one thread in a fixed order (no
// atomics, no split over K): the same inputs give the same bits.

struct QGemm {
    const uchar* w; // packed weight or dense elements, row-major [rows][cols]
    const uchar* s; // scales [rows][cols/group] (quantized)
    const uchar* b; // biases, same shape and type
    const float* x; // [n][cols] float32 (bf16 for gemm_bf16_bf16)
    float* y;       // [n][ldy]; columns [0, rows) written
    uint n;         // vectors
    uint rows;
    uint cols;
    uint group;     // quantization group size; unused for dense
    uint stype;     // type of scales and biases, or of the dense elements
    uint bits;      // 2..8; 0 for dense
    uint ldy;       // row stride of y in floats (>= rows)
    uint pad;
};
QP_STATIC_ASSERT(sizeof(QGemm) == 72, "QGemm layout");

#define QP_GM_BM 128 // vectors (rows of X and Y) per group of threads
#define QP_GM_BN 128 // weight rows (columns of Y) per group of threads
#define QP_GM_BK 32  // columns of X and W per step
// Shared tiles hold bf16 pairs in 32-bit words, row-major: 16 words of data
// per row, padded to 20 so that the fragment loads (8 rows x 4 words per
// warp) hit 32 distinct banks: 20*g + t mod 32 is distinct for g < 8, t < 4.
#define QP_GM_LD 20
#define QP_GM_TILE (QP_GM_BM * QP_GM_LD) // words per tile (BM == BN)
// Pointers into shared memory are plain (generic) pointers: in CUDA
// QP_SHARED is a storage class, not a qualifier of what a pointer points to.

struct alignas(8) qp_gm_uint2 { uint x, y; };

// float(q) for 0 <= q < 2^23, exact, without the int-to-float unit (2^23 +
// q has q in its mantissa); as 20_gemv.cu's, kept here so this file
// depends on 10_common.cu only.
QP_DEVICE float qp_gm_small_float(uint q) { return qp_as_float(0x4B000000u | q) - 8388608.0f; }

// The only inline PTX. The host emulator of these kernels (cuda/testdata/emu,
// gemm_emu_test.go) defines QP_HOST_EMULATION and its own versions of the
// two functions, following the same definitions.
#ifndef QP_HOST_EMULATION
// {lo, hi} rounded to nearest-even bf16 and packed: lo in bits 0..15 (the
// element of the lower column), hi in bits 16..31. PTX cvt.rn.bf16x2.f32
// d, a, b puts a in the upper half and b in the lower.
QP_DEVICE uint qp_pack_bf16(float lo, float hi) {
    uint d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// D = A*B + D for one 16x8x16 tile: A 16x16 row-major, B 16x8 column-major,
// bf16 inputs, float32 accumulators, per the PTX ISA's fragment layouts for
// mma.m16n8k16 (lane = 4*g + t, g = lane>>2, t = lane&3; each register holds
// two bf16, the lower column in the low half):
//   a[0] = A[g][2t, 2t+1]    a[1] = A[g+8][2t, 2t+1]
//   a[2] = A[g][2t+8, +9]    a[3] = A[g+8][2t+8, +9]
//   b[0] = B[2t, 2t+1][g]    b[1] = B[2t+8, 2t+9][g]
//   c[0], c[1] = C[g][2t, 2t+1]    c[2], c[3] = C[g+8][2t, 2t+1]
QP_DEVICE void qp_mma_bf16(float* c, const uint* a, const uint* b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif // QP_HOST_EMULATION

// Kinds of W for the tensor-core kernel.
#define QP_GM_Q4 4
#define QP_GM_Q8 8
#define QP_GM_BF16 16
#define QP_GM_F16 17
#define QP_GM_F32 32

// One thread's share of a step's global loads, held in registers between
// the load and the store to shared memory.
//   X (float32): 4 float4: rows tid/8 + 32j, columns 4*(tid%8) .. +3.
//   X (bf16):    2 uint4:  rows tid/4 + 64j, columns 8*(tid%4) .. +7.
//   W: row tid/2, columns 16*(tid%2) .. +15: 8 bytes at 4 bits (in xw[0].x,
//   .y), 16 at 8 bits, 32 for bf16/f16, 64 for f32; with its scale and bias.
struct QpGmRegs {
    qp_float4 xf[4];
    qp_uint4 xh[2];
    qp_uint4 xw[4];
    float s, b;
};

template <int WK, bool XH>
QP_DEVICE void qp_gm_load(const QGemm& p, uint m0, uint n0, uint k0, QpGmRegs& R) {
    uint tid = QP_TID;
    if (XH) {
        QP_UNROLL
        for (uint j = 0; j < 2; j++) {
            ulong v = QP_MIN(m0 + tid / 4 + 64 * j, p.n - 1); // clamped: computed, never stored
            QP_GLOBAL const uchar* src = (QP_GLOBAL const uchar*)p.x + (v * p.cols + k0 + 8 * (tid % 4)) * 2;
            R.xh[j] = qp_load_uint4(src);
        }
    } else {
        QP_UNROLL
        for (uint j = 0; j < 4; j++) {
            ulong v = QP_MIN(m0 + tid / 8 + 32 * j, p.n - 1);
            R.xf[j] = qp_load_float4(p.x + v * p.cols + k0 + 4 * (tid % 8));
        }
    }
    ulong r = QP_MIN(n0 + tid / 2, p.rows - 1);
    ulong k = k0 + 16 * (tid % 2);
    if (WK == QP_GM_Q4) {
        const qp_gm_uint2 q = *(QP_GLOBAL const qp_gm_uint2*)(p.w + r * (p.cols / 2) + k / 2);
        R.xw[0].x = q.x;
        R.xw[0].y = q.y;
    } else if (WK == QP_GM_Q8) {
        R.xw[0] = qp_load_uint4(p.w + r * p.cols + k);
    } else if (WK == QP_GM_BF16 || WK == QP_GM_F16) {
        QP_GLOBAL const uchar* src = p.w + (r * p.cols + k) * 2;
        R.xw[0] = qp_load_uint4(src);
        R.xw[1] = qp_load_uint4(src + 16);
    } else {
        QP_GLOBAL const uchar* src = p.w + (r * p.cols + k) * 4;
        QP_UNROLL
        for (uint j = 0; j < 4; j++) {
            R.xw[j] = qp_load_uint4(src + 16 * j);
        }
    }
    if (WK == QP_GM_Q4 || WK == QP_GM_Q8) {
        ulong gi = r * (p.cols / p.group) + k0 / p.group;
        R.s = qp_load_float(p.s, gi, p.stype);
        R.b = qp_load_float(p.b, gi, p.stype);
    }
}

// Word j (elements 2j, 2j+1) of the thread's 16 W elements, as bf16 pair.
template <int WK>
QP_DEVICE uint qp_gm_wpair(const QpGmRegs& R, uint j) {
    if (WK == QP_GM_Q4) {
        uint word = j < 4 ? R.xw[0].x : R.xw[0].y; // 8 nibbles per word
        uint sh = 8 * (j % 4);
        float lo = R.s * qp_gm_small_float((word >> sh) & 15u) + R.b;
        float hi = R.s * qp_gm_small_float((word >> (sh + 4)) & 15u) + R.b;
        return qp_pack_bf16(lo, hi);
    } else if (WK == QP_GM_Q8) {
        uint word = j < 2 ? R.xw[0].x : j < 4 ? R.xw[0].y : j < 6 ? R.xw[0].z : R.xw[0].w;
        uint sh = 16 * (j % 2);
        float lo = R.s * qp_gm_small_float((word >> sh) & 255u) + R.b;
        float hi = R.s * qp_gm_small_float((word >> (sh + 8)) & 255u) + R.b;
        return qp_pack_bf16(lo, hi);
    } else if (WK == QP_GM_BF16) {
        const qp_uint4& u = R.xw[j / 4];
        uint i = j % 4;
        return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w; // already bf16 pairs
    } else if (WK == QP_GM_F16) {
        const qp_uint4& u = R.xw[j / 4];
        uint i = j % 4;
        uint word = i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
        return qp_pack_bf16(qp_half_to_float(ushort(word & 0xffffu)), qp_half_to_float(ushort(word >> 16)));
    } else {
        const qp_uint4& u = R.xw[j / 2];
        bool first = j % 2 == 0;
        return qp_pack_bf16(qp_as_float(first ? u.x : u.z), qp_as_float(first ? u.y : u.w));
    }
}

template <int WK, bool XH>
QP_DEVICE void qp_gm_store(uint* xs, uint* ws, const QpGmRegs& R) {
    uint tid = QP_TID;
    if (XH) {
        QP_UNROLL
        for (uint j = 0; j < 2; j++) {
            *(qp_uint4*)(xs + (tid / 4 + 64 * j) * QP_GM_LD + 4 * (tid % 4)) = R.xh[j];
        }
    } else {
        QP_UNROLL
        for (uint j = 0; j < 4; j++) {
            qp_gm_uint2 h;
            h.x = qp_pack_bf16(R.xf[j].x, R.xf[j].y);
            h.y = qp_pack_bf16(R.xf[j].z, R.xf[j].w);
            *(qp_gm_uint2*)(xs + (tid / 8 + 32 * j) * QP_GM_LD + 2 * (tid % 8)) = h;
        }
    }
    qp_uint4 lo, hi;
    lo.x = qp_gm_wpair<WK>(R, 0);
    lo.y = qp_gm_wpair<WK>(R, 1);
    lo.z = qp_gm_wpair<WK>(R, 2);
    lo.w = qp_gm_wpair<WK>(R, 3);
    hi.x = qp_gm_wpair<WK>(R, 4);
    hi.y = qp_gm_wpair<WK>(R, 5);
    hi.z = qp_gm_wpair<WK>(R, 6);
    hi.w = qp_gm_wpair<WK>(R, 7);
    uint* dst = ws + (tid / 2) * QP_GM_LD + 8 * (tid % 2);
    *(qp_uint4*)dst = lo;
    *(qp_uint4*)(dst + 4) = hi;
}

template <int WK, bool XH>
QP_DEVICE void qp_gemm_mma(QGemm p) {
    // [buffer][X tile, W tile]: 2 * 2 * 128 * 20 words = 40 KiB.
    QP_SHARED qp_uint4 smem[2 * 2 * QP_GM_TILE / 4];
    uint* sm = (uint*)smem;
    uint m0 = QP_GROUP_X * QP_GM_BM;
    uint n0 = QP_GROUP_Y * QP_GM_BN;
    uint warp = QP_SIMD_ID;
    uint lane = QP_LANE;
    uint g = lane >> 2;
    uint t = lane & 3u;
    uint wm = 64 * (warp & 1u);  // warp's first vector in the tile
    uint wn = 32 * (warp >> 1);  // warp's first weight row in the tile

    float acc[4][4][4];
    QP_UNROLL
    for (uint i = 0; i < 4; i++) {
        QP_UNROLL
        for (uint j = 0; j < 4; j++) {
            QP_UNROLL
            for (uint e = 0; e < 4; e++) {
                acc[i][j][e] = 0.0f;
            }
        }
    }

    uint steps = p.cols / QP_GM_BK;
    QpGmRegs R;
    qp_gm_load<WK, XH>(p, m0, n0, 0, R);
    qp_gm_store<WK, XH>(sm, sm + QP_GM_TILE, R);
    QP_BARRIER();
    for (uint kt = 0; kt < steps; kt++) {
        // Issue the next step's global loads first (registers only).
        bool more = kt + 1 < steps; // uniform
        if (more) {
            qp_gm_load<WK, XH>(p, m0, n0, (kt + 1) * QP_GM_BK, R);
        }
        const uint* xs = sm + (kt & 1u) * 2 * QP_GM_TILE;
        const uint* ws = xs + QP_GM_TILE;
        QP_UNROLL
        for (uint ks = 0; ks < 2; ks++) { // two k16 halves of the 32 columns
            uint a[4][4];
            uint b[4][2];
            QP_UNROLL
            for (uint i = 0; i < 4; i++) {
                const uint* r0 = xs + (wm + 16 * i + g) * QP_GM_LD + 8 * ks + t;
                a[i][0] = r0[0];
                a[i][1] = r0[8 * QP_GM_LD];
                a[i][2] = r0[4];
                a[i][3] = r0[8 * QP_GM_LD + 4];
            }
            QP_UNROLL
            for (uint j = 0; j < 4; j++) {
                const uint* c0 = ws + (wn + 8 * j + g) * QP_GM_LD + 8 * ks + t;
                b[j][0] = c0[0];
                b[j][1] = c0[4];
            }
            QP_UNROLL
            for (uint i = 0; i < 4; i++) {
                QP_UNROLL
                for (uint j = 0; j < 4; j++) {
                    qp_mma_bf16(acc[i][j], a[i], b[j]);
                }
            }
        }
        // Fill the other buffer: its last readers (step kt-1) all passed
        // the barrier that ended step kt-1.
        if (more) {
            uint* nx = sm + ((kt + 1) & 1u) * 2 * QP_GM_TILE;
            qp_gm_store<WK, XH>(nx, nx + QP_GM_TILE, R);
        }
        QP_BARRIER();
    }

    QP_UNROLL
    for (uint i = 0; i < 4; i++) {
        QP_UNROLL
        for (uint j = 0; j < 4; j++) {
            uint c = n0 + wn + 8 * j + 2 * t;
            QP_UNROLL
            for (uint h = 0; h < 2; h++) {
                uint v = m0 + wm + 16 * i + g + 8 * h;
                if (v < p.n) {
                    QP_GLOBAL float* y = p.y + ulong(v) * p.ldy;
                    if (c < p.rows) {
                        y[c] = acc[i][j][2 * h];
                    }
                    if (c + 1 < p.rows) {
                        y[c + 1] = acc[i][j][2 * h + 1];
                    }
                }
            }
        }
    }
}

QP_KERNEL gemm_q4(QGemm p) { qp_gemm_mma<QP_GM_Q4, false>(p); }
QP_KERNEL gemm_q8(QGemm p) { qp_gemm_mma<QP_GM_Q8, false>(p); }
QP_KERNEL gemm_bf16(QGemm p) { qp_gemm_mma<QP_GM_BF16, false>(p); }
QP_KERNEL gemm_f16(QGemm p) { qp_gemm_mma<QP_GM_F16, false>(p); }
QP_KERNEL gemm_f32(QGemm p) { qp_gemm_mma<QP_GM_F32, false>(p); }
QP_KERNEL gemm_bf16_bf16(QGemm p) { qp_gemm_mma<QP_GM_BF16, true>(p); }

// ---- The FMA fallback.

#define QP_GF_BM 64 // vectors per group of threads
#define QP_GF_BN 64 // weight rows per group of threads
#define QP_GF_BK 16
// Floats per k row of the fallback's tiles: 64 padded to 68 (a multiple of
// 4, so float4 reads stay aligned) to spread the transposing stores over
// the banks.
#define QP_GF_LD 68

// Element k of weight row r, dequantized (any width 2..8: element k is
// bits [k*bits, (k+1)*bits) of the row's little-endian bit stream; the
// second byte is read only when the element reaches into it) or decoded.
QP_DEVICE float qp_gf_weight(const QGemm& p, ulong r, ulong k) {
    if (p.bits == 0) {
        return qp_load_float(p.w, r * p.cols + k, p.stype);
    }
    QP_GLOBAL const uchar* row = p.w + r * (ulong(p.cols) * p.bits / 8);
    ulong pos = k * p.bits;
    uint sh = uint(pos & 7u);
    uint q = row[pos >> 3];
    if (sh + p.bits > 8) {
        q |= uint(row[(pos >> 3) + 1]) << 8;
    }
    q = (q >> sh) & ((1u << p.bits) - 1u);
    ulong gi = r * (p.cols / p.group) + k / p.group;
    return qp_load_float(p.s, gi, p.stype) * float(q) + qp_load_float(p.b, gi, p.stype);
}

// Thread (tm, tn) = (tid/16, tid%16) computes vectors m0+4tm .. +3 x rows
// n0+4tn .. +3, summing over k in order. Tiles are stored k-major
// ([k][vector], [k][row]) so each k reads 4 consecutive values of each.
QP_KERNEL gemm_fma(QGemm p) {
    QP_SHARED qp_float4 xs4[QP_GF_BK * QP_GF_LD / 4];
    QP_SHARED qp_float4 ws4[QP_GF_BK * QP_GF_LD / 4];
    float* xs = (float*)xs4;
    float* ws = (float*)ws4;
    uint tid = QP_TID;
    uint m0 = QP_GROUP_X * QP_GF_BM;
    uint n0 = QP_GROUP_Y * QP_GF_BN;
    uint tm = tid / 16;
    uint tn = tid % 16;
    float acc[4][4];
    QP_UNROLL
    for (uint i = 0; i < 4; i++) {
        QP_UNROLL
        for (uint j = 0; j < 4; j++) {
            acc[i][j] = 0.0f;
        }
    }
    for (uint k0 = 0; k0 < p.cols; k0 += QP_GF_BK) {
        QP_UNROLL
        for (uint e = 0; e < 4; e++) {
            uint idx = tid + QP_TG * e; // 0 .. 1023
            uint a = idx / QP_GF_BK;    // vector (or row) in the tile
            uint kk = idx % QP_GF_BK;
            uint k = k0 + kk;
            float xv = 0.0f;
            float wv = 0.0f;
            if (k < p.cols) {
                if (m0 + a < p.n) {
                    xv = p.x[ulong(m0 + a) * p.cols + k];
                }
                if (n0 + a < p.rows) {
                    wv = qp_gf_weight(p, n0 + a, k);
                }
            }
            xs[kk * QP_GF_LD + a] = xv;
            ws[kk * QP_GF_LD + a] = wv;
        }
        QP_BARRIER();
        QP_UNROLL
        for (uint kk = 0; kk < QP_GF_BK; kk++) {
            qp_float4 xv = xs4[(kk * QP_GF_LD) / 4 + tm];
            qp_float4 wv = ws4[(kk * QP_GF_LD) / 4 + tn];
            float xa[4] = {xv.x, xv.y, xv.z, xv.w};
            float wa[4] = {wv.x, wv.y, wv.z, wv.w};
            QP_UNROLL
            for (uint i = 0; i < 4; i++) {
                QP_UNROLL
                for (uint j = 0; j < 4; j++) {
                    acc[i][j] += xa[i] * wa[j];
                }
            }
        }
        QP_BARRIER();
    }
    QP_UNROLL
    for (uint i = 0; i < 4; i++) {
        uint v = m0 + 4 * tm + i;
        if (v >= p.n) {
            continue;
        }
        QP_UNROLL
        for (uint j = 0; j < 4; j++) {
            uint c = n0 + 4 * tn + j;
            if (c < p.rows) {
                p.y[ulong(v) * p.ldy + c] = acc[i][j];
            }
        }
    }
}
