// CUDA only (tensor cores: no Metal twin). Batched products for n > 1 input
// vectors (prefill, an expert chosen by several tokens):
//
//   Y[v][r] = sum_k X[v][k] * W[r][k]   for v < n, r < rows   (Y = X Wᵀ)
//
// X is float32 [n][cols]; W is MLX affine-quantized (4 or 8 bits; element
// k of row r is s*q + b with s, b of group k / group) or dense
// (bf16/f16/f32), row-major [rows][cols]; Y is float32 with row stride ldy.
//
// Tensor-core kernels, two precisions of the same body:
//   gemm_q4, gemm_q8, gemm_bf16, gemm_f16, gemm_f32 (W 4-bit, 8-bit, dense):
//     tf32 inputs (mma.sync m16n8k8 .tf32, float32 accumulation);
//   gemm_q4_h, gemm_q8_h, gemm_bf16_h: bf16 inputs (mma.sync m16n8k16 .bf16),
//     twice the tensor rate, eight times the rounding error;
//   gemm_base: the bf16 kernel with X already bf16 [n][cols] and W dense
//     bf16, the benchmark's baseline (the mma pipeline without conversions).
// A group of 256 threads computes a 128 x 128 tile of Y (128 vectors x 128
// weight rows); its 8 warps each compute 64 x 32 of it (warp w: vectors
// 64*(w&1) .., rows 32*(w>>1) ..), as 4 x 4 mma tiles of 16 x 8. Each step
// covers 16 words of every row of both tiles (32 bf16 or 16 tf32 columns):
// the X tile (converted) and the W tile (dequantized in float32, then
// rounded) are written to shared memory, in two alternating buffers; the
// global loads of step s+1 are issued into registers before the mma of
// step s, so their latency overlaps it.
// Preconditions (the host checks them): cols % 32 == 0; w and x 16-byte
// aligned (then so is every row start); quantization groups of 32, 64 or
// 128 (so no step straddles two groups).
//
// gemm_fma: the fallback for every other shape (any cols, any alignment,
// 2..8 bits): float32 FMA, 64 x 64 tiles, 4 x 4 outputs per thread.
//
// Accuracy. The products of the rounded inputs are exact in float32 and
// summed in float32. tf32 keeps 11 significant bits (round to nearest:
// relative error <= 2^-11 for x and for w), so with S = sum_k |w_rk x_vk|
// the roundings give |y - y_exact| <= (2^-10 + 2^-22) * S = 9.77e-4 * S,
// and the float32 sums (cols/8 mma steps, each rounding, truncating at
// worst, a partial sum <= S) add <= (cols/8 + 3) * 2^-23 * S: 3.1e-5 * S at
// cols = 2048. The bound 1e-3 * S thus holds outright for cols <= 1500 and
// to within 1% at 2048; the errors have both signs, so ~1e-4 * S is what
// random inputs show. bf16 keeps 8 bits: (2^-7 + 2^-16) * S = 7.8e-3 * S
// worst case (~1e-3 * S seen on random inputs of few columns). Dense bf16
// and f16 weights are exact in tf32 (only x is rounded: 4.9e-4 * S).
// Each output is computed by one thread in a fixed order (no atomics, no
// split over K): the same inputs give the same bits.

