// Executes qpack's Metal kernels, compiled as C++ through metal_stdlib, on the
// CPU. The Go test (metal/shim_test.go) starts this program once and sends it
// launches on stdin; for each it returns the buffers the kernel may write.
//
// Each threadgroup runs its threads as real threads (std::thread) so that
// threadgroup barriers and simdgroup exchanges are real synchronization
// points; threadgroups run one after another, which is what lets
// threadgroup memory be a `static` local of the kernel.
//
// Protocol (little-endian):
//   request:  u32 magic 'QPL1' | u32 name length | name | u32 grid[3] |
//             u32 threadgroup[3] | u32 regions | per region: u64 length,
//             u8 writeback, bytes | u32 bindings | per binding: u32 region
//   response: u32 status (0 ok) | u32 message length | message |
//             if ok, the bytes of every writeback region in order.
#include "shim_rt.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// A reusable barrier whose participants can leave (a thread returning from
// the kernel must not hold up the threads still running it).
class Barrier {
   public:
    void reset(int n) {
        std::lock_guard<std::mutex> lk(mu_);
        expected_ = n;
        arrived_ = 0;
    }
    void wait() {
        std::unique_lock<std::mutex> lk(mu_);
        uint64_t gen = gen_;
        if (++arrived_ >= expected_) {
            release();
            return;
        }
        cv_.wait(lk, [&] { return gen_ != gen; });
    }
    template <class F>
    void leave(F before) {
        std::lock_guard<std::mutex> lk(mu_);
        before();
        expected_--;
        if (expected_ > 0 && arrived_ >= expected_) release();
    }

   private:
    void release() {
        arrived_ = 0;
        gen_++;
        cv_.notify_all();
    }
    std::mutex mu_;
    std::condition_variable cv_;
    int expected_ = 0, arrived_ = 0;
    uint64_t gen_ = 0;
};

struct SimdGroup {
    Barrier bar;
    int width = 0;
    bool active[32];
    alignas(16) unsigned char slot[32][16];
};

struct Group {
    Barrier bar;
    std::unique_ptr<SimdGroup[]> simds;
    int nsimds = 0;
    explicit Group(int nthreads) : simds(new SimdGroup[(nthreads + 31) / 32]), nsimds((nthreads + 31) / 32) {}
    void reset(int nthreads) {
        bar.reset(nthreads);
        for (int s = 0; s < nsimds; s++) {
            int w = nthreads - int(s) * 32;
            if (w > 32) w = 32;
            simds[s].width = w;
            simds[s].bar.reset(w);
            for (int i = 0; i < 32; i++) simds[s].active[i] = i < w;
        }
    }
};

thread_local shim::ThreadCtx tctx;
thread_local Group* tgroup;
thread_local SimdGroup* tsimd;

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "harness: %s\n", what);
    std::exit(2);
}

bool read_full(void* p, size_t n) {
    size_t got = std::fread(p, 1, n, stdin);
    return got == n;
}

void write_full(const void* p, size_t n) {
    if (std::fwrite(p, 1, n, stdout) != n) die("short write");
}

uint32_t read_u32() {
    unsigned char b[4];
    if (!read_full(b, 4)) die("truncated request");
    return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
}

uint64_t read_u64() {
    uint64_t lo = read_u32();
    uint64_t hi = read_u32();
    return lo | hi << 32;
}

void write_u32(uint32_t v) {
    unsigned char b[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
    write_full(b, 4);
}

void respond_error(const std::string& msg) {
    write_u32(1);
    write_u32(uint32_t(msg.size()));
    write_full(msg.data(), msg.size());
    std::fflush(stdout);
}

// Runs kernel k over grid threadgroups of tg threads.
void execute(const ShimKernel& k, void** bufs, const uint32_t grid[3], const uint32_t tg[3]) {
    const int nthreads = int(tg[0] * tg[1] * tg[2]);
    Group group(nthreads);
    group.reset(nthreads);
    Barrier outer;
    outer.reset(nthreads);
    std::vector<std::thread> threads;
    threads.reserve(nthreads);
    for (int tid = 0; tid < nthreads; tid++) {
        threads.emplace_back([&, tid] {
            tgroup = &group;
            tsimd = &group.simds[tid / 32];
            shim::ThreadCtx& c = tctx;
            c.threads_per_threadgroup = {tg[0], tg[1], tg[2]};
            c.threadgroups_per_grid = {grid[0], grid[1], grid[2]};
            c.threads_per_grid = {grid[0] * tg[0], grid[1] * tg[1], grid[2] * tg[2]};
            c.thread_index_in_threadgroup = uint32_t(tid);
            c.thread_index_in_simdgroup = uint32_t(tid % 32);
            c.simdgroup_index_in_threadgroup = uint32_t(tid / 32);
            c.threads_per_simdgroup = 32;
            c.simdgroups_per_threadgroup = uint32_t((nthreads + 31) / 32);
            uint32_t lx = uint32_t(tid) % tg[0];
            uint32_t ly = (uint32_t(tid) / tg[0]) % tg[1];
            uint32_t lz = uint32_t(tid) / (tg[0] * tg[1]);
            c.thread_position_in_threadgroup = {lx, ly, lz};
            for (uint32_t gz = 0; gz < grid[2]; gz++)
                for (uint32_t gy = 0; gy < grid[1]; gy++)
                    for (uint32_t gx = 0; gx < grid[0]; gx++) {
                        c.threadgroup_position_in_grid = {gx, gy, gz};
                        c.thread_position_in_grid = {gx * tg[0] + lx, gy * tg[1] + ly, gz * tg[2] + lz};
                        k.fn(bufs);
                        // This thread has returned: it leaves the barriers the
                        // rest of its threadgroup and simdgroup may still use.
                        group.bar.leave([] {});
                        tsimd->bar.leave([&] { tsimd->active[tid % 32] = false; });
                        outer.wait();
                        if (tid == 0) group.reset(nthreads);
                        outer.wait();
                    }
        });
    }
    for (auto& t : threads) t.join();
}

}  // namespace

