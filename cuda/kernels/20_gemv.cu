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
    uint split;       // 4 and 8 bits: simdgroups that share a row quad's chunks (1, 2, 4, 8)
};
QP_STATIC_ASSERT(sizeof(QGemv) == 64, "QGemv layout");

// Rows per simdgroup of the 4- and 8-bit kernels: each lane loads its chunk
// of x once and uses it for this many rows, so x is read from cache once per
// QP_QROWS rows and QP_QROWS independent weight loads are in flight.
#define QP_QROWS 4

// float(q) for 0 <= q < 2^23, exact, without an int-to-float conversion
// (2^23 + q has q in its mantissa).
QP_DEVICE float qp_small_uint_to_float(uint q) { return qp_as_float(0x4B000000u | q) - 8388608.0f; }

// sum over the 32/BITS elements of word q of q_k * x[k].
template <int BITS>
QP_DEVICE float qp_word_dot(uint q, const float* x) {
    const uint mask = (1u << BITS) - 1u;
    float dot = 0.0f;
    QP_UNROLL
    for (int k = 0; k < 32 / BITS; k++) {
        dot += qp_small_uint_to_float((q >> (BITS * k)) & mask) * x[k];
    }
    return dot;
}

// 4 bits: sum over the 32 elements of chunk q of f_k * x[k], where f_k =
// 1 + q_k/16 exactly, so that sum q_k x[k] = 16 (that - sum x[k]). Each
// nibble goes into the top of the mantissa of 1.0 with two masks per word
// (the even elements' nibbles at bits 3-6 of each byte, then the odd
// ones', bit 7 set: the exponent's low bit) and one byte permutation per
// element (byte n into bits 16-23 under the exponent byte 0x3F), instead
// of a shift, mask, OR and subtraction per element. Measured on the H200
// (testdata/cuda/bandwidth.log), this left the large 4-bit matvec's rate
// where it was (0.41x the copy bandwidth): what bound it was the loads of
// x (see qp_stage_x).
QP_DEVICE float qp_word_dotf4(uint q, const float* x) {
    uint ev = ((q << 3) & 0x78787878u) | 0x80808080u;
    uint od = ((q >> 1) & 0x78787878u) | 0x80808080u;
    float dot = 0.0f;
    QP_UNROLL
    for (uint n = 0; n < 4; n++) {
        uint sel = 0x7044u | (n << 8);
        dot += qp_as_float(qp_byte_perm(ev, 0x3F000000u, sel)) * x[2 * n];
        dot += qp_as_float(qp_byte_perm(od, 0x3F000000u, sel)) * x[2 * n + 1];
    }
    return dot;
}

// The word (0..3) of a 16-byte chunk, by a constant index once unrolled.
QP_DEVICE uint qp_word_of(qp_uint4 q, uint i) { return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w; }

// x staged in threadgroup memory (qp_stage_x): chunk c's elements (a
// chunk: the elements of 16 bytes of a row, 32 at 4 bits, 16 at 8) start
// at float c·(elements + QP_XS_PAD), so that the 8 lanes of a quarter-warp
// loading 16 bytes each of consecutive chunks hit distinct banks. Read from
// global memory instead, consecutive lanes' chunks are 128 or 64 bytes
// apart: a lane's 16 bytes each from its own line, the L1's throughput
// spent on x (Nsight Compute on the H200: 57% of the matvec's stall cycles
// were waits on L1 loads, bench/gpu/results/ncu-gemv-q4-before.log).
// Staged, the 12,352 x 2,048 matvec of BenchmarkDecodeKernels went from
// 13.3 to 10.0 us at the same registers. Vectors of up to QP_XS_COLS
// elements are staged; longer ones are read in place.
#define QP_XS_PAD 4
#define QP_XS_COLS 8192
#define QP_XS_FLOATS (QP_XS_COLS / 16 * (16 + QP_XS_PAD)) // the 8-bit layout, the larger: 40 KiB
// Declares the staged x, n floats (a multiple of 4), in threadgroup memory
// aligned to 16 bytes: its chunks are read as float4s, and a float array
// is aligned to 4 only (the fused kernels' other shared variables, a uint
// among them, put it at ...4 on the H100: misaligned reads, memcheck,
// 2026-12-05).
#define QP_XS_DECL(name, n)                                                                                  \
    QP_SHARED qp_float4 name##_storage[(n) / 4];                                                             \
    QP_SHARED_PTR float* name = (QP_SHARED_PTR float*)name##_storage
