// Executes qpack's Metal kernels, compiled as C++ through metal_stdlib, on the
// CPU. The Go test (metal/shim_test.go) starts this program once and sends it
// launches on stdin; for each it returns the buffers the kernel may write.
//
// Two executors run a threadgroup's threads, each thread with its own stack
// and context, so that threadgroup barriers and simdgroup exchanges are real
// suspension points; threadgroups run one after another, which is what lets
// threadgroup memory be a `static` local of the kernel.
//   - fibers (default): user-level threads (ucontext) on one OS thread. Each
//     thread runs until it reaches a barrier, an exchange or the end; a
//     barrier opens once every thread still running has reached it. The
//     schedule is deterministic and as unfavourable as possible to a missing
//     barrier (a thread runs as far ahead of the others as it can), and
//     barrier divergence (threads waiting at different barriers) is reported
//     instead of hanging. Fast: a launch costs about a millisecond.
//   - threads (QPACK_SHIM_EXECUTOR=threads): one std::thread per GPU thread
//     with futex barriers. Truly concurrent, but each barrier wakes hundreds
//     of OS threads: tens of milliseconds per launch on a small machine.
//
// Protocol (little-endian):
//   request:  u32 magic 'QPL2' | u32 name length | name | u32 grid[3] |
//             u32 threadgroup[3] | u32 regions | per region: u64 length,
//             u8 writeback, bytes | u32 bindings | per binding: u32 region |
//             u32 fixups | per fixup: u32 byte offset in the parameter
//             block (the last binding), u32 region, u64 byte offset: the
//             harness writes the address of its copy of that region plus
//             the offset there (a QP_GLOBAL pointer of the shared dialect;
//             the host sends its own addresses, which mean nothing here)
//   response: u32 status (0 ok) | u32 message length | message |
//             if ok, the bytes of every writeback region in order.
#include "shim_rt.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <csetjmp>
#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define QP_ASAN 1
#endif

namespace {

// A reusable barrier whose participants can leave (a thread returning from
// the kernel must not hold up the threads still running it). Arrivals are
// counted under a mutex; waiters sleep on an atomic generation (futex), so a
// release does not make them queue for the mutex.
class Barrier {
   public:
    void reset(int n) {
        std::lock_guard<std::mutex> lk(mu_);
        expected_ = n;
        arrived_ = 0;
    }
    // wait blocks until every participant has arrived; the last one to
    // arrive runs last() before releasing the others.
    template <class F>
    void wait(F last) {
        uint32_t gen;
        {
            std::lock_guard<std::mutex> lk(mu_);
            gen = gen_.load(std::memory_order_relaxed);
            if (++arrived_ >= expected_) {
                last();
                release();
                return;
            }
        }
        while (gen_.load(std::memory_order_acquire) == gen) gen_.wait(gen, std::memory_order_acquire);
    }
    void wait() {
        wait([] {});
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
        gen_.fetch_add(1, std::memory_order_release);
        gen_.notify_all();
    }
    std::mutex mu_;
    int expected_ = 0, arrived_ = 0;
    std::atomic<uint32_t> gen_{0};
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
            int w = nthreads - s * 32;
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

// die reports a broken request or an impossible state and ends the process
// at once: it may be called on an executor thread, where std::exit would run
// the static destructors (the pool joining the very thread calling it).
[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "harness: %s\n", what);
    std::fflush(stderr);
    std::_Exit(2);
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

// One launch: kernel k over grid threadgroups of tg threads.
struct Job {
    const ShimKernel* k;
    void** bufs;
    uint32_t grid[3], tg[3];
    int nthreads;
    Group* group;
    Barrier* outer;
};

// Thread tid of every threadgroup of the job, one threadgroup after another.
void run_thread(const Job& j, int tid) {
    Group& group = *j.group;
    tgroup = &group;
    tsimd = &group.simds[tid / 32];
    shim::ThreadCtx& c = tctx;
    const uint32_t* tg = j.tg;
    const uint32_t* grid = j.grid;
    c.threads_per_threadgroup = {tg[0], tg[1], tg[2]};
    c.threadgroups_per_grid = {grid[0], grid[1], grid[2]};
    c.threads_per_grid = {grid[0] * tg[0], grid[1] * tg[1], grid[2] * tg[2]};
    c.thread_index_in_threadgroup = uint32_t(tid);
    c.thread_index_in_simdgroup = uint32_t(tid % 32);
    c.simdgroup_index_in_threadgroup = uint32_t(tid / 32);
    c.threads_per_simdgroup = 32;
    c.simdgroups_per_threadgroup = uint32_t((j.nthreads + 31) / 32);
    uint32_t lx = uint32_t(tid) % tg[0];
    uint32_t ly = (uint32_t(tid) / tg[0]) % tg[1];
    uint32_t lz = uint32_t(tid) / (tg[0] * tg[1]);
    c.thread_position_in_threadgroup = {lx, ly, lz};
    for (uint32_t gz = 0; gz < grid[2]; gz++)
        for (uint32_t gy = 0; gy < grid[1]; gy++)
            for (uint32_t gx = 0; gx < grid[0]; gx++) {
                c.threadgroup_position_in_grid = {gx, gy, gz};
                c.thread_position_in_grid = {gx * tg[0] + lx, gy * tg[1] + ly, gz * tg[2] + lz};
                j.k->fn(j.bufs);
                // This thread has returned: it leaves the barriers the rest
                // of its threadgroup and simdgroup may still be using.
                group.bar.leave([] {});
                tsimd->bar.leave([&] { tsimd->active[tid % 32] = false; });
                // The last thread of the threadgroup resets the group for
                // the next one before anyone starts it.
                j.outer->wait([&] { group.reset(j.nthreads); });
            }
}

// Pool keeps the executor threads alive across launches (creating hundreds
// of threads per launch would dominate the run time). Its destructor (run
// when main returns at the end of the requests) stops and joins them: left
// waiting, they would block the condition variable's destruction and the
// process would never exit, outliving the test binary that started it.
class Pool {
   public:
    ~Pool() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& w : workers_) w.join();
    }

