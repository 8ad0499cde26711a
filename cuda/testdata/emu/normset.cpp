// Runs one kernel of the residual norm fused into the shared products
// (kernels/20_gemv.cu: gemv_q4_set_norm, gemv_q8_set_norm), of the set
// products it fuses (gemv_q4_set, gemv_q8_set) or of the norm it fuses
// (add_rms_norm_rows, internal/gpukernels/10_norm.qk; the gated norm of
// deltanet_out, 40_deltanet.qk, for gemv_*_set_gnorm) or the choice it
// makes (route_topk, 70_route.qk) on the CPU (see prelude.h), so a test
// compares the fused launch with the launches it replaces. It runs the
// one-launch selection (kernels/27_select.cu: select_top) too, and the
// three launches it replaces (80_select.qk).
//   normset KERNEL GX GY IMAGE OUT
// IMAGE: uint32 size of the parameter block, uint32 np, np uint32 byte
// offsets of its pointer fields; the block, each pointer field a byte
// offset into the memory that follows (~0: null); uint64 n and n bytes of
// memory. OUT: the memory after the run.
#include "prelude.h"
#include "../../../internal/gpukernels/00_common.qk"
#include "../../../internal/gpukernels/10_norm.qk"
#include "../../../internal/gpukernels/40_deltanet.qk" // deltanet_out: the gated norm fused
#include "../../../internal/gpukernels/50_elementwise.qk" // sigmoid_mul: the output gate fused
#include "../../../internal/gpukernels/70_route.qk" // 20_gemv.cu's fused choice
#include "../../../internal/gpukernels/80_select.qk" // 27_select.cu's helpers
#include "../../kernels/10_common.cu"
#include "../../kernels/20_gemv.cu"
#include "../../kernels/27_select.cu"
#include "run.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

template <typename P>
static int run(void (*kern)(P), const std::vector<uchar>& blk, uint gx, uint gy) {
    if (blk.size() != sizeof(P)) {
        fprintf(stderr, "parameter block of %zu bytes, the kernel's is %zu\n", blk.size(), sizeof(P));
        return 2;
    }
    P p;
    memcpy(&p, blk.data(), sizeof p);
    qp_emu_run(kern, p, gx, gy);
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: normset KERNEL GX GY IMAGE OUT\n");
        return 2;
    }
    std::string k = argv[1];
    uint gx = atoi(argv[2]), gy = atoi(argv[3]);
    FILE* f = fopen(argv[4], "rb");
    if (!f) {
        return 2;
    }
    uint size = 0, np = 0;
    if (fread(&size, 4, 1, f) != 1 || fread(&np, 4, 1, f) != 1 || size > 4096 || np > size / 8) {
        fprintf(stderr, "bad header\n");
        return 2;
    }
    std::vector<uint> ptrs(np);
    std::vector<uchar> blk(size);
    ulong n = 0;
    if ((np && fread(ptrs.data(), 4, np, f) != np) || fread(blk.data(), 1, size, f) != size || fread(&n, 8, 1, f) != 1) {
        fprintf(stderr, "short image\n");
        return 2;
    }
    // 16-byte aligned memory with 64 spare bytes (never read).
    std::vector<qp_uint4> store((n + 64 + 15) / 16);
    uchar* mem = (uchar*)store.data();
    if (n && fread(mem, 1, n, f) != n) {
        fprintf(stderr, "short image\n");
        return 2;
    }
    fclose(f);
    for (uint off : ptrs) {
        ulong v;
        if (off + 8 > size) {
            fprintf(stderr, "pointer field at %u past the block\n", off);
            return 2;
        }
        memcpy(&v, blk.data() + off, 8);
        if (v == ~0ul) {
            v = 0;
        } else if (v >= n) {
            fprintf(stderr, "pointer field at %u past the memory\n", off);
            return 2;
        } else {
            v = ulong(uintptr_t(mem + v));
        }
        memcpy(blk.data() + off, &v, 8);
    }
    int rc = k == "gemv_q4_set"          ? run(gemv_q4_set, blk, gx, gy)
             : k == "gemv_q8_set"        ? run(gemv_q8_set, blk, gx, gy)
             : k == "gemv_q4_set_norm"   ? run(gemv_q4_set_norm, blk, gx, gy)
             : k == "gemv_q8_set_norm"   ? run(gemv_q8_set_norm, blk, gx, gy)
             : k == "add_rms_norm_rows"  ? run(add_rms_norm_rows, blk, gx, gy)
             : k == "route_topk"         ? run(route_topk, blk, gx, gy)
             : k == "deltanet_out"       ? run(deltanet_out, blk, gx, gy)
             : k == "gemv_q4_set_gnorm"  ? run(gemv_q4_set_gnorm, blk, gx, gy)
             : k == "gemv_q8_set_gnorm"  ? run(gemv_q8_set_gnorm, blk, gx, gy)
             : k == "sigmoid_mul"        ? run(sigmoid_mul, blk, gx, gy)
             : k == "gemv_q4_set_sigmul" ? run(gemv_q4_set_sigmul, blk, gx, gy)
             : k == "gemv_q8_set_sigmul" ? run(gemv_q8_set_sigmul, blk, gx, gy)
             : k == "select_top"         ? run(select_top, blk, gx, gy)
                                         : (fprintf(stderr, "no kernel %s\n", argv[1]), 2);
    if (rc != 0) {
        return rc;
    }
    FILE* o = fopen(argv[5], "wb");
    if (!o || (n && fwrite(mem, 1, n, o) != n) || fclose(o)) {
        return 2;
    }
    return 0;
}