// QP_GEMV_STAGE 0 reads x in place always (an A/B switch for benchmarks:
// QPACK_CUDA_DEFINES, cuda/kernels.go).
#ifndef QP_GEMV_STAGE
#define QP_GEMV_STAGE 1
#endif

// Copies x (cols floats) into xs in the staged layout of BITS-bit chunks
// and returns true, after a barrier; false (nothing staged, no barrier)
// when cols > QP_XS_COLS. Every thread of the group calls it (uniform).
template <int BITS>
QP_DEVICE bool qp_stage_x(QP_SHARED_PTR float* xs, QP_GLOBAL const float* x, uint cols) {
    if (!QP_GEMV_STAGE || cols > QP_XS_COLS) {
        return false;
    }
    const uint per = 128 / BITS;
    for (uint f = 4 * QP_TID; f < cols; f += 4 * QP_TG) {
        uint c = f / per;
        *(QP_SHARED_PTR qp_float4*)(xs + c * (per + QP_XS_PAD) + (f - c * per)) = qp_load_float4(x + f);
    }
    QP_BARRIER();
    return true;
}

// The partial sums of one lane for rows row0 .. row0+QP_QROWS-1 of a 4- or
// 8-bit matrix (w, s, b) times x (cols floats; STAGED: in qp_stage_x's
// layout): the lane takes 16-byte
// chunks c0, c0+step, ... of each row (32 elements at 4 bits, 16 at 8): a
// chunk never straddles a quantization group, since groups are >= 32
// elements and multiples of the chunk. Rows past the end are clamped to
// the last row (computed, never stored), so control flow stays uniform.
// The caller sums acc over the lanes (qp_simd_sum) and, when the chunks
// are split over simdgroups, over those. A chunk's x is loaded one word's
// elements at a time and used for every row, so that few registers hold
// it (the kernel's occupancy is bound by its registers); the sums are
// formed in the same order as with the whole chunk's x held at once.
template <int BITS, bool STAGED = false>
QP_DEVICE void qp_rows_q(QP_GLOBAL const uchar* w, QP_GLOBAL const uchar* s, QP_GLOBAL const uchar* b, uint rows,
                         uint cols, uint group, uint stype, const float* x, uint row0, uint c0, uint step,
                         float acc[QP_QROWS]) {
    const uint per = 128 / BITS; // elements per chunk
    const uint wper = 32 / BITS; // elements per 32-bit word
    const uint xstride = STAGED ? per + QP_XS_PAD : per;
    ulong rowBytes = ulong(cols) * BITS / 8;
    ulong sRow = ulong(cols / group) * (stype == QP_F32 ? 4 : 2);
    // Row j's bytes start dw[j] (scales and biases ds[j]) after row0's:
    // offsets below 4 * 2^30 (rows are shorter than 2^30 bytes).
    QP_GLOBAL const uchar* w0 = w + ulong(row0) * rowBytes;
    QP_GLOBAL const uchar* s0 = s + ulong(row0) * sRow;
    QP_GLOBAL const uchar* b0 = b + ulong(row0) * sRow;
    uint dw[QP_QROWS];
    uint ds[QP_QROWS];
    QP_UNROLL
    for (uint j = 0; j < QP_QROWS; j++) {
        uint r = QP_MIN(row0 + j, rows - 1) - row0;
        acc[j] = 0.0f;
        dw[j] = uint(r * rowBytes);
        ds[j] = uint(r * sRow);
    }
    uint chunks = cols / per;
    for (uint c = c0; c < chunks; c += step) {
        uint gi = (c * per) / group;
        qp_uint4 q[QP_QROWS];
        float sc[QP_QROWS];
        float bi[QP_QROWS];
        QP_UNROLL
        for (uint j = 0; j < QP_QROWS; j++) {
            q[j] = qp_load_uint4(w0 + dw[j] + ulong(c) * 16);
            sc[j] = qp_load_float(s0 + ds[j], gi, stype);
            bi[j] = qp_load_float(b0 + ds[j], gi, stype);
        }
        const float* xs = x + ulong(c) * xstride;
        float xsum = 0.0f;
        float dot[QP_QROWS];
        QP_UNROLL
        for (uint i = 0; i < 4; i++) {
            float xv[wper];
            QP_UNROLL
            for (uint k = 0; k < wper; k += 4) {
                qp_float4 f = qp_load_float4(xs + i * wper + k);
                xv[k] = f.x;
                xv[k + 1] = f.y;
                xv[k + 2] = f.z;
                xv[k + 3] = f.w;
            }
            QP_UNROLL
            for (uint k = 0; k < wper; k++) {
                xsum += xv[k];
            }
            QP_UNROLL
            for (uint j = 0; j < QP_QROWS; j++) {
                uint word = qp_word_of(q[j], i);
                float d = BITS == 4 ? qp_word_dotf4(word, xv) : qp_word_dot<BITS>(word, xv);
                dot[j] = i == 0 ? d : dot[j] + d;
            }
        }
        QP_UNROLL
        for (uint j = 0; j < QP_QROWS; j++) {
            float t = BITS == 4 ? 16.0f * (dot[j] - xsum) : dot[j];
            acc[j] += sc[j] * t + bi[j] * xsum;
        }
    }
}