namespace shim {

const ThreadCtx& ctx() { return tctx; }

void threadgroup_barrier() { tgroup->bar.wait(); }

uint32_t simd_exchange(const void* in, void* out, size_t size) {
    if (size > 16) die("simd value larger than 16 bytes");
    SimdGroup& s = *tsimd;
    unsigned lane = tctx.thread_index_in_simdgroup;
    std::memcpy(s.slot[lane], in, size);
    s.bar.wait();
    uint32_t mask = 0;
    for (int i = 0; i < s.width; i++) {
        if (s.active[i]) {
            mask |= 1u << i;
            std::memcpy(static_cast<unsigned char*>(out) + i * size, s.slot[i], size);
        }
    }
    s.bar.wait();
    return mask;
}

}  // namespace shim

int main() {
    for (;;) {
        unsigned char mb[4];
        size_t got = std::fread(mb, 1, 4, stdin);
        if (got == 0) return 0;  // end of requests
        if (got != 4 || std::memcmp(mb, "QPL1", 4) != 0) die("bad request magic");
        uint32_t nlen = read_u32();
        if (nlen == 0 || nlen > 256) die("bad kernel name length");
        std::string name(nlen, '\0');
        if (!read_full(name.data(), nlen)) die("truncated name");
        uint32_t grid[3], tg[3];
        for (auto& g : grid) g = read_u32();
        for (auto& t : tg) t = read_u32();
        uint32_t nreg = read_u32();
        if (nreg > 64) die("too many regions");
        std::vector<void*> mem(nreg);
        std::vector<uint64_t> len(nreg);
        std::vector<uint8_t> wb(nreg);
        for (uint32_t i = 0; i < nreg; i++) {
            len[i] = read_u64();
            if (!read_full(&wb[i], 1)) die("truncated region");
            if (len[i] > (uint64_t(1) << 34)) die("region too large");
            // Exact length, so the address sanitizer sees any read past it.
            void* p = nullptr;
            if (posix_memalign(&p, 64, len[i] ? len[i] : 1) != 0) die("out of memory");
            if (len[i] && !read_full(p, len[i])) die("truncated region bytes");
            mem[i] = p;
        }
        uint32_t nbind = read_u32();
        if (nbind > 64) die("too many bindings");
        std::vector<void*> bufs(nbind);
        for (uint32_t i = 0; i < nbind; i++) {
            uint32_t r = read_u32();
            if (r >= nreg) die("binding to a missing region");
            bufs[i] = mem[r];
        }
        const ShimKernel* k = nullptr;
        for (int i = 0; i < shim_nkernels; i++)
            if (name == shim_kernels[i].name) k = &shim_kernels[i];
        std::string err;
        if (!k) {
            err = "no kernel named " + name;
        } else if (int(nbind) != k->nbuffers) {
            err = "kernel " + name + " takes " + std::to_string(k->nbuffers) + " buffers, got " + std::to_string(nbind);
        } else if (tg[0] * tg[1] * tg[2] == 0 || tg[0] * tg[1] * tg[2] > 1024) {
            err = "bad threadgroup size";
        } else if (uint64_t(grid[0]) * grid[1] * grid[2] == 0) {
            err = "empty grid";
        }
        if (!err.empty()) {
            respond_error(err);
        } else {
            execute(*k, bufs.data(), grid, tg);
            write_u32(0);
            write_u32(0);
            for (uint32_t i = 0; i < nreg; i++)
                if (wb[i]) write_full(mem[i], len[i]);
            std::fflush(stdout);
        }
        for (void* p : mem) std::free(p);
    }
}
