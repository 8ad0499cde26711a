// Runs one kernel of kernels/22_moe.cu (over 20_gemv.cu's row products) on
// the CPU (see prelude.h).
//   moe KERNEL GX GY IMAGE OUT
// IMAGE: the 112-byte MoEParams block whose 9 pointers are byte offsets
// into the memory that follows (~0: null), then uint64 n and n bytes of
// memory. The table's E·9 entries and the shared expert's 9 (offsets too)
// are made addresses before the run. OUT: the memory after the run.
#include "prelude.h"
// From internal/gpukernels/50_elementwise.qk (that file's kernels are not
// emulated here; layer_moe_emu_test.go checks the value).
#define QK_ACT_GELU_TANH 1u
#include "../../../internal/gpukernels/00_common.qk"
#include "../../../internal/gpukernels/10_norm.qk" // 20_gemv.cu's fused norm
#include "../../../internal/gpukernels/70_route.qk" // 20_gemv.cu's fused choice
#include "../../kernels/10_common.cu"
#include "../../kernels/20_gemv.cu"
#include "../../kernels/22_moe.cu"
#include "run.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// A prefetch of a line outside the image fails the run (unless the test
// set next: its ranges are offsets, not addresses, there to end the loops
// over them): a kernel's prefetches must fall on its operands.
static uintptr_t emu_lo, emu_hi;
static ulong emu_outside;

static void emu_prefetch(const void* a) {
    uintptr_t p = uintptr_t(a);
    // Every prefetch of these kernels is a line's start.
    if (p % 128 != 0 || p + 128 <= emu_lo || p >= emu_hi) {
        __atomic_fetch_add(&emu_outside, 1ul, __ATOMIC_RELAXED);
    }
}

int main(int argc, char** argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: moe KERNEL GX GY IMAGE OUT\n");
        return 2;
    }
    std::string k = argv[1];
    void (*kern)(MoEParams) = k == "moe_gateup_q4" ? moe_gateup_q4 : k == "moe_gateup_q8" ? moe_gateup_q8
                            : k == "moe_gateup_qn" ? moe_gateup_qn : k == "moe_gateup_dense" ? moe_gateup_dense
                            : k == "moe_down_q4" ? moe_down_q4 : k == "moe_down_q8" ? moe_down_q8
                            : k == "moe_down_qn" ? moe_down_qn : k == "moe_down_dense" ? moe_down_dense : nullptr;
    if (!kern) {
        fprintf(stderr, "no kernel %s\n", argv[1]);
        return 2;
    }
    uint gx = atoi(argv[2]), gy = atoi(argv[3]);
    FILE* f = fopen(argv[4], "rb");
    if (!f) {
        return 2;
    }
    static_assert(sizeof(MoEParams) == 120, "MoEParams");
    ulong raw[15]; // MoEParams: pointers 0-8, 32-bit fields in 9-13, next 14
    ulong n = 0;
    if (fread(raw, 8, 15, f) != 15 || fread(&n, 8, 1, f) != 1) {
        return 2;
    }
    // 128-byte aligned memory (the image's lines are the device's) with 64
    // spare bytes (never read).
    ulong size = (n + 64 + 127) / 128 * 128;
    uchar* mem = (uchar*)aligned_alloc(128, size);
    if (!mem) {
        return 2;
    }
    memset(mem, 0, size);
    if (n && fread(mem, 1, n, f) != n) {
        fprintf(stderr, "short image\n");
        return 2;
    }
    fclose(f);
    for (int i = 0; i < 15; i++) {
        if (i >= 9 && i < 14) {
            continue; // the 32-bit fields
        }
        if (raw[i] == ~0ul) {
            raw[i] = 0;
        } else if (raw[i] >= n) {
            fprintf(stderr, "pointer %d past the memory\n", i);
            return 2;
        } else {
            raw[i] = ulong(uintptr_t(mem + raw[i]));
        }
    }
    MoEParams p;
    memcpy(&p, raw, sizeof p);
    // The tables' entries: the routed experts' E·9, the shared expert's 9.
    ulong* tables[2] = {(ulong*)p.table, (ulong*)p.shared};
    ulong entries[2] = {ulong(p.E) * 9, p.shared ? 9ul : 0ul};
    for (int t = 0; t < 2; t++) {
        for (ulong i = 0; i < entries[t]; i++) {
            if (tables[t][i] >= n) {
                fprintf(stderr, "table %d entry %lu past the memory\n", t, i);
                return 2;
            }
            tables[t][i] = ulong(uintptr_t(mem + tables[t][i]));
        }
    }
    emu_lo = uintptr_t(mem);
    emu_hi = uintptr_t(mem) + n;
    qp_emu_prefetch_hook = emu_prefetch;
    qp_emu_run(kern, p, gx, gy);
    if (emu_outside > 0 && p.next == nullptr) {
        fprintf(stderr, "%lu prefetches outside the memory\n", emu_outside);
        return 3;
    }
    for (int t = 0; t < 2; t++) {
        for (ulong i = 0; i < entries[t]; i++) {
            tables[t][i] -= ulong(uintptr_t(mem));
        }
    }
    FILE* o = fopen(argv[5], "wb");
    if (!o || (n && fwrite(mem, 1, n, o) != n) || fclose(o)) {
        return 2;
    }
    return 0;
}