    void run(const Job& j) {
        while (int(workers_.size()) < j.nthreads) {
            int id = int(workers_.size());
            workers_.emplace_back([this, id] { work(id); });
        }
        {
            std::lock_guard<std::mutex> lk(mu_);
            job_ = j;
            running_ = j.nthreads;
            gen_++;
        }
        cv_.notify_all();
        std::unique_lock<std::mutex> lk(mu_);
        done_.wait(lk, [&] { return running_ == 0; });
    }

   private:
    void work(int id) {
        uint64_t seen = 0;
        for (;;) {
            Job j;
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return stop_ || (gen_ != seen && id < job_.nthreads); });
                if (stop_) return;
                seen = gen_;
                j = job_;
            }
            run_thread(j, id);
            std::lock_guard<std::mutex> lk(mu_);
            if (--running_ == 0) done_.notify_one();
        }
    }
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_, done_;
    Job job_{};
    int running_ = 0;
    uint64_t gen_ = 0;
    bool stop_ = false;
};

Pool pool;

// ---- fiber executor ----

enum FiberState { kRun, kWaitGroup, kWaitSimd, kDone };

struct Fiber {
    ucontext_t ctx;  // where a fresh fiber starts
    std::jmp_buf jb; // where a suspended fiber resumes
    char* stack = nullptr;
    FiberState state = kRun;
    bool started = false;
    int tid = 0;
    shim::ThreadCtx tc;
#ifdef QP_ASAN
    void* fake = nullptr;
#endif
};

constexpr size_t kFiberStack = 64 << 10;

struct FiberSched {
    std::jmp_buf main;
    std::vector<Fiber> fibers;
    Fiber* cur = nullptr;
    const Job* job = nullptr;
    SimdGroup* simd_slots = nullptr;
#ifdef QP_ASAN
    const void* main_bottom = nullptr;
    size_t main_size = 0;
    void* main_fake = nullptr;
#endif
    std::string error;
};

FiberSched fs;
bool use_fibers = true;

// Switches from the scheduler to fiber f: a fiber's first entry goes
// through its ucontext (one system call), every later switch in either
// direction is a _setjmp/_longjmp pair (no system call). A fiber runs
// threadgroup after threadgroup of one launch: when a thread of the kernel
// returns, the fiber parks until the scheduler re-arms it for the next
// threadgroup.
void fiber_enter(Fiber& f) {
    fs.cur = &f;
#ifdef QP_ASAN
    __sanitizer_start_switch_fiber(&fs.main_fake, f.stack, kFiberStack);
#endif
    if (!_setjmp(fs.main)) {
        if (!f.started) {
            f.started = true;
            setcontext(&f.ctx);
        }
        _longjmp(f.jb, 1);
    }
#ifdef QP_ASAN
    __sanitizer_finish_switch_fiber(fs.main_fake, nullptr, nullptr);
#endif
    fs.cur = nullptr;
}

