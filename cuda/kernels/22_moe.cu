// Routed experts without the host (decode with every expert of a layer in
// the device expert cache): the router's choice (route_topk's sel and wts,
// on the device) indexes a table of the layer's expert slots, so the layer
// needs no wait on the host.
//
// The table holds, for each of the layer's E experts, the device addresses
// of its three matrices' packed weight, scales and biases: [E][9] ulong
// (gate w, s, b; up w, s, b; down w, s, b). Every expert of a layer has the
// same shapes and quantization (the host checks), so one (rows, cols,
// group, stype, bits) describes them all: gate and up are [rows = I][cols
// = H], down is [rows = H][cols = I].
//
// Two kernels per layer:
//   - moe_gateup_*: group (x, y) = (row block, slot s = t·k + j); it computes
//     rows of expert sel[s]'s gate and up products on token t's input and
//     writes act(gate)·up into y[s][rows] (the GLU fused: one pass).
//   - moe_down_*: group (x, y) = (row block, token t); it computes rows of
//     the down products of experts sel[t·k+j] on h[t·k+j], j < k, and
//     writes y[t][row] = sum over j in order of wts[t·k+j]·(scale[e] if
//     any)·that (the Combine fused, in its order and arithmetic); with
//     gate set, it adds sigmoid(gate[t]) times that sum to y instead
//     (add_gated's arithmetic: a sigmoid-gated shared expert, run as a
//     one-expert table after the routed ones).
// With shared set (the shared expert's [9] matrices, of the routed
// experts' shapes), every token has a (k+1)-th slot, kk = k+1 slots in
// all: gateup's groups along y are T·kk (slot k of each token the shared
// expert), its output [T·kk][rows]; down sums the routed slots as above,
// then adds sigmoid(gate[t]) times the shared slot's row: y = sum +
// sigmoid(gate[t])·(0 + shared), the bits of the two launches of a
// separate shared expert (its sum over one slot of weight 1, then
// add_gated's arithmetic), in two kernels a layer instead of four.
// The per-row products are the gemv kernels' (qp_rows_q, qp_row_qn,
// qp_row_dense), so an expert's outputs are the same bits as through
// gemv_q4/q8/qn/dense.
//
// A slot whose sel is not an expert (route_topk writes -1 for a token whose
// logits hold a NaN) contributes zeros, and the kernel stores layer+1 into
// *fault: the host reads that word at the end of the pass and reports an
// error instead of the logits (never a wrong expert silently).

// Groups of a 4- or 8-bit moe kernel the compiler is to fit on a
// multiprocessor (as QP_GEMV_MIN_GROUPS; BenchmarkDecodeKernels on the
// H200: at 1, 229 registers and 9.5 us for a decode step's 8 experts'
// gate and up; at 2, 7.0 us; at 3, 48 bytes spilled and 9.4 us).
#ifndef QP_MOE_MIN_GROUPS
#define QP_MOE_MIN_GROUPS 2
#endif

// The most experts per token (route_topk's QK_ROUTE_MAXK).
#define QK_MOE_MAXK 64

struct MoEParams {
    const ulong* table; // [E][9]
    const int* sel;     // [T][k]
    const float* wts;   // [T][k] (down only)
    const float* scale; // [E] per-expert multipliers of the weights, or 0 (down only)
    const float* x;     // gateup: [T][cols]; down: [T·k][cols] (the GLU outputs)
    float* y;           // gateup: [T·k][rows]; down: [T][rows]
    uint* fault;        // [1]
    const float* gate;  // down only: 0, or [T] logits of a sigmoid gate: y = y + sigmoid(gate[t])·sum
    const ulong* shared; // 0, or [9]: the shared expert as every token's slot k (gate set for down)
    uint rows;
    uint cols;
    uint group;
    uint stype;
    uint bits;  // 2..8, 0 for dense
    uint k;
    uint E;
    uint act;   // QK_ACT_SILU or QK_ACT_GELU_TANH (gateup only)
    uint layer; // for the fault word
    uint split; // gateup, 4 and 8 bits: simdgroups that share a row quad's chunks (gemv_q's split); else 1
    const ulong* next; // 0, or [6]: three (address, bytes) ranges to prefetch into the L2 (qp_moe_prefetch_next)
};
QP_STATIC_ASSERT(sizeof(MoEParams) == 120, "MoEParams layout");