// qp_rows_q over x staged in xs when staged, else over x in place.
template <int BITS>
QP_DEVICE void qp_rows_qx(QP_GLOBAL const uchar* w, QP_GLOBAL const uchar* s, QP_GLOBAL const uchar* b, uint rows,
                          uint cols, uint group, uint stype, QP_GLOBAL const float* x, QP_SHARED_PTR const float* xs,
                          bool staged, uint row0, uint c0, uint step, float acc[QP_QROWS]) {
    if (staged) {
        qp_rows_q<BITS, true>(w, s, b, rows, cols, group, stype, xs, row0, c0, step, acc);
    } else {
        qp_rows_q<BITS, false>(w, s, b, rows, cols, group, stype, x, row0, c0, step, acc);
    }
}

// Lines of a simdgroup's rows one lane prefetches at most (qp_prefetch_rows).
#define QP_PREFETCH_LINES 16

// Before qp_grid_begin(): the lanes of a simdgroup prefetch into the L2
// the packed bytes, scales and biases of rows row0 .. row0+n-1 of a 4- or
// 8-bit matrix (up to QP_PREFETCH_LINES lines a lane of each), so that
// under a dependent launch they are read while the kernel before this one
// still runs. Only the first vector's groups prefetch (the others' rows
// are the same). Weights are written by copies before any kernel reads
// them, never by a kernel, so reading them before the wait is safe.
QP_DEVICE void qp_prefetch_lines(QP_GLOBAL const uchar* p, ulong n, uint lane) {
    ulong start = ulong(p) & ~ulong(127);
    ulong end = ulong(p) + n;
    ulong a = start + ulong(lane) * 128;
    for (uint i = 0; i < QP_PREFETCH_LINES && a < end; i++, a += 128 * QP_SIMD) {
        qp_prefetch_l2((const void*)a);
    }
}

// Rows row0 .. row0+n-1 (those that exist) of a 4- or 8-bit matrix, by
// one simdgroup.
template <int BITS>
QP_DEVICE void qp_prefetch_q(QP_GLOBAL const uchar* w, QP_GLOBAL const uchar* s, QP_GLOBAL const uchar* b,
                             uint rows, uint cols, uint group, uint stype, uint row0, uint n) {
    if (row0 >= rows) {
        return;
    }
    n = QP_MIN(n, rows - row0);
    ulong rowBytes = ulong(cols) * BITS / 8;
    ulong sRow = ulong(cols / group) * (stype == QP_F32 ? 4 : 2);
    uint lane = QP_LANE;
    qp_prefetch_lines(w + row0 * rowBytes, n * rowBytes, lane);
    qp_prefetch_lines(s + row0 * sRow, n * sRow, lane);
    qp_prefetch_lines(b + row0 * sRow, n * sRow, lane);
}

template <int BITS>
QP_DEVICE void qp_prefetch_rows(QP_GLOBAL const uchar* w, QP_GLOBAL const uchar* s, QP_GLOBAL const uchar* b,
                                uint rows, uint cols, uint group, uint stype, uint row0) {
    if (QP_GROUP_Y == 0) {
        qp_prefetch_q<BITS>(w, s, b, rows, cols, group, stype, row0, QP_QROWS);
    }
}