// Switches from the current fiber back to the scheduler.
void fiber_yield() {
    Fiber& f = *fs.cur;
#ifdef QP_ASAN
    __sanitizer_start_switch_fiber(&f.fake, fs.main_bottom, fs.main_size);
#endif
    if (!_setjmp(f.jb)) _longjmp(fs.main, 1);
#ifdef QP_ASAN
    __sanitizer_finish_switch_fiber(f.fake, &fs.main_bottom, &fs.main_size);
#endif
}

void fiber_entry() {
#ifdef QP_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &fs.main_bottom, &fs.main_size);
#endif
    for (;;) {
        fs.job->k->fn(fs.job->bufs);
        fs.cur->state = kDone;
        fiber_yield();  // resumed for the next threadgroup
    }
}

void fiber_wait(FiberState st) {
    fs.cur->state = st;
    fiber_yield();
}

void fiber_execute(const Job& j) {
    const int n = j.nthreads;
    fs.job = &j;
    fs.error.clear();
    if (int(fs.fibers.size()) < n) fs.fibers.resize(n);
    for (int i = 0; i < n; i++)
        if (!fs.fibers[i].stack) fs.fibers[i].stack = static_cast<char*>(std::malloc(kFiberStack));
    for (int tid = 0; tid < n; tid++) {
        Fiber& f = fs.fibers[tid];
        f.started = false;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = kFiberStack;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_entry, 0);
    }
    const int nsimd = (n + 31) / 32;
    std::unique_ptr<SimdGroup[]> slots(new SimdGroup[nsimd]);
    fs.simd_slots = slots.get();
    const uint32_t* tg = j.tg;
    const uint32_t* grid = j.grid;
    for (uint32_t gz = 0; gz < grid[2]; gz++)
        for (uint32_t gy = 0; gy < grid[1]; gy++)
            for (uint32_t gx = 0; gx < grid[0]; gx++) {
                for (int s = 0; s < nsimd; s++) {
                    int w = n - s * 32 > 32 ? 32 : n - s * 32;
                    slots[s].width = w;
                    for (int l = 0; l < 32; l++) slots[s].active[l] = l < w;
                }
                for (int tid = 0; tid < n; tid++) {
                    Fiber& f = fs.fibers[tid];
                    f.tid = tid;
                    f.state = kRun;
                    shim::ThreadCtx& c = f.tc;
                    c.threads_per_threadgroup = {tg[0], tg[1], tg[2]};
                    c.threadgroups_per_grid = {grid[0], grid[1], grid[2]};
                    c.threads_per_grid = {grid[0] * tg[0], grid[1] * tg[1], grid[2] * tg[2]};
                    c.thread_index_in_threadgroup = uint32_t(tid);
                    c.thread_index_in_simdgroup = uint32_t(tid % 32);
                    c.simdgroup_index_in_threadgroup = uint32_t(tid / 32);
                    c.threads_per_simdgroup = 32;
                    c.simdgroups_per_threadgroup = uint32_t(nsimd);
                    uint32_t lx = uint32_t(tid) % tg[0];
                    uint32_t ly = (uint32_t(tid) / tg[0]) % tg[1];
                    uint32_t lz = uint32_t(tid) / (tg[0] * tg[1]);
                    c.thread_position_in_threadgroup = {lx, ly, lz};
                    c.threadgroup_position_in_grid = {gx, gy, gz};
                    c.thread_position_in_grid = {gx * tg[0] + lx, gy * tg[1] + ly, gz * tg[2] + lz};
                }
                for (;;) {
                    // Run every runnable thread until it blocks or ends.
                    for (int tid = 0; tid < n; tid++)
                        if (fs.fibers[tid].state == kRun) fiber_enter(fs.fibers[tid]);
                    int live = 0, atGroup = 0;
                    for (int tid = 0; tid < n; tid++) {
                        FiberState st = fs.fibers[tid].state;
                        if (st != kDone) live++;
                        if (st == kWaitGroup) atGroup++;
                    }
                    if (live == 0) break;
                    bool released = false;
                    if (atGroup == live) {
                        for (int tid = 0; tid < n; tid++)
                            if (fs.fibers[tid].state == kWaitGroup) fs.fibers[tid].state = kRun;
                        released = true;
                    } else {
                        for (int s = 0; s < nsimd; s++) {
                            int lo = s * 32, hi = lo + slots[s].width;
                            int slive = 0, atSimd = 0;
                            for (int tid = lo; tid < hi; tid++) {
                                FiberState st = fs.fibers[tid].state;
                                if (st != kDone) slive++;
                                if (st == kWaitSimd) atSimd++;
                            }
                            if (slive > 0 && atSimd == slive) {
                                for (int tid = lo; tid < hi; tid++)
                                    if (fs.fibers[tid].state == kWaitSimd) fs.fibers[tid].state = kRun;
                                released = true;
                            }
                        }
                    }
                    if (!released) {
                        fs.error = "barrier divergence in threadgroup (" + std::to_string(gx) + "," + std::to_string(gy) + "," +
                                   std::to_string(gz) + "): threads wait at different barriers";
                        return;  // the stuck fibers are abandoned: the next launch restarts every fiber
                    }
                }
            }
}