struct QGemm {
    const uchar* w; // packed weight or dense elements, row-major [rows][cols]
    const uchar* s; // scales [rows][cols/group] (quantized)
    const uchar* b; // biases, same shape and type
    const float* x; // [n][cols] float32 (bf16 for gemm_base)
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

// Grouped products (a chunk's routed experts, prefill): one launch computes
// many products of one shape, each a tile of up to QP_GM_BM positions:
//
//   Y[yr(v)][r] = sum_k X[xr(v)][k] * W_t[r][k]   for v in [m0, m1) of tile t
//
// with xr(v) = xrow[v] and yr(v) = yrow[v] (each the identity where 0): the
// positions are the chunk's (token, expert) slots grouped by expert, xrow
// gathers a slot's token row, yrow scatters its output row, and each tile
// names its expert's matrix (w, s, b) and its output base y. Group (x, y) =
// (tile, block of QP_GM_BN weight rows). Each output is the tf32 kernel's
// arithmetic on the same row of X and W (the same bits as gemm_q4/gemm_q8
// of that expert on those vectors, whatever the tile holds besides).
struct QGemmTile {
    const uchar* w; // the tile's matrix: packed weight, scales, biases
    const uchar* s;
    const uchar* b;
    float* y;       // output base (rows yr(v) of stride ldy)
    uint m0;        // positions m0 .. m1-1, 0 < m1 - m0 <= QP_GM_BM
    uint m1;
};
QP_STATIC_ASSERT(sizeof(QGemmTile) == 40, "QGemmTile layout");

struct QGemmGroup {
    const QGemmTile* tiles; // [grid x]
    const float* x;         // input rows of cols floats
    const int* xrow;        // [positions] input row of each, or 0 (the identity)
    const int* yrow;        // [positions] output row of each, or 0 (the identity)
    uint rows;              // of every tile's matrix
    uint cols;
    uint group;
    uint stype;
    uint ldy;
    uint pad;
};
QP_STATIC_ASSERT(sizeof(QGemmGroup) == 56, "QGemmGroup layout");

// What one group of the tensor-core kernel computes: positions m0 .. m1-1
// (input row xr(v), output row yr(v)) times the weight rows from n0 of
// (w, s, b). gemm_* take positions QP_GROUP_X * QP_GM_BM .. n (identity
// rows), gemm_group_* their tile's.
struct QpGmView {
    const uchar* w;
    const uchar* s;
    const uchar* b;
    const float* x;
    float* y;
    const int* xrow;
    const int* yrow;
    uint m0, m1;
    uint rows, cols, group, stype, ldy;
};

#define QP_GM_BM 128 // vectors (rows of X and Y) per group of threads
#define QP_GM_BN 128 // weight rows (columns of Y) per group of threads
#define QP_GM_BK 32  // the host's column multiple (a bf16 step; two tf32 steps)
// Shared tiles are rows of 32-bit words (a bf16 pair, lower column in the
// low half, or one tf32): 16 words of data per row and step, padded to 20
// so that a warp's fragment loads (8 rows x 4 words) hit 32 distinct
// banks: 20*g + t mod 32 is distinct for g < 8, t < 4.
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
// gemm_emu_test.go) defines QP_HOST_EMULATION and its own versions of
// these four functions, following the same definitions.
#ifndef QP_HOST_EMULATION
// {lo, hi} rounded to nearest-even bf16 and packed: lo in bits 0..15 (the
// element of the lower column), hi in bits 16..31. PTX cvt.rn.bf16x2.f32
// d, a, b puts a in the upper half and b in the lower.
QP_DEVICE uint qp_pack_bf16(float lo, float hi) {
    uint d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// f rounded to tf32 (nearest, ties away from zero): a float32 whose low 13
// mantissa bits are zero.
QP_DEVICE uint qp_tf32(float f) {
    uint d;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(d) : "f"(f));
    return d;
}

// D = A*B + D for one 16x8x16 tile: A 16x16 row-major, B 16x8 column-major,
// bf16 inputs, float32 accumulators, per the PTX ISA's fragment layouts for
// mma.m16n8k16 (PTX ISA 9.7.14.5.8; m16n8k8 .tf32 below: 9.7.14.5.7), with
// lane = 4*g + t, g = lane>>2, t = lane&3, each register holding two bf16,
// the lower column in the low half:
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

// D = A*B + D for one 16x8x8 tile, tf32 inputs (one per register), per the
// PTX ISA's layouts for mma.m16n8k8 .tf32:
//   a[0] = A[g][t]    a[1] = A[g+8][t]    a[2] = A[g][t+4]    a[3] = A[g+8][t+4]
//   b[0] = B[t][g]    b[1] = B[t+4][g]
//   c as for m16n8k16.
// Word for word, these are the registers the bf16 fragments take from the
// same shared-memory words (a word holds one tf32 column instead of two
// bf16 columns), so one fragment loader serves both.
QP_DEVICE void qp_mma_tf32(float* c, const uint* a, const uint* b) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif // QP_HOST_EMULATION

// Kinds of W for the tensor-core kernel (template parameter WK).
#define QP_GM_Q4 4
#define QP_GM_Q8 8
#define QP_GM_BF16 16
#define QP_GM_F16 17
#define QP_GM_F32 32
// Input precisions (template parameter PREC); QP_GM_BASE: bf16 with X
// given in bf16.
#define QP_GM_TF32 0
#define QP_GM_H 1
#define QP_GM_BASE 2

// Bits per W element of each kind.
#define QP_GM_WBITS(WK) ((WK) == QP_GM_Q4 ? 4 : (WK) == QP_GM_Q8 ? 8 : (WK) == QP_GM_F32 ? 32 : 16)

// One thread's share of a step's global loads, held in registers between
// the load and the store to shared memory. Per step a row of a tile is 16
// words: E = 32 elements (bf16) or 16 (tf32).
//   X float32, bf16: 4 float4, rows tid/8 + 32j, columns 4*(tid%8) .. +3.
//   X float32, tf32: 2 float4, rows tid/4 + 64j, columns 4*(tid%4) .. +3.
//   X bf16 (base):   2 uint4,  rows tid/4 + 64j, columns 8*(tid%4) .. +7.
//   W: row tid/2, elements E/2*(tid%2) .. +E/2-1 of the step: E/2 * bits / 32
//   words (1 .. 8) in wv, with the row's scale and bias for the step.
struct QpGmRegs {
    qp_float4 xf[4];
    qp_uint4 xh[2];
    uint wv[8];
    float s, b;
};

// The input rows of the thread's share of the X tile (qp_gm_load's rows,
// clamped to the last position: computed, never stored), found once.
template <int PREC>
QP_DEVICE void qp_gm_xrows(const QpGmView& p, uint xr[4]) {
    uint tid = QP_TID;
    const uint n = PREC == QP_GM_H ? 4 : 2; // rows a thread loads
    QP_UNROLL
    for (uint j = 0; j < n; j++) {
        uint v = PREC == QP_GM_H ? p.m0 + tid / 8 + 32 * j : p.m0 + tid / 4 + 64 * j;
        v = QP_MIN(v, p.m1 - 1);
        xr[j] = p.xrow != 0 ? uint(p.xrow[v]) : v;
    }
}

template <int WK, int PREC>
QP_DEVICE void qp_gm_load(const QpGmView& p, const uint xr[4], uint n0, uint k0, QpGmRegs& R) {
    const uint E = PREC == QP_GM_TF32 ? 16 : 32; // columns per step
    uint tid = QP_TID;
    if (PREC == QP_GM_BASE) {
        QP_UNROLL
        for (uint j = 0; j < 2; j++) {
            QP_GLOBAL const uchar* src = (QP_GLOBAL const uchar*)p.x + (ulong(xr[j]) * p.cols + k0 + 8 * (tid % 4)) * 2;
            R.xh[j] = qp_load_uint4(src);
        }
    } else if (PREC == QP_GM_H) {
        QP_UNROLL
        for (uint j = 0; j < 4; j++) {
            R.xf[j] = qp_load_float4(p.x + ulong(xr[j]) * p.cols + k0 + 4 * (tid % 8));
        }
    } else {
        QP_UNROLL
        for (uint j = 0; j < 2; j++) {
            R.xf[j] = qp_load_float4(p.x + ulong(xr[j]) * p.cols + k0 + 4 * (tid % 4));
        }
    }
    const uint words = E / 2 * QP_GM_WBITS(WK) / 32; // 1, 2, 4 or 8
    QP_STATIC_ASSERT(words >= 1 && words <= 8, "W words per thread and step");
    ulong r = QP_MIN(n0 + tid / 2, p.rows - 1);
    ulong k = k0 + E / 2 * (tid % 2);
    QP_GLOBAL const uchar* src = p.w + (r * p.cols + k) * QP_GM_WBITS(WK) / 8;
    if (words == 1) {
        R.wv[0] = *(QP_GLOBAL const uint*)src;
    } else if (words == 2) {
        qp_gm_uint2 u = *(QP_GLOBAL const qp_gm_uint2*)src;
        R.wv[0] = u.x;
        R.wv[1] = u.y;
    } else {
        QP_UNROLL
        for (uint j = 0; j < words / 4; j++) {
            qp_uint4 u = qp_load_uint4(src + 16 * j);
            R.wv[4 * j] = u.x;
            R.wv[4 * j + 1] = u.y;
            R.wv[4 * j + 2] = u.z;
            R.wv[4 * j + 3] = u.w;
        }
    }
    if (WK == QP_GM_Q4 || WK == QP_GM_Q8) {
        ulong gi = r * (p.cols / p.group) + k0 / p.group;
        R.s = qp_load_float(p.s, gi, p.stype);
        R.b = qp_load_float(p.b, gi, p.stype);
    }
}

// Element j of the thread's W elements of the step, dequantized or decoded
// to float32.
template <int WK>
QP_DEVICE float qp_gm_welem(const QpGmRegs& R, uint j) {
    if (WK == QP_GM_Q4) {
        return R.s * qp_gm_small_float((R.wv[j / 8] >> (4 * (j % 8))) & 15u) + R.b;
    } else if (WK == QP_GM_Q8) {
        return R.s * qp_gm_small_float((R.wv[j / 4] >> (8 * (j % 4))) & 255u) + R.b;
    } else if (WK == QP_GM_BF16) {
        return qp_as_float(((R.wv[j / 2] >> (16 * (j % 2))) & 0xffffu) << 16);
    } else if (WK == QP_GM_F16) {
        return qp_half_to_float(ushort((R.wv[j / 2] >> (16 * (j % 2))) & 0xffffu));
    } else {
        return qp_as_float(R.wv[j]);
    }
}

// Word i (< 8) of the thread's half row of the W tile.
template <int WK, int PREC>
QP_DEVICE uint qp_gm_wword(const QpGmRegs& R, uint i) {
    if (PREC == QP_GM_TF32) {
        return qp_tf32(qp_gm_welem<WK>(R, i));
    }
    if (WK == QP_GM_BF16) {
        return R.wv[i]; // already bf16 pairs, lower column low
    }
    return qp_pack_bf16(qp_gm_welem<WK>(R, 2 * i), qp_gm_welem<WK>(R, 2 * i + 1));
}

template <int WK, int PREC>
QP_DEVICE void qp_gm_store(uint* xs, uint* ws, const QpGmRegs& R) {
    uint tid = QP_TID;
    if (PREC == QP_GM_BASE) {
        QP_UNROLL
        for (uint j = 0; j < 2; j++) {
            *(qp_uint4*)(xs + (tid / 4 + 64 * j) * QP_GM_LD + 4 * (tid % 4)) = R.xh[j];
        }
    } else if (PREC == QP_GM_H) {
        QP_UNROLL
        for (uint j = 0; j < 4; j++) {
            qp_gm_uint2 h;
            h.x = qp_pack_bf16(R.xf[j].x, R.xf[j].y);
            h.y = qp_pack_bf16(R.xf[j].z, R.xf[j].w);
            *(qp_gm_uint2*)(xs + (tid / 8 + 32 * j) * QP_GM_LD + 2 * (tid % 8)) = h;
        }
    } else {
        QP_UNROLL
        for (uint j = 0; j < 2; j++) {
            qp_uint4 h;
            h.x = qp_tf32(R.xf[j].x);
            h.y = qp_tf32(R.xf[j].y);
            h.z = qp_tf32(R.xf[j].z);
            h.w = qp_tf32(R.xf[j].w);
            *(qp_uint4*)(xs + (tid / 4 + 64 * j) * QP_GM_LD + 4 * (tid % 4)) = h;
        }
    }
    qp_uint4 lo, hi;
    lo.x = qp_gm_wword<WK, PREC>(R, 0);
    lo.y = qp_gm_wword<WK, PREC>(R, 1);
    lo.z = qp_gm_wword<WK, PREC>(R, 2);
    lo.w = qp_gm_wword<WK, PREC>(R, 3);
    hi.x = qp_gm_wword<WK, PREC>(R, 4);
    hi.y = qp_gm_wword<WK, PREC>(R, 5);
    hi.z = qp_gm_wword<WK, PREC>(R, 6);
    hi.w = qp_gm_wword<WK, PREC>(R, 7);
    uint* dst = ws + (tid / 2) * QP_GM_LD + 8 * (tid % 2);
    *(qp_uint4*)dst = lo;
    *(qp_uint4*)(dst + 4) = hi;
}

template <int WK, int PREC>
QP_DEVICE void qp_gemm_mma(const QpGmView& p, uint n0) {
    // [buffer][X tile, W tile]: 2 * 2 * 128 * 20 words = 40 KiB.
    QP_SHARED qp_uint4 smem[2 * 2 * QP_GM_TILE / 4];
    uint* sm = (uint*)smem;
    const uint E = PREC == QP_GM_TF32 ? 16 : 32; // columns per step
    uint warp = QP_SIMD_ID;
    uint lane = QP_LANE;
    uint g = lane >> 2;
    uint t = lane & 3u;
    uint wm = 64 * (warp & 1u); // warp's first vector in the tile
    uint wn = 32 * (warp >> 1); // warp's first weight row in the tile

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

    uint steps = p.cols / E;
    // Positions of the tile: a warp skips the fragment loads and mma of
    // its 16-row blocks past them (uniform per warp: wm and i are), whose
    // accumulators are never stored; a grouped expert's last tile often
    // holds a few positions (a 4,096-token chunk gives each of 256 experts
    // ~128: one tile and a sliver), and each row's sums are unchanged.
    const uint live = p.m1 - p.m0;
    uint xr[4];
    qp_gm_xrows<PREC>(p, xr);
    QpGmRegs R;
    qp_gm_load<WK, PREC>(p, xr, n0, 0, R);
    qp_gm_store<WK, PREC>(sm, sm + QP_GM_TILE, R);
    QP_BARRIER();
    for (uint st = 0; st < steps; st++) {
        // Issue the next step's global loads first (registers only).
        bool more = st + 1 < steps; // uniform
        if (more) {
            qp_gm_load<WK, PREC>(p, xr, n0, (st + 1) * E, R);
        }
        const uint* xs = sm + (st & 1u) * 2 * QP_GM_TILE;
        const uint* ws = xs + QP_GM_TILE;
        QP_UNROLL
        for (uint ks = 0; ks < 2 && wm < live; ks++) { // two mma k-steps of 8 words
            uint a[4][4];
            uint b[4][2];
            QP_UNROLL
            for (uint i = 0; i < 4; i++) {
                const uint* r0 = xs + (wm + 16 * i + g) * QP_GM_LD + 8 * ks + t;
                if (wm + 16 * i < live) {
                    a[i][0] = r0[0];                // row g,   word t
                    a[i][1] = r0[8 * QP_GM_LD];     // row g+8, word t
                    a[i][2] = r0[4];                // row g,   word t+4
                    a[i][3] = r0[8 * QP_GM_LD + 4]; // row g+8, word t+4
                }
            }
            QP_UNROLL
            for (uint j = 0; j < 4; j++) {
                const uint* c0 = ws + (wn + 8 * j + g) * QP_GM_LD + 8 * ks + t;
                b[j][0] = c0[0]; // column g, word t
                b[j][1] = c0[4]; // column g, word t+4
            }
            QP_UNROLL
            for (uint i = 0; i < 4; i++) {
                if (wm + 16 * i >= live) {
                    continue; // no position of the tile in these 16 rows
                }
                QP_UNROLL
                for (uint j = 0; j < 4; j++) {
                    if (PREC == QP_GM_TF32) {
                        qp_mma_tf32(acc[i][j], a[i], b[j]);
                    } else {
                        qp_mma_bf16(acc[i][j], a[i], b[j]);
                    }
                }
            }
        }
        // Fill the other buffer: its last readers (step st-1) all passed
        // the barrier that ended step st-1.
        if (more) {
            uint* nx = sm + ((st + 1) & 1u) * 2 * QP_GM_TILE;
            qp_gm_store<WK, PREC>(nx, nx + QP_GM_TILE, R);
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
                uint v = p.m0 + wm + 16 * i + g + 8 * h;
                if (v < p.m1) {
                    QP_GLOBAL float* y = p.y + ulong(p.yrow != 0 ? uint(p.yrow[v]) : v) * p.ldy;
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

// The view of gemm_*'s group: positions from QP_GROUP_X * QP_GM_BM to n.
QP_DEVICE QpGmView qp_gm_plain(const QGemm& p) {
    QpGmView v;
    v.w = p.w;
    v.s = p.s;
    v.b = p.b;
    v.x = p.x;
    v.y = p.y;
    v.xrow = 0;
    v.yrow = 0;
    v.m0 = QP_GROUP_X * QP_GM_BM;
    v.m1 = p.n;
    v.rows = p.rows;
    v.cols = p.cols;
    v.group = p.group;
    v.stype = p.stype;
    v.ldy = p.ldy;
    return v;
}

template <int WK, int PREC>
QP_DEVICE void qp_gemm_plain(const QGemm& p) {
    qp_gemm_mma<WK, PREC>(qp_gm_plain(p), QP_GROUP_Y * QP_GM_BN);
}

// gemm_group_*: tile QP_GROUP_X of p.tiles (the tf32 kernel).
template <int WK>
QP_DEVICE void qp_gemm_group(const QGemmGroup& p) {
    QP_GLOBAL const QGemmTile* t = p.tiles + QP_GROUP_X;
    QpGmView v;
    v.w = t->w;
    v.s = t->s;
    v.b = t->b;
    v.x = p.x;
    v.y = t->y;
    v.xrow = p.xrow;
    v.yrow = p.yrow;
    v.m0 = t->m0;
    v.m1 = t->m1;
    v.rows = p.rows;
    v.cols = p.cols;
    v.group = p.group;
    v.stype = p.stype;
    v.ldy = p.ldy;
    qp_gemm_mma<WK, QP_GM_TF32>(v, QP_GROUP_Y * QP_GM_BN);
}

QP_KERNEL gemm_q4(QGemm p) { qp_grid_begin(); qp_gemm_plain<QP_GM_Q4, QP_GM_TF32>(p); }
QP_KERNEL gemm_q8(QGemm p) { qp_grid_begin(); qp_gemm_plain<QP_GM_Q8, QP_GM_TF32>(p); }
QP_KERNEL gemm_bf16(QGemm p) { qp_grid_begin(); qp_gemm_plain<QP_GM_BF16, QP_GM_TF32>(p); }
QP_KERNEL gemm_f16(QGemm p) { qp_grid_begin(); qp_gemm_plain<QP_GM_F16, QP_GM_TF32>(p); }
QP_KERNEL gemm_f32(QGemm p) { qp_grid_begin(); qp_gemm_plain<QP_GM_F32, QP_GM_TF32>(p); }
QP_KERNEL gemm_q4_h(QGemm p) { qp_grid_begin(); qp_gemm_plain<QP_GM_Q4, QP_GM_H>(p); }
QP_KERNEL gemm_q8_h(QGemm p) { qp_grid_begin(); qp_gemm_plain<QP_GM_Q8, QP_GM_H>(p); }
QP_KERNEL gemm_bf16_h(QGemm p) { qp_grid_begin(); qp_gemm_plain<QP_GM_BF16, QP_GM_H>(p); }
QP_KERNEL gemm_base(QGemm p) { qp_grid_begin(); qp_gemm_plain<QP_GM_BF16, QP_GM_BASE>(p); }
QP_KERNEL gemm_group_q4(QGemmGroup p) { qp_grid_begin(); qp_gemm_group<QP_GM_Q4>(p); }
QP_KERNEL gemm_group_q8(QGemmGroup p) { qp_grid_begin(); qp_gemm_group<QP_GM_Q8>(p); }

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
    qp_grid_begin();
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