// The rows row0 .. row0+QP_QROWS-1 of y from the lanes' partial sums acc:
// summed over the lanes and, when split > 1 simdgroups share the rows'
// chunks, over those in order (part 0 first, through threadgroup memory),
// then stored. Every simdgroup of the group calls it (a barrier when split
// > 1); active says whether its rows exist (uniform per simdgroup).
QP_DEVICE void qp_gemv_store(const float acc[QP_QROWS], bool active, uint split, uint part, float* y, uint rows,
                             uint row0) {
    QP_SHARED float sums[QP_SIMDS * QP_QROWS];
    uint lane = QP_LANE;
    uint sid = QP_SIMD_ID;
    float t[QP_QROWS];
    QP_UNROLL
    for (uint j = 0; j < QP_QROWS; j++) {
        t[j] = qp_simd_sum(acc[j]);
    }
    if (split == 1) {
        QP_UNROLL
        for (uint j = 0; j < QP_QROWS; j++) {
            if (active && lane == 0 && row0 + j < rows) {
                y[row0 + j] = t[j];
            }
        }
        return;
    }
    if (lane == 0) {
        QP_UNROLL
        for (uint j = 0; j < QP_QROWS; j++) {
            sums[sid * QP_QROWS + j] = t[j];
        }
    }
    QP_BARRIER();
    if (active && part == 0 && lane < QP_QROWS && row0 + lane < rows) {
        float v = sums[sid * QP_QROWS + lane];
        for (uint k = 1; k < split; k++) {
            v += sums[(sid + k) * QP_QROWS + lane];
        }
        y[row0 + lane] = v;
    }
}

// (Tried: compiled for 4 groups a multiprocessor, 64 registers a thread
// instead of 88, the decode step's largest products spilled and ran 10-20%
// slower, bench DecodeKernels on the H200, 2026-12-02.)
//
// 4 and 8 bits: the group's simdgroups take row quads in turn, split of
// them to a quad (each its share of the chunks: qp_rows_q); group (x, y) =
// (row block of QP_QROWS * QP_SIMDS / split rows, vector).
template <int BITS>
QP_DEVICE void qp_gemv_q(QGemv p) {
    uint split = p.split;
    uint part = QP_SIMD_ID % split;
    uint row0 = (QP_GROUP_X * (QP_SIMDS / split) + QP_SIMD_ID / split) * QP_QROWS;
    if (part == 0) qp_prefetch_rows<BITS>(p.w, p.s, p.b, p.rows, p.cols, p.group, p.stype, row0);
    qp_grid_begin();
    QP_XS_DECL(xs, QP_XS_FLOATS);
    bool active = row0 < p.rows;
    ulong v = QP_GROUP_Y;
    QP_GLOBAL const float* x = p.x + v * p.cols;
    bool staged = qp_stage_x<BITS>(xs, x, p.cols);
    float acc[QP_QROWS] = {};
    if (active) {
        qp_rows_qx<BITS>(p.w, p.s, p.b, p.rows, p.cols, p.group, p.stype, x, xs, staged, row0,
                         part * QP_SIMD + QP_LANE, QP_SIMD * split, acc);
    }
    qp_gemv_store(acc, active, split, part, p.y + v * p.rows, p.rows, row0);
}

// Groups of a 4- or 8-bit matvec kernel (and of their sets) the compiler
// is to fit on a multiprocessor. Measured on the H200 (BenchmarkDecodeKernels,
// bench/gpu/results/decode-kernels-session5.log, 2026-12-02): bounded by
// 256 threads a group alone, NVRTC gave gemv_q4 218 registers (one group a
// multiprocessor, 0.38x the copy bandwidth on the DeltaNet's 12,352 x 2,048
// input projections, with x staged); at 3, 80 registers without spills and
// 0.54x; at 4, 64 registers and 0.36x. An A/B switch for benchmarks
// (QPACK_CUDA_DEFINES), as QP_MOE_MIN_GROUPS (22_moe.cu).
#ifndef QP_GEMV_MIN_GROUPS
#define QP_GEMV_MIN_GROUPS 3
#endif

QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q4(QGemv p) { qp_gemv_q<4>(p); }

QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q8(QGemv p) { qp_gemv_q<8>(p); }

// Up to QP_GSET products of one input in one launch (nn.MatMuls: the
// attention's q, k and v, the DeltaNet's input projections, a router and
// its shared expert's gate), of matrices of one width and format: product
// k's rows are the row blocks first[k] .. first[k+1]-1 of the grid, each
// computed as gemv_q computes it (the same bits). At decode each of these
// products is a few microseconds of launch for under one of work, so one
// launch instead of up to four is what saves time.
#define QP_GSET 4
struct QGemvSet {
    const uchar* w[QP_GSET];
    const uchar* s[QP_GSET];
    const uchar* b[QP_GSET];
    float* y[QP_GSET];
    const float* x; // [n][cols]
    uint rows[QP_GSET];
    uint first[QP_GSET]; // first row block of each product; first[0] = 0
    uint count;          // products, 1 .. QP_GSET
    uint cols;
    uint group;
    uint stype;
    uint split; // as QGemv's (row blocks of QP_QROWS * QP_SIMDS / split rows)
    uint pad;
};
QP_STATIC_ASSERT(sizeof(QGemvSet) == 192, "QGemvSet layout");