// BITS: 4 or 8 (QP_QROWS rows per simdgroup), QP_MOE_QN (any width from 2
// to 8 bits, p.bits; one row) or QP_MOE_DENSE (float32/16, bfloat16 of
// type p.stype; one row).
#define QP_MOE_QN 0
#define QP_MOE_DENSE 16

template <int BITS>
QP_DEVICE uint qp_moe_rows_per_simd() {
    return BITS == 4 || BITS == 8 ? uint(QP_QROWS) : 1u;
}

// Whether moe_down's simdgroups split into halves for rows of cols
// elements: 4 and 8 bits, at most 16 chunks of 16 bytes a row (the host's
// moeDownHalf).
template <int BITS>
QP_DEVICE bool qp_moe_down_half(uint cols) {
    return (BITS == 4 || BITS == 8) && cols * BITS <= 16 * 128;
}

// One lane's partial sums for rows row0 .. of matrix m (its w, s, b
// addresses) times x (4 and 8 bits: x staged in xs when staged, the lane's
// chunks c0, c0+step, ...; the other kinds: lane c0 of 32).
template <int BITS>
QP_DEVICE void qp_moe_rows(QP_GLOBAL const ulong* m, const MoEParams& p, QP_GLOBAL const float* x,
                           QP_SHARED_PTR const float* xs, bool staged, uint row0, uint c0, uint step,
                           float acc[QP_QROWS]) {
    QP_GLOBAL const uchar* w = (QP_GLOBAL const uchar*)m[0];
    QP_GLOBAL const uchar* s = (QP_GLOBAL const uchar*)m[1];
    QP_GLOBAL const uchar* b = (QP_GLOBAL const uchar*)m[2];
    if constexpr (BITS == QP_MOE_DENSE) {
        acc[0] = qp_row_dense(w, p.cols, p.stype, x, row0, c0);
    } else if constexpr (BITS == QP_MOE_QN) {
        acc[0] = qp_row_qn(w, s, b, p.cols, p.group, p.stype, p.bits, x, row0, c0);
    } else {
        qp_rows_qx<BITS>(w, s, b, p.rows, p.cols, p.group, p.stype, x, xs, staged, row0, c0, step, acc);
    }
}

// The expert of slot s, or -1 (the fault word set) when sel[s] is none.
QP_DEVICE int qp_moe_expert(const MoEParams& p, uint s, uint lane) {
    int e = p.sel[s];
    if (e < 0 || uint(e) >= p.E) {
        if (lane == 0) {
            *p.fault = p.layer + 1u;
        }
        return -1;
    }
    return e;
}

// Slots a token has: k, and the shared expert's when there is one.
QP_DEVICE uint qp_moe_slots(const MoEParams& p) {
    return p.k + (p.shared != 0 ? 1u : 0u);
}

// The matrices of token t's slot j < qp_moe_slots(p), or 0 (the fault
// word set) when a routed slot chose no expert.
QP_DEVICE QP_GLOBAL const ulong* qp_moe_mats(const MoEParams& p, uint t, uint j, uint lane) {
    if (j == p.k) {
        return p.shared;
    }
    int e = qp_moe_expert(p, t * p.k + j, lane);
    return e < 0 ? (QP_GLOBAL const ulong*)0 : p.table + ulong(e) * 9;
}

// Before qp_grid_begin(), under a dependent launch (cuda/pdl.go): the
// expert rows a group will read are prefetched into the L2 while the
// kernel before it still runs. Gateup's routed experts are chosen by the
// kernel just before it (route_topk), so only the shared expert's rows
// (its table is written by copies, never by a kernel) are prefetched.
// Down's experts were chosen two kernels back, before gateup: a dependent
// launch starts only after the kernel before it has passed its own wait
// (qp_grid_begin), so that choice is complete and down's groups read sel
// and the table to find their rows. (Where a choice could still change,
// the only effect would be lines prefetched in vain: every value used is
// read after the wait.) An index out of range prefetches nothing. 4 and 8
// bits (a row quad per simdgroup, two on half simdgroups).
template <int BITS>
QP_DEVICE void qp_moe_prefetch_gateup(const MoEParams& p) {
    if constexpr (BITS == 4 || BITS == 8) {
        uint split = p.split;
        uint kk = qp_moe_slots(p);
        if (p.shared == 0 || QP_GROUP_Y % kk != p.k || QP_SIMD_ID % split != 0) {
            return;
        }
        uint row0 = (QP_GROUP_X * (QP_SIMDS / split) + QP_SIMD_ID / split) * QP_QROWS;
        for (uint m = 0; m < 6; m += 3) {
            qp_prefetch_q<BITS>((QP_GLOBAL const uchar*)p.shared[m], (QP_GLOBAL const uchar*)p.shared[m + 1],
                                (QP_GLOBAL const uchar*)p.shared[m + 2], p.rows, p.cols, p.group, p.stype, row0,
                                QP_QROWS);
        }
    }
}

