// select_top: the top of a logits vector (nn.TopSelector) in one launch,
// where internal/gpukernels/80_select.qk takes three (select_chunk,
// select_merge, select_list; Metal keeps those). Its helpers (qk_sel_key,
// qk_sel_val, qk_sel_prefix, QK_SEL_CHUNK) come from there.
//
// One group per chunk of QK_SEL_CHUNK values, thread t owning the chunk's
// values 16t..16t+15 (so that listing them in thread order lists them by
// id). Keys are qk_sel_key's of the value with -0 taken as +0 (so equal
// floats have equal keys, and the host's float comparisons agree).
//   1. The chunk's k-th largest key T_g (counted with multiplicity over
//      its 4096 keys, 0 for NaN, -Inf and the ids past n), a 4-bit digit a
//      round from the top (8 rounds, each a histogram of the digits of the
//      keys that match T_g so far: one barrier a round).
//   2. Its region: the ids whose key is above T_g (fewer than k), in id
//      order, then those whose key is T_g (none when T_g is 0), in id
//      order, as far as cap; cnt[g] the number of both (which may pass
//      cap), above[g] of the first. Both places in one prefix of the
//      thread's two counts, packed as 16-bit halves.
//   3. The last group to finish (a counter in device memory: every group
//      fences its stores and adds one; the last fences again and reads;
//      it stores zero for the next launch) finds th, the k-th largest of
//      the chunks' first k region values (-Inf past a region's listed
//      ones), the same 4-bit rounds: the chunks' top k are every value of
//      the global top k, so th is the vector's k-th largest (-Inf: fewer
//      than k values count).
// The host (cuda/select_top.go) keeps a region's entries at least th: those
// above T_g (complete: fewer than k ≤ cap), and those at T_g when T_g's
// value is th (complete unless cnt > cap: ties at the threshold, the host
// then reads the vector). Only comparisons and counts: the result does not
// depend on the device. Limits (the host checks): 1 <= k <= cap, G·k <=
// QK_SEL_MERGE, n < 2^31.

struct SelectTopParams {
    const float* x; // [n]
    float* th;      // [1]
    int* cnt;       // [G]
    int* above;     // [G]
    int* ids;       // [G][cap]
    float* vals;    // [G][cap]
    uint* done;     // [1]: groups finished; zero between launches
    uint n;
    uint k;
    uint cap;
    uint pad;
};
QP_STATIC_ASSERT(sizeof(SelectTopParams) == 72, "SelectTopParams layout");

// The key of v with -0 as +0.
QP_DEVICE uint qp_sel_key0(float v) { return qk_sel_key(v == 0.0f ? 0.0f : v); }

// The k-th largest of the group's keys, 16 a thread (in a), counted with
// multiplicity; every thread calls it (barriers) and gets it. hw: 2·8·
// QP_SIMDS uints of shared memory. A round's histogram of 16 digits is 4
// words a thread of 8-bit counts (at most 16 keys), widened to 8 words of
// 16-bit counts for the simdgroup sums (at most 512) and the group's (at
// most 4096); the rounds alternate between the halves of hw, so that a
// round's stores never meet the reads of the round before.
QP_DEVICE uint qp_sel_kth(const uint* a, uint k, QP_SHARED_PTR uint* hw, uint lane, uint simd) {
    uint T = 0u;
    uint above = 0u; // keys whose digits above the round's are above T's
    QP_UNROLL for (uint r = 0u; r < 8u; r++) {
        uint s = 28u - 4u * r;
        uint hi = r == 0u ? 0u : ~((1u << (s + 4u)) - 1u);
        uint h0 = 0u, h1 = 0u, h2 = 0u, h3 = 0u;
        QP_UNROLL for (uint j = 0u; j < 16u; j++) {
            uint v = a[j];
            uint d = (v >> s) & 15u;
            uint inc = (v & hi) == T ? 1u << ((d & 3u) * 8u) : 0u;
            uint q = d >> 2u;
            h0 += q == 0u ? inc : 0u;
            h1 += q == 1u ? inc : 0u;
            h2 += q == 2u ? inc : 0u;
            h3 += q == 3u ? inc : 0u;
        }
        uint e[8];
        e[0] = h0 & 0x00ff00ffu; // digits 0 (low half) and 2
        e[1] = (h0 >> 8u) & 0x00ff00ffu; // 1 and 3
        e[2] = h1 & 0x00ff00ffu;
        e[3] = (h1 >> 8u) & 0x00ff00ffu;
        e[4] = h2 & 0x00ff00ffu;
        e[5] = (h2 >> 8u) & 0x00ff00ffu;
        e[6] = h3 & 0x00ff00ffu;
        e[7] = (h3 >> 8u) & 0x00ff00ffu;
        QP_SHARED_PTR uint* half = hw + (r & 1u) * (8u * QP_SIMDS);
        QP_UNROLL for (uint w = 0u; w < 8u; w++) {
            uint sum = qp_simd_sum_u(e[w]);
            if (lane == 0u) {
                half[simd * 8u + w] = sum;
            }
        }
        QP_BARRIER();
        uint t[8];
        QP_UNROLL for (uint w = 0u; w < 8u; w++) {
            t[w] = 0u;
        }
        for (uint g = 0u; g < QP_SIMDS; g++) {
            QP_UNROLL for (uint w = 0u; w < 8u; w++) {
                t[w] += half[g * 8u + w];
            }
        }
        // Digit d's count: word 2(d/4) + (d&1), half (d&2)/2.
        uint acc = above;
        uint digit = 0u, over = above;
        bool found = false;
        QP_UNROLL for (int d = 15; d >= 0; d--) {
            uint word = t[2 * (d >> 2) + (d & 1)];
            uint c = (d & 2) != 0 ? word >> 16u : word & 0xffffu;
            if (!found) {
                if (acc + c >= k) {
                    found = true;
                    digit = uint(d);
                    over = acc;
                }
                acc += c;
            }
        }
        T |= digit << s;
        above = over;
    }
    return T;
}