// The residual add and RMSNorm fused into a set's products (a decode
// step's norm of the residual stream followed by the products that read
// that norm: nn.AddRMSNorm then nn.MatMuls, cuda/layer_normfuse.go): x +=
// r, y = the norm of the sum, and the products of y, in one launch instead
// of two. Every group forms the sum and its norm for itself, straight into
// its staged x, as add_rms_norm_rows forms them (each thread's elements in
// the same order for the sum of squares, the same group reduction, the
// same arithmetic: the same bits); then the products, as gemv_*_set
// computes them. Since every group reads x and x is updated in place, the
// sum and the norm are stored by the last group only: each group adds one
// to *done after its reads of x and r (at its end), and the group that
// brings it to the grid's size stores x and y and sets *done back to zero
// for the next launch. One vector (n = 1) of at most QP_XS_COLS elements.
// With rk > 0, product 0 is a router's (E = rows[0] logits) and the last
// group also makes the token's choice of rk experts from them, as
// route_topk makes it (qk_route_token, internal/gpukernels/70_route.qk):
// the MoE's router and its top-k in one launch with the norm before them.
// Every group fences its stores of the products before it counts itself
// done, and the last group fences after it has seen the count, so the
// logits the other groups stored are what it reads.
struct QGemvSetNorm {
    QGemvSet m;      // the products; m.x is the residual stream x [m.cols], updated
    const float* r;  // [cols]: added into x
    const float* nw; // [cols]: the norm's weight (unused for QK_NORM_UNIT)
    float* y;        // [cols]: the norm of the sum, the products' input
    uint* done;      // [1]: groups past their reads of x; zero between launches
    float eps;
    uint kind;  // QK_NORM_*
    int* sel;   // [rk]: the experts chosen (route_topk's sel)
    float* wts; // [rk]: their weights
    uint rk;    // experts a token chooses; 0: no choice
    uint rnorm; // the weights renormalised to sum one
    uint dv;    // QP_NORM_GATED: the heads' width; QP_NORM_SIGMUL: the rows'
    uint gs;    // QP_NORM_SIGMUL: the gate's row stride
};
QP_STATIC_ASSERT(sizeof(QGemvSetNorm) == 264, "QGemvSetNorm layout");

// kind QP_NORM_GATED (gemv_*_set_gnorm): the DeltaNet's gated norm of its
// output heads fused into the product that reads it (the mixer's output
// projection): x = m.x holds the cols / dv heads of dv (the recurrence's
// output), r the gate z, nw the norm's weight [dv]; the staged vector and
// y (in place over x, by the last group) are deltanet_out's
// rmsnorm(o)·norm·silu(z) per head, its bits. No choice (rk = 0).
#define QP_NORM_GATED 16u

// kind QP_NORM_SIGMUL (gemv_*_set_sigmul): an attention's output gate
// fused into its output projection: x = m.x holds cols / dv rows of dv
// (the heads' outputs), r the gate logits (row j at j·gs); the staged
// vector and y (in place over x, by the last group) are sigmoid_mul's
// x·sigmoid(gate), its bits. No choice (rk = 0).
#define QP_NORM_SIGMUL 17u

// Where element i of a vector lies in qp_stage_x's layout for BITS bits.
template <int BITS>
QP_DEVICE uint qp_xs_at(uint i) {
    const uint per = 128 / BITS;
    uint c = i / per;
    return c * (per + QP_XS_PAD) + (i - c * per);
}