template <int BITS>
QP_DEVICE void qp_moe_prefetch_down(const MoEParams& p) {
    if constexpr (BITS == 4 || BITS == 8) {
        bool half = qp_moe_down_half<BITS>(p.cols);
        uint RB = half ? 2 * QP_QROWS : QP_QROWS;
        uint row0 = QP_GROUP_X * RB;
        uint t = QP_GROUP_Y;
        uint kk = qp_moe_slots(p);
        for (uint i = QP_SIMD_ID; i < kk; i += QP_SIMDS) {
            QP_GLOBAL const ulong* m = p.shared;
            if (i < p.k) {
                int e = p.sel[t * p.k + i];
                m = e >= 0 && uint(e) < p.E ? p.table + ulong(e) * 9 : (QP_GLOBAL const ulong*)0;
            }
            if (m != 0) {
                qp_prefetch_q<BITS>((QP_GLOBAL const uchar*)m[6], (QP_GLOBAL const uchar*)m[7],
                                    (QP_GLOBAL const uchar*)m[8], p.rows, p.cols, p.group, p.stype, row0, RB);
            }
        }
    }
}

// Before qp_grid_begin(): with next set (the host's QPACK_CUDA_PF_NEXT,
// cuda/layer_pfnext.go), the groups of the launch's first token prefetch
// its three ranges into the L2, a line a thread in turn: the matrix the
// pass multiplies after this layer (the next layer's first product), so
// that it reads the L2 where it would read HBM, its bytes fetched while
// this layer's MoE keeps the device busy with little traffic. The ranges
// are device weights, written by copies before any kernel, never by a
// kernel. ny: the launch's groups along y at one token (gateup: its
// slots; down: 1).
QP_DEVICE void qp_moe_prefetch_next(const MoEParams& p, uint ny) {
    if (p.next == 0 || QP_GROUP_Y >= ny) {
        return;
    }
    ulong tid = (ulong(QP_GROUP_Y) * (QP_GROUPS / ny) + QP_GROUP_X) * QP_TG + QP_TID;
    ulong all = ulong(QP_GROUPS / ny) * ny * QP_TG;
    for (uint r = 0; r < 3; r++) {
        ulong a = p.next[2 * r] & ~ulong(127);
        ulong end = p.next[2 * r] + p.next[2 * r + 1];
        for (ulong l = a + tid * 128; l < end; l += all * 128) {
            qp_prefetch_l2((const void*)l);
        }
    }
}