QP_KERNEL select_top(const SelectTopParams p) {
    qp_grid_begin();
    QP_SHARED uint hw[2 * 8 * QP_SIMDS];
    QP_SHARED uint c[QP_TG];
    QP_SHARED uint w[QP_SIMDS];
    QP_SHARED uint last;
    uint g = QP_GROUP_X;
    uint tid = QP_TID;
    uint lane = QP_LANE;
    uint simd = QP_SIMD_ID;
    uint i0 = g * QK_SEL_CHUNK + tid * 16u;
    float v[16];
    if (i0 + 16u <= p.n && (ulong(p.x) & 15ul) == 0ul) { // 128-bit loads where aligned
        QP_UNROLL for (uint j = 0u; j < 4u; j++) {
            qp_float4 f = qp_load_float4(p.x + i0 + 4u * j);
            v[4u * j] = f.x;
            v[4u * j + 1u] = f.y;
            v[4u * j + 2u] = f.z;
            v[4u * j + 3u] = f.w;
        }
    } else {
        QP_UNROLL for (uint j = 0u; j < 16u; j++) {
            v[j] = i0 + j < p.n ? p.x[i0 + j] : QK_SEL_NINF;
        }
    }
    uint a[16];
    QP_UNROLL for (uint j = 0u; j < 16u; j++) {
        a[j] = qp_sel_key0(v[j]);
    }
    uint T = qp_sel_kth(a, p.k, hw, lane, simd);
    // The thread's keys above T (low half) and at T (high half; none when
    // T is 0: those are NaN and -Inf), placed by one prefix.
    uint mine = 0u;
    QP_UNROLL for (uint j = 0u; j < 16u; j++) {
        mine += a[j] > T ? 1u : (a[j] == T && T != 0u ? 0x10000u : 0u);
    }
    uint at = qk_sel_prefix(c, w, mine, tid, lane, simd);
    uint tot = 0u;
    for (uint s = 0u; s < QP_SIMDS; s++) {
        tot += w[s];
    }
    uint A = tot & 0xffffu, E = tot >> 16u;
    uint ra = at & 0xffffu, re = A + (at >> 16u);
    QP_GLOBAL int* ids = p.ids + g * p.cap;
    QP_GLOBAL float* vals = p.vals + g * p.cap;
    QP_UNROLL for (uint j = 0u; j < 16u; j++) {
        if (a[j] > T) {
            if (ra < p.cap) { // always: fewer than k <= cap are above T
                ids[ra] = int(i0 + j);
                vals[ra] = v[j];
            }
            ra++;
        } else if (a[j] == T && T != 0u) {
            if (re < p.cap) {
                ids[re] = int(i0 + j);
                vals[re] = v[j];
            }
            re++;
        }
    }
    if (tid == 0u) {
        p.cnt[g] = int(A + E);
        p.above[g] = int(A);
    }
    // One more group done; the last finds th from every region.
    qp_fence(); // this thread's stores of the region, before the count
    QP_BARRIER();
    if (tid == 0u) {
        last = qp_atomic_add(p.done, 1u) == QP_GROUPS - 1u ? 1u : 0u;
    }
    QP_BARRIER();
    if (last == 0u) {
        return;
    }
    qp_fence();
    uint G = QP_GROUPS;
    QP_UNROLL for (uint j = 0u; j < 16u; j++) {
        uint i = tid + j * QP_TG;
        uint gg = i / p.k, r = i - gg * p.k;
        uint key = 0u;
        if (gg < G) {
            uint m = uint(((volatile int*)p.cnt)[gg]);
            uint listed = m < p.cap ? m : p.cap;
            key = r < listed ? qp_sel_key0(((volatile float*)p.vals)[gg * p.cap + r]) : 0u;
        }
        a[j] = key;
    }
    uint th = qp_sel_kth(a, p.k, hw, lane, simd);
    if (tid == 0u) {
        p.th[0] = th == 0u ? QK_SEL_NINF : qk_sel_val(th);
        *p.done = 0u;
    }
}