// Stages the norm of x + r into xs (qp_stage_x's layout), as
// add_rms_norm_rows computes it (10_norm.qk: its loops, its reduction, its
// arithmetic), whatever QP_GEMV_STAGE says; every thread calls it (barriers).
template <int BITS>
QP_DEVICE void qp_stage_add_norm(QP_SHARED_PTR float* xs, const QGemvSetNorm& q) {
    QP_SHARED float part[QP_SIMDS];
    uint width = q.m.cols;
    uint tid = QP_TID;
    QP_GLOBAL const float* x = q.m.x;
    float ss = 0.0f;
    for (uint i0 = tid; i0 < width; i0 += QK_NORM_BATCH * QP_TG) {
        float v[QK_NORM_BATCH];
        QP_UNROLL
        for (uint j = 0; j < QK_NORM_BATCH; j++) {
            uint i = i0 + j * QP_TG;
            v[j] = i < width ? x[i] + q.r[i] : 0.0f;
        }
        QP_UNROLL
        for (uint j = 0; j < QK_NORM_BATCH; j++) {
            uint i = i0 + j * QP_TG;
            if (i < width) {
                xs[qp_xs_at<BITS>(i)] = v[j];
                ss += v[j] * v[j];
            }
        }
    }
    ss = qk_group_sum(ss, part, QP_LANE, QP_SIMD_ID);
    float inv = 1.0f / qp_sqrt(ss / float(width) + q.eps);
    // The thread's own elements, their weights loaded a batch at a time.
    for (uint i0 = tid; i0 < width; i0 += QK_NORM_BATCH * QP_TG) {
        float f[QK_NORM_BATCH];
        QP_UNROLL
        for (uint j = 0; j < QK_NORM_BATCH; j++) {
            uint i = i0 + j * QP_TG;
            f[j] = i < width && q.kind != QK_NORM_UNIT ? q.nw[i] : 0.0f;
        }
        QP_UNROLL
        for (uint j = 0; j < QK_NORM_BATCH; j++) {
            uint i = i0 + j * QP_TG;
            if (i < width) {
                uint at = qp_xs_at<BITS>(i);
                xs[at] = qk_norm_scale(xs[at], inv, q.kind, f[j]);
            }
        }
    }
    QP_BARRIER();
}

// The end of a fused launch's group: one more group past its reads of x
// and r (and its stores of the products); the last stores the sum into x
// and the norm (staged in xs) into y, zeroes the counter and, with rk,
// makes the router's choice (xs then holds its probabilities). Every
// thread calls it (barriers).
template <int BITS>
QP_DEVICE void qp_set_norm_finish(QP_SHARED_PTR float* xs, const QGemvSetNorm& q) {
    QP_SHARED uint last;
    QP_SHARED float rpart[QP_SIMDS];
    if (q.rk != 0u) {
        qp_fence(); // this thread's stores of the logits, before the count
    }
    QP_BARRIER(); // the group's reads are done (they were before staging's barrier)
    if (QP_TID == 0) {
        qp_fence();
        last = qp_atomic_add(q.done, 1u) == QP_GROUPS - 1u ? 1u : 0u;
    }
    QP_BARRIER();
    if (last == 0u) {
        return;
    }
    qp_fence();
    QP_GLOBAL float* x = (QP_GLOBAL float*)q.m.x;
    bool add = q.kind != QP_NORM_GATED && q.kind != QP_NORM_SIGMUL; // else y is x, rewritten in place
    for (uint i = QP_TID; i < q.m.cols; i += QP_TG) {
        if (add) {
            x[i] = x[i] + q.r[i];
        }
        q.y[i] = xs[qp_xs_at<BITS>(i)];
    }
    if (QP_TID == 0) {
        *q.done = 0u;
    }
    if (q.rk != 0u) {
        QP_BARRIER(); // xs read for y before it holds the probabilities
        qk_route_token(q.m.y[0], q.m.rows[0], q.rk, q.rnorm, q.sel, q.wts, xs, rpart, QP_TID, QP_LANE,
                       QP_SIMD_ID);
    }
}

// Stages deltanet_out's gated norm of each head of x (QP_NORM_GATED) into
// xs: each (head, 32 columns) pair's sum of squares is a simdgroup's sum
// over its lanes, as deltanet_out's simdgroups form them (column tid of
// the head in thread tid, zeros past dv), and a head's sum adds its pairs'
// in simdgroup order with the zeros of the simdgroups past the head, as
// qk_group_sum adds them; then each element is deltanet_out's product.
// Every thread calls it (barriers).
template <int BITS>
QP_DEVICE void qp_stage_gated_norm(QP_SHARED_PTR float* xs, const QGemvSetNorm& q) {
    QP_SHARED float hs[QP_XS_COLS / QP_SIMD];
    uint width = q.m.cols;
    uint dv = q.dv;
    uint per = (dv + QP_SIMD - 1u) / QP_SIMD; // pairs a head
    uint pairs = width / dv * per;
    QP_GLOBAL const float* o = q.m.x;
    for (uint pc = QP_SIMD_ID; pc < pairs; pc += QP_SIMDS) {
        uint h = pc / per;
        uint col = (pc - h * per) * QP_SIMD + QP_LANE;
        float v = col < dv ? o[h * dv + col] : 0.0f;
        float ss = qp_simd_sum(v * v);
        if (QP_LANE == 0u) {
            hs[pc] = ss;
        }
    }
    QP_BARRIER();
    for (uint i = QP_TID; i < width; i += QP_TG) {
        uint h = i / dv;
        float ss = 0.0f;
        for (uint c = 0; c < QP_SIMDS; c++) {
            ss += c < per ? hs[h * per + c] : 0.0f;
        }
        float inv = 1.0f / qp_sqrt(ss / float(dv) + q.eps);
        xs[qp_xs_at<BITS>(i)] = o[i] * inv * q.nw[i - h * dv] * qk_silu(q.r[i]);
    }
    QP_BARRIER();
}