// Gate and up: group (x, y) = (row block, slot s); the group's
// simdgroups take row quads (4 and 8 bits; one row otherwise) in turn,
// split of them to a quad, each its share of the chunks (gemv_q's
// arrangement, so that a decode step's few slots of I rows fill the
// device); the quad's sums over the parts are formed in part order, as
// qp_gemv_store forms them. The token's x is staged once for the group.
template <int BITS>
QP_DEVICE void qp_moe_gateup(const MoEParams& p) {
    const uint R = qp_moe_rows_per_simd<BITS>();
    const bool Q = BITS == 4 || BITS == 8;
    QP_XS_DECL(xs, Q ? QP_XS_FLOATS : 4);
    QP_SHARED float sums[2 * QP_SIMDS * QP_QROWS];
    uint split = Q ? p.split : 1u;
    uint part = QP_SIMD_ID % split;
    uint row0 = (QP_GROUP_X * (QP_SIMDS / split) + QP_SIMD_ID / split) * R;
    uint lane = QP_LANE;
    uint s = QP_GROUP_Y; // token s / kk's slot s % kk
    uint kk = qp_moe_slots(p);
    QP_GLOBAL const float* x = p.x + ulong(s / kk) * p.cols;
    bool active = row0 < p.rows; // uniform per simdgroup
    // The slot's expert is read before x is staged, so that its load
    // overlaps the staging's (BenchmarkDecodeKernels, H100, eighteenth
    // session: 10.48 against 10.77 us with the shared expert as slot k,
    // 7.35 against 7.44 without). Prefetching the up rows into the L2 once
    // the expert is known (so that their loads, which wait for the gate's
    // sums, would not start a second trip to HBM) was slower: 12.24 and
    // 8.56 us; the expert table's lines prefetched before the wait with
    // them, the same. Gate and up in one loop (both matrices' loads at
    // once, x read once: qp_rows_q over two matrices) spilled 40 bytes at
    // 128 registers and was slower too: 7.38 against 6.83 us, 10.62
    // against 10.24 (H200).
    uint slot = s % kk;
    int chosen = active && slot < p.k ? p.sel[(s / kk) * p.k + slot] : 0;
    bool staged = false;
    if constexpr (Q) {
        staged = qp_stage_x<BITS>(xs, x, p.cols); // every thread (a barrier)
    }
    QP_GLOBAL const ulong* m = (QP_GLOBAL const ulong*)0;
    if (active) {
        if (slot == p.k) {
            m = p.shared;
        } else if (chosen < 0 || uint(chosen) >= p.E) {
            if (lane == 0) {
                *p.fault = p.layer + 1u; // as qp_moe_expert
            }
        } else {
            m = p.table + ulong(chosen) * 9;
        }
    }
    int e = m != 0 ? 0 : -1;
    float g[QP_QROWS] = {};
    float u[QP_QROWS] = {};
    if (e >= 0) {
        uint c0 = Q ? part * QP_SIMD + lane : lane;
        qp_moe_rows<BITS>(m, p, x, xs, staged, row0, c0, QP_SIMD * split, g);
        qp_moe_rows<BITS>(m + 3, p, x, xs, staged, row0, c0, QP_SIMD * split, u);
    }
    float gs[QP_QROWS];
    float us[QP_QROWS];
    QP_UNROLL
    for (uint j = 0; j < R; j++) {
        gs[j] = qp_simd_sum(g[j]);
        us[j] = qp_simd_sum(u[j]);
    }
    QP_GLOBAL float* y = p.y + ulong(s) * p.rows;
    if (split > 1) {
        uint sid = QP_SIMD_ID;
        if (lane == 0) {
            QP_UNROLL
            for (uint j = 0; j < R; j++) {
                sums[sid * R + j] = gs[j];
                sums[QP_SIMDS * QP_QROWS + sid * R + j] = us[j];
            }
        }
        QP_BARRIER();
        if (active && part == 0 && lane < R && row0 + lane < p.rows) {
            float gv = sums[sid * R + lane];
            float uv = sums[QP_SIMDS * QP_QROWS + sid * R + lane];
            for (uint k = 1; k < split; k++) {
                gv += sums[(sid + k) * R + lane];
                uv += sums[QP_SIMDS * QP_QROWS + (sid + k) * R + lane];
            }
            float a = p.act == QK_ACT_GELU_TANH ? qk_gelu_tanh(gv) : qk_silu(gv);
            y[row0 + lane] = e < 0 ? 0.0f : a * uv;
        }
        return;
    }
    QP_UNROLL
    for (uint j = 0; j < R; j++) {
        if (active && lane == 0 && row0 + j < p.rows) {
            float a = p.act == QK_ACT_GELU_TANH ? qk_gelu_tanh(gs[j]) : qk_silu(gs[j]);
            y[row0 + j] = e < 0 ? 0.0f : a * us[j];
        }
    }
}

