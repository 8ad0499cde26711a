// Runs one kernel of kernels/25_gemm.cu on the CPU (see prelude.h).
//   emu KERNEL BM BN IN OUT
// IN: uint32 n, rows, cols, group, stype, bits, then uint64 byte counts of
// W, S, B, X followed by their bytes. OUT: n*rows float32.
// gemm_group_q4/q8 compute the same product as grouped tiles: positions
// 0..n-1 cut into tiles of uneven sizes (1 to BM), position v reading
// vector xrow[v] and writing its output row there (a rotated reversal, so
// both index lists are exercised), so OUT is again Y = X Wᵀ.
#include "prelude.h"
#include "../../kernels/10_common.cu"
#include "../../kernels/25_gemm.cu"
#include "run.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static std::vector<uchar> take(FILE* f, size_t n) {
    std::vector<uchar> v(n + 64); // 64 spare bytes: never read, keeps empty arrays valid
    if (n && fread(v.data(), 1, n, f) != n) {
        fprintf(stderr, "short input\n");
        exit(2);
    }
    v.resize(n + 64);
    return v;
}

int main(int argc, char** argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: emu KERNEL BM BN IN OUT\n");
        return 2;
    }
    std::string k = argv[1];
    uint bm = atoi(argv[2]), bn = atoi(argv[3]);
    void (*kern)(QGemm) = k == "gemm_q4" ? gemm_q4 : k == "gemm_q8" ? gemm_q8 : k == "gemm_bf16" ? gemm_bf16
                        : k == "gemm_f16" ? gemm_f16 : k == "gemm_f32" ? gemm_f32 : k == "gemm_q4_h" ? gemm_q4_h
                        : k == "gemm_q8_h" ? gemm_q8_h : k == "gemm_bf16_h" ? gemm_bf16_h : k == "gemm_base" ? gemm_base
                        : k == "gemm_fma" ? gemm_fma : nullptr;
    void (*group)(QGemmGroup) = k == "gemm_group_q4" ? gemm_group_q4 : k == "gemm_group_q8" ? gemm_group_q8 : nullptr;
    if (!kern && !group) {
        fprintf(stderr, "no kernel %s\n", argv[1]);
        return 2;
    }
    FILE* f = fopen(argv[4], "rb");
    if (!f) {
        return 2;
    }
    uint h[6];
    ulong sz[4];
    if (fread(h, 4, 6, f) != 6 || fread(sz, 8, 4, f) != 4) {
        return 2;
    }
    // 16-byte aligned copies (std::vector<uchar> of new[] is 16-aligned on
    // x86-64 glibc; checked).
    std::vector<uchar> w = take(f, sz[0]), s = take(f, sz[1]), b = take(f, sz[2]), x = take(f, sz[3]);
    fclose(f);
    if ((uintptr_t(w.data()) | uintptr_t(x.data())) % 16) {
        fprintf(stderr, "unaligned buffers\n");
        return 2;
    }
    QGemm p;
    p.w = w.data();
    p.s = s.data();
    p.b = b.data();
    p.x = (const float*)x.data();
    std::vector<float> y(size_t(h[0]) * h[1] + 1, NAN);
    p.y = y.data();
    p.n = h[0];
    p.rows = h[1];
    p.cols = h[2];
    p.group = h[3];
    p.stype = h[4];
    p.bits = h[5];
    p.ldy = h[1];
    p.pad = 0;
    if (group) {
        uint n = p.n;
        std::vector<int> rows(n + 1);
        for (uint v = 0; v < n; v++) {
            rows[v] = int((2 * n - 1 - v + n / 3) % n);
        }
        std::vector<QGemmTile> tiles;
        const uint sizes[] = {37, bm, 1, 90, bm, 5};
        for (uint m0 = 0, i = 0; m0 < n; i++) {
            uint m1 = m0 + sizes[i % 6] < n ? m0 + sizes[i % 6] : n;
            tiles.push_back(QGemmTile{p.w, p.s, p.b, p.y, m0, m1});
            m0 = m1;
        }
        QGemmGroup g;
        g.tiles = tiles.data();
        g.x = p.x;
        g.xrow = rows.data();
        g.yrow = rows.data();
        g.rows = p.rows;
        g.cols = p.cols;
        g.group = p.group;
        g.stype = p.stype;
        g.ldy = p.ldy;
        g.pad = 0;
        qp_emu_run(group, g, uint(tiles.size()), (p.rows + bn - 1) / bn);
    } else {
        qp_emu_run(kern, p, (p.n + bm - 1) / bm, (p.rows + bn - 1) / bn);
    }
    FILE* o = fopen(argv[5], "wb");
    if (!o || fwrite(y.data(), 4, size_t(h[0]) * h[1], o) != size_t(h[0]) * h[1] || fclose(o)) {
        return 2;
    }
    return 0;
}