// Stages sigmoid_mul's gated rows of x (QP_NORM_SIGMUL) into xs. Every
// thread calls it (a barrier).
template <int BITS>
QP_DEVICE void qp_stage_sigmul(QP_SHARED_PTR float* xs, const QGemvSetNorm& q) {
    QP_GLOBAL const float* o = q.m.x;
    for (uint i = QP_TID; i < q.m.cols; i += QP_TG) {
        uint r = i / q.dv;
        xs[qp_xs_at<BITS>(i)] = o[i] * qk_sigmoid(q.r[r * q.gs + (i - r * q.dv)]);
    }
    QP_BARRIER();
}

// One group of a set launch; with NORM, of a fused one (nm: its block).
template <int BITS, bool NORM>
QP_DEVICE void qp_gemv_set(const QGemvSet& p, const QGemvSetNorm* nm) {
    uint bx = QP_GROUP_X;
    // The product of this group: the last k with first[k] <= bx, its
    // fields read with constant indices (the parameter block's arrays are
    // not indexed at run time).
    uint k = 0;
    QP_UNROLL
    for (uint j = 1; j < QP_GSET; j++) {
        if (j < p.count && bx >= p.first[j]) {
            k = j;
        }
    }
    const uchar* w = p.w[0];
    const uchar* s = p.s[0];
    const uchar* b = p.b[0];
    uint rows = p.rows[0];
    uint first = 0;
    QP_UNROLL
    for (uint j = 1; j < QP_GSET; j++) {
        if (j == k) {
            w = p.w[j];
            s = p.s[j];
            b = p.b[j];
            rows = p.rows[j];
            first = p.first[j];
        }
    }
    uint split = p.split;
    uint part = QP_SIMD_ID % split;
    uint row0 = ((bx - first) * (QP_SIMDS / split) + QP_SIMD_ID / split) * QP_QROWS;
    if constexpr (NORM) {
        // The norm's weight (read by every group, written by no kernel):
        // group 0's threads prefetch a line each.
        bool weighted = nm->kind == QK_NORM_WEIGHT || nm->kind == QK_NORM_OFFSET || nm->kind == QP_NORM_GATED;
        if (bx == 0 && weighted && 32 * QP_TID < (nm->kind == QP_NORM_GATED ? nm->dv : p.cols)) {
            qp_prefetch_l2(nm->nw + 32 * QP_TID);
        }
    }
    if (part == 0) qp_prefetch_rows<BITS>(w, s, b, rows, p.cols, p.group, p.stype, row0);
    qp_grid_begin();
    bool active = row0 < rows;
    float* out = p.y[0];
    QP_UNROLL
    for (uint j = 1; j < QP_GSET; j++) {
        if (j == k) {
            out = p.y[j];
        }
    }
    ulong v = QP_GROUP_Y;
    QP_XS_DECL(xs, QP_XS_FLOATS);
    QP_GLOBAL const float* x = p.x + v * p.cols;
    bool staged = true;
    if constexpr (NORM) {
        if (nm->kind == QP_NORM_GATED) {
            qp_stage_gated_norm<BITS>(xs, *nm);
        } else if (nm->kind == QP_NORM_SIGMUL) {
            qp_stage_sigmul<BITS>(xs, *nm);
        } else {
            qp_stage_add_norm<BITS>(xs, *nm);
        }
    } else {
        staged = qp_stage_x<BITS>(xs, x, p.cols);
    }
    float acc[QP_QROWS] = {};
    if (active) {
        qp_rows_qx<BITS>(w, s, b, rows, p.cols, p.group, p.stype, x, xs, staged, row0, part * QP_SIMD + QP_LANE,
                         QP_SIMD * split, acc);
    }
    qp_gemv_store(acc, active, split, part, out + v * rows, rows, row0);
    if constexpr (NORM) {
        qp_set_norm_finish<BITS>(xs, *nm);
    }
}

QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q4_set(QGemvSet p) { qp_gemv_set<4, false>(p, 0); }

QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q8_set(QGemvSet p) { qp_gemv_set<8, false>(p, 0); }

QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q4_set_norm(QGemvSetNorm p) { qp_gemv_set<4, true>(p.m, &p); }

QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q8_set_norm(QGemvSetNorm p) { qp_gemv_set<8, true>(p.m, &p); }