// Down and combine: group (x, y) = (row block, token t); simdgroup w
// computes the rows of the token's experts j = w, w+QP_SIMDS, ... into
// shared memory, then one lane per row sums them in order j = 0 .. k-1
// (Combine's order and arithmetic). When a row has at most 16 chunks (an
// expert's down product of I = 512 at 4 bits has 16), the halves of a
// simdgroup take two row quads (lanes 16-31 the second, each lane one
// chunk's share as before, summed over its half: the bits of the whole
// simdgroup's sum with the idle lanes' zeros), so a row block is 2·R rows
// and a decode step's launch has half the groups.
template <int BITS>
QP_DEVICE void qp_moe_down(const MoEParams& p) {
    const uint R = qp_moe_rows_per_simd<BITS>();
    QP_SHARED float part[(QK_MOE_MAXK + 1) * 2 * QP_QROWS];
    bool half = qp_moe_down_half<BITS>(p.cols);
    uint RB = half ? 2 * R : R; // rows of the group
    uint row0 = QP_GROUP_X * RB;
    uint t = QP_GROUP_Y;
    uint lane = QP_LANE;
    uint hi = half ? lane / 16 : 0; // which of the two quads
    uint c0 = half ? lane % 16 : lane;
    uint step = half ? 16 : QP_SIMD;
    uint kk = qp_moe_slots(p);
    for (uint i = QP_SIMD_ID; i < kk; i += QP_SIMDS) {
        QP_GLOBAL const ulong* m = qp_moe_mats(p, t, i, lane);
        float acc[QP_QROWS];
        QP_UNROLL
        for (uint j = 0; j < QP_QROWS; j++) {
            acc[j] = 0.0f;
        }
        uint r0 = row0 + hi * R;
        if (m != 0 && r0 < p.rows) {
            qp_moe_rows<BITS>(m + 6, p, p.x + ulong(t * kk + i) * p.cols, 0, false, r0, c0, step, acc);
        }
        QP_UNROLL
        for (uint j = 0; j < R; j++) {
            float d = half ? qp_half_sum(acc[j]) : qp_simd_sum(acc[j]);
            if (lane % 16 == 0 && (half || lane == 0)) {
                part[i * RB + hi * R + j] = d;
            }
        }
    }
    QP_BARRIER();
    uint tid = QP_TID;
    if (tid < RB && row0 + tid < p.rows) {
        float out = 0.0f;
        for (uint i = 0; i < p.k; i++) {
            uint s = t * p.k + i;
            int e = p.sel[s];
            if (e < 0 || uint(e) >= p.E) {
                continue;
            }
            float w = p.wts[s];
            if (p.scale != 0) {
                w = w * p.scale[e];
            }
            out += w * part[i * RB + tid];
        }
        QP_GLOBAL float* y = p.y + ulong(t) * p.rows + row0 + tid;
        if (p.shared != 0) {
            float sh = 0.0f; // a sum over one slot of weight 1, as alone
            sh += 1.0f * part[p.k * RB + tid];
            out = out + qk_sigmoid(p.gate[t]) * sh; // add_gated's arithmetic
        } else if (p.gate != 0) {
            out = *y + qk_sigmoid(p.gate[t]) * out; // add_gated's arithmetic
        }
        *y = out;
    }
}

QP_KERNEL_BOUNDS(QP_MOE_MIN_GROUPS) moe_gateup_q4(MoEParams p) {
    qp_moe_prefetch_next(p, qp_moe_slots(p));
    qp_moe_prefetch_gateup<4>(p);
    qp_grid_begin();
    qp_moe_gateup<4>(p);
}
QP_KERNEL_BOUNDS(QP_MOE_MIN_GROUPS) moe_gateup_q8(MoEParams p) {
    qp_moe_prefetch_next(p, qp_moe_slots(p));
    qp_moe_prefetch_gateup<8>(p);
    qp_grid_begin();
    qp_moe_gateup<8>(p);
}
QP_KERNEL moe_gateup_qn(MoEParams p) {
    qp_moe_prefetch_next(p, qp_moe_slots(p));
    qp_grid_begin();
    qp_moe_gateup<QP_MOE_QN>(p);
}
QP_KERNEL moe_gateup_dense(MoEParams p) {
    qp_moe_prefetch_next(p, qp_moe_slots(p));
    qp_grid_begin();
    qp_moe_gateup<QP_MOE_DENSE>(p);
}
QP_KERNEL_BOUNDS(QP_MOE_MIN_GROUPS) moe_down_q4(MoEParams p) {
    qp_moe_prefetch_next(p, 1);
    qp_moe_prefetch_down<4>(p);
    qp_grid_begin();
    qp_moe_down<4>(p);
}
QP_KERNEL_BOUNDS(QP_MOE_MIN_GROUPS) moe_down_q8(MoEParams p) {
    qp_moe_prefetch_next(p, 1);
    qp_moe_prefetch_down<8>(p);
    qp_grid_begin();
    qp_moe_down<8>(p);
}
QP_KERNEL moe_down_qn(MoEParams p) {
    qp_moe_prefetch_next(p, 1);
    qp_grid_begin();
    qp_moe_down<QP_MOE_QN>(p);
}
QP_KERNEL moe_down_dense(MoEParams p) {
    qp_moe_prefetch_next(p, 1);
    qp_grid_begin();
    qp_moe_down<QP_MOE_DENSE>(p);
}