void execute(const ShimKernel& k, void** bufs, const uint32_t grid[3], const uint32_t tg[3]) {
    Job j;
    j.k = &k;
    j.bufs = bufs;
    for (int i = 0; i < 3; i++) {
        j.grid[i] = grid[i];
        j.tg[i] = tg[i];
    }
    j.nthreads = int(tg[0] * tg[1] * tg[2]);
    if (use_fibers) {
        fiber_execute(j);
        return;
    }
    Group group(j.nthreads);
    group.reset(j.nthreads);
    Barrier outer;
    outer.reset(j.nthreads);
    j.group = &group;
    j.outer = &outer;
    pool.run(j);
}

}  // namespace

namespace shim {

const ThreadCtx& ctx() { return use_fibers ? fs.cur->tc : tctx; }

void threadgroup_barrier() {
    if (use_fibers) {
        fiber_wait(kWaitGroup);
        return;
    }
    tgroup->bar.wait();
}

uint32_t simd_exchange(const void* in, void* out, size_t size) {
    if (size > 16) die("simd value larger than 16 bytes");
    unsigned lane = ctx().thread_index_in_simdgroup;
    SimdGroup& s = use_fibers ? fs.simd_slots[ctx().simdgroup_index_in_threadgroup] : *tsimd;
    std::memcpy(s.slot[lane], in, size);
    if (use_fibers) {
        fiber_wait(kWaitSimd);
    } else {
        s.bar.wait();
    }
    uint32_t mask = 0;
    for (int i = 0; i < s.width; i++) {
        bool active = use_fibers ? fs.fibers[ctx().simdgroup_index_in_threadgroup * 32 + i].state != kDone : s.active[i];
        if (active) {
            mask |= 1u << i;
            std::memcpy(static_cast<unsigned char*>(out) + i * size, s.slot[i], size);
        }
    }
    if (use_fibers) {
        fiber_wait(kWaitSimd);
    } else {
        s.bar.wait();
    }
    return mask;
}

}  // namespace shim

int main() {
    if (const char* e = std::getenv("QPACK_SHIM_EXECUTOR")) {
        if (std::string(e) == "threads") {
            use_fibers = false;
        } else if (std::string(e) != "fibers") {
            die("QPACK_SHIM_EXECUTOR must be fibers or threads");
        }
    }
    for (;;) {
        unsigned char mb[4];
        size_t got = std::fread(mb, 1, 4, stdin);
        if (got == 0) return 0;  // end of requests
        if (got != 4 || std::memcmp(mb, "QPL2", 4) != 0) die("bad request magic");
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
        uint32_t nfix = read_u32();
        if (nfix > 64) die("too many fixups");
        for (uint32_t i = 0; i < nfix; i++) {
            uint32_t field = read_u32();
            uint32_t r = read_u32();
            uint64_t off = read_u64();
            if (nbind == 0 || r >= nreg) die("fixup of a missing region");
            uint32_t pr = 0;
            for (uint32_t b = 0; b < nreg; b++)
                if (mem[b] == bufs[nbind - 1]) pr = b;
            if (uint64_t(field) + 8 > len[pr] || field % 8 != 0) die("fixup outside the parameter block");
            if (off > len[r]) die("fixup past its region");
            unsigned char* addr = static_cast<unsigned char*>(mem[r]) + off;
            std::memcpy(static_cast<unsigned char*>(bufs[nbind - 1]) + field, &addr, 8);
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
            if (use_fibers && !fs.error.empty()) {
                respond_error("kernel " + name + ": " + fs.error);
                for (void* p : mem) std::free(p);
                continue;
            }
            write_u32(0);
            write_u32(0);
            for (uint32_t i = 0; i < nreg; i++)
                if (wb[i]) write_full(mem[i], len[i]);
            std::fflush(stdout);
        }
        for (void* p : mem) std::free(p);
    }
}