// The gated and the output-gate variants' own names (kinds QP_NORM_GATED
// and QP_NORM_SIGMUL), so the profile and the fake tell them apart; the
// same code.
QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q4_set_gnorm(QGemvSetNorm p) { qp_gemv_set<4, true>(p.m, &p); }

QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q8_set_gnorm(QGemvSetNorm p) { qp_gemv_set<8, true>(p.m, &p); }

QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q4_set_sigmul(QGemvSetNorm p) { qp_gemv_set<4, true>(p.m, &p); }

QP_KERNEL_BOUNDS(QP_GEMV_MIN_GROUPS) gemv_q8_set_sigmul(QGemvSetNorm p) { qp_gemv_set<8, true>(p.m, &p); }

// The partial sum of one lane for row `row` of a matrix of any width from 2
// to 8 bits (used for 2, 3, 5 and 6): a row is one little-endian bit
// stream, element i at bits [i*bits, (i+1)*bits). Eight consecutive
// elements take exactly `bits` bytes, read bytewise; lane l takes chunks
// l, l+32, ...
QP_DEVICE float qp_row_qn(QP_GLOBAL const uchar* wm, QP_GLOBAL const uchar* sm, QP_GLOBAL const uchar* bm, uint cols,
                          uint group, uint stype, uint bits, QP_GLOBAL const float* x, uint row, uint lane) {
    ulong groups = cols / group;
    ulong esize = stype == QP_F32 ? 4 : 2;
    QP_GLOBAL const uchar* w = wm + ulong(row) * (ulong(cols) * bits / 8);
    QP_GLOBAL const uchar* sp = sm + ulong(row) * groups * esize;
    QP_GLOBAL const uchar* bp = bm + ulong(row) * groups * esize;
    uint mask = (1u << bits) - 1u;
    float acc = 0.0f;
    uint chunks = cols / 8;
    for (uint c = lane; c < chunks; c += QP_SIMD) {
        QP_GLOBAL const uchar* cp = w + ulong(c) * bits;
        ulong stream = 0;
        for (uint j = 0; j < bits; j++) {
            stream |= ulong(cp[j]) << (8 * j);
        }
        uint gi = (c * 8) / group;
        float s = qp_load_float(sp, gi, stype);
        float b = qp_load_float(bp, gi, stype);
        QP_GLOBAL const float* xs = x + ulong(c) * 8;
        float dot = 0.0f;
        float xsum = 0.0f;
        for (uint k = 0; k < 8; k++) {
            float xv = xs[k];
            dot += float(uint(stream >> (k * bits)) & mask) * xv;
            xsum += xv;
        }
        acc += s * dot + b * xsum;
    }
    return acc;
}

// One row per simdgroup (qp_row_qn).
QP_KERNEL gemv_qn(QGemv p) {
    qp_grid_begin();
    uint row = QP_GROUP_X * QP_SIMDS + QP_SIMD_ID;
    if (row >= p.rows) {
        return;
    }
    uint lane = QP_LANE;
    ulong v = QP_GROUP_Y;
    float acc = qp_simd_sum(qp_row_qn(p.w, p.s, p.b, p.cols, p.group, p.stype, p.bits, p.x + v * p.cols, row, lane));
    if (lane == 0) {
        p.y[v * p.rows + row] = acc;
    }
}

// The partial sum of one lane for row `row` of dense weights of type stype
// (float32, float16 or bfloat16), row-major.
QP_DEVICE float qp_row_dense(QP_GLOBAL const uchar* wm, uint cols, uint stype, QP_GLOBAL const float* x, uint row,
                             uint lane) {
    ulong esize = stype == QP_F32 ? 4 : 2;
    QP_GLOBAL const uchar* w = wm + ulong(row) * cols * esize;
    float acc = 0.0f;
    for (uint i = lane; i < cols; i += QP_SIMD) {
        acc += qp_load_float(w, i, stype) * x[i];
    }
    return acc;
}

// Dense weights: one row per simdgroup (qp_row_dense).
QP_KERNEL gemv_dense(QGemv p) {
    qp_grid_begin();
    uint row = QP_GROUP_X * QP_SIMDS + QP_SIMD_ID;
    if (row >= p.rows) {
        return;
    }
    uint lane = QP_LANE;
    ulong v = QP_GROUP_Y;
    float acc = qp_simd_sum(qp_row_dense(p.w, p.cols, p.stype, p.x + v * p.cols, row, lane));
    if (lane == 0) {
        p.y[v * p.rows + row] = acc;
    }
}
