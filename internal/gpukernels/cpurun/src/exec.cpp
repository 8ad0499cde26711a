// Runs one launch of a shared kernel body (compiled through prelude_cpu.h)
// on the CPU, for cpurun. Groups run one after another; a group's QP_TG
// threads are fibers of this OS thread (fiber.h), each run until it returns,
// reaches a barrier or a simdgroup reduction. A barrier opens when all the
// group's threads wait at one; a reduction completes when all 32 lanes of a
// simdgroup wait at one (computed as the GPU butterfly: v op= v[lane ^ o],
// o = 16 .. 1). Anything else (a thread returned while others wait at a
// barrier, a reduction with returned lanes, lanes at different ops) is
// reported as an error: it is undefined on a GPU.
//
// Protocol on stdin (little-endian), one launch after another until the
// end of the input: u32 name length, name, u32 groups, u32 buffers, per
// buffer u64 length + bytes, u32 parameter length, the parameter block, u32
// pointer fields. The first pointer fields of the block are addresses
// (buffer+1)<<40 | byte offset (0: null), relocated here. Each buffer ends
// at a PROT_NONE page, so a read or write past its end crashes the process.
// Reply on stdout to each launch: u32 0 and every buffer's bytes; or u32 1,
// u32 length, message, and the process ends (so does it on a crash: the
// harness starts another for the next launch). Kernels' threadgroup memory
// (static variables here) keeps what the last group of the last launch
// left in it, as a GPU's is undefined at a group's start.
#include "prelude_cpu.h"
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Kernel {
    const char* name;
    unsigned size;
    qkcpu::Fn fn;
};
std::vector<Kernel>& registry() {
    static std::vector<Kernel> r;
    return r;
}

enum State { RUN, BAR, SIMD, DONE };
struct Fiber {
    qpfiber::Context ctx;
    State st;
    int op;
    float in, out;
    uint32_t uin, uout; // the integer reductions' (ops 2, 3 and 5)
};
const int kThreads = QP_TG;
Fiber fibers[kThreads];
qpfiber::Stacks* stacks;
qpfiber::Context sched;
int cur;
uint group;
qkcpu::Fn curFn;
const void* curParams;

[[noreturn]] void fail(const std::string& msg) {
    // Ends the process: the harness starts a fresh one for the next launch.
    uint32_t h[2] = {1, uint32_t(msg.size())};
    fwrite(h, 4, 2, stdout);
    fwrite(msg.data(), 1, msg.size(), stdout);
    fflush(stdout);
    _exit(0);
}

void yield() { qpfiber::swap(fibers[cur].ctx, sched); }

// entry is a fiber's whole life: the kernel, then back to the scheduler
// for good.
void entry(void*) {
    curFn(curParams);
    fibers[cur].st = DONE;
    yield();
}

void runGroup() {
    for (int i = 0; i < kThreads; i++) {
        Fiber& f = fibers[i];
        qpfiber::start(f.ctx, stacks->at(i), stacks->size(), entry, nullptr);
        f.st = RUN;
    }
    for (;;) {
        bool progress = false;
        for (int i = 0; i < kThreads; i++) {
            if (fibers[i].st == RUN) {
                cur = i;
                qpfiber::swap(sched, fibers[i].ctx);
                progress = true;
            }
        }
        for (int s = 0; s < kThreads / 32; s++) {
            Fiber* l = &fibers[32 * s];
            int n = 0;
            for (int j = 0; j < 32; j++) n += l[j].st == SIMD;
            if (n == 0) continue;
            if (n != 32) {
                if (progress) continue;
                fail("group " + std::to_string(group) + ": a simdgroup reduction in simdgroup " + std::to_string(s) +
                     " with only " + std::to_string(n) + " of 32 lanes (the others returned or wait at a barrier)");
            }
            for (int j = 0; j < 32; j++) {
                if (l[j].op != l[0].op) fail("lanes of one simdgroup at different reductions");
            }
            if (l[0].op == 4) {
                // An exchange: lane j gets lane j ^ o's value (o the same
                // in every lane, below 32).
                uint32_t o = l[0].uin;
                for (int j = 0; j < 32; j++) {
                    if (l[j].uin != o) fail("lanes of one simdgroup exchanging with different lanes");
                }
                if (o >= 32) fail("a simdgroup exchange with lane ^ " + std::to_string(o));
                for (int j = 0; j < 32; j++) {
                    l[j].out = l[j ^ o].in;
                }
                for (int j = 0; j < 32; j++) {
                    l[j].st = RUN;
                }
                progress = true;
                continue;
            }
            if (l[0].op >= 2) {
                // An integer's maximum, minimum or sum (modulo 2^32): one
                // value for every lane.
                uint32_t r = l[0].uin;
                for (int j = 1; j < 32; j++) {
                    uint32_t u = l[j].uin;
                    r = l[0].op == 2 ? (u > r ? u : r) : l[0].op == 3 ? (u < r ? u : r) : r + u;
                }
                for (int j = 0; j < 32; j++) {
                    l[j].uout = r;
                    l[j].st = RUN;
                }
                progress = true;
                continue;
            }
            float v[32], w[32];
            for (int j = 0; j < 32; j++) {
                v[j] = l[j].in;
            }
            for (int o = 16; o > 0; o >>= 1) {
                for (int j = 0; j < 32; j++) {
                    float a = v[j], b = v[j ^ o];
                    w[j] = l[0].op == 0 ? a + b : std::fmax(a, b);
                }
                std::memcpy(v, w, sizeof v);
            }
            for (int j = 0; j < 32; j++) {
                l[j].out = v[j];
                l[j].st = RUN;
            }
            progress = true;
        }
        if (progress) continue;
        int done = 0, bar = 0;
        for (int i = 0; i < kThreads; i++) {
            done += fibers[i].st == DONE;
            bar += fibers[i].st == BAR;
        }
        if (done == kThreads) return;
        if (bar == kThreads) {
            for (int i = 0; i < kThreads; i++) fibers[i].st = RUN;
            continue;
        }
        fail("group " + std::to_string(group) + ": " + std::to_string(bar) + " threads wait at a barrier, " +
             std::to_string(done) + " have returned");
    }
}

void readAll(void* p, size_t n) {
    if (n && fread(p, 1, n, stdin) != n) fail("short request");
}

// launch reads one request, runs it and replies.
void launch(uint32_t nameLen);
uint32_t readU32() {
    uint32_t v;
    readAll(&v, 4);
    return v;
}

}  // namespace

namespace qkcpu {
Ids ids() { return Ids{uint(cur), uint(cur) & 31u, uint(cur) >> 5, group, 0}; }
void barrier() {
    fibers[cur].st = BAR;
    yield();
}
float simd_op(float v, int op) {
    fibers[cur].in = v;
    fibers[cur].op = op;
    fibers[cur].st = SIMD;
    yield();
    return fibers[cur].out;
}
float simd_xor(float v, uint o) {
    fibers[cur].in = v;
    fibers[cur].uin = o;
    fibers[cur].op = 4;
    fibers[cur].st = SIMD;
    yield();
    return fibers[cur].out;
}
uint simd_op_u(uint v, int op) {
    fibers[cur].uin = v;
    fibers[cur].op = op;
    fibers[cur].st = SIMD;
    yield();
    return fibers[cur].uout;
}
Reg::Reg(const char* name, unsigned size, Fn fn) { registry().push_back(Kernel{name, size, fn}); }
}  // namespace qkcpu

int main() {
    stacks = new qpfiber::Stacks(kThreads, 256 << 10);
    for (;;) {
        uint32_t nameLen;
        size_t got = fread(&nameLen, 1, 4, stdin);
        if (got == 0 && feof(stdin)) return 0; // the harness closed its end
        if (got != 4) fail("short request");
        launch(nameLen);
    }
}

namespace {
void launch(uint32_t nameLen) {
    std::string name(nameLen, '\0');
    readAll(&name[0], name.size());
    uint32_t groups = readU32();
    uint32_t nbuf = readU32();
    long page = sysconf(_SC_PAGESIZE);
    std::vector<char*> base(nbuf), maps(nbuf);
    std::vector<uint64_t> len(nbuf);
    std::vector<size_t> spans(nbuf);
    for (uint32_t i = 0; i < nbuf; i++) {
        readAll(&len[i], 8);
        size_t span = (len[i] + page - 1) / page * page;
        char* m = (char*)mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) fail("mmap");
        mprotect(m + span, page, PROT_NONE);
        maps[i] = m;
        spans[i] = span + page;
        base[i] = m + span - len[i];
        readAll(base[i], len[i]);
    }
    std::vector<char> params(readU32());
    readAll(params.data(), params.size());
    uint32_t nptr = readU32();
    if (8 * nptr > params.size()) fail("pointer fields past the parameter block");
    for (uint32_t i = 0; i < nptr; i++) {
        uint64_t a;
        std::memcpy(&a, &params[8 * i], 8);
        char* p = nullptr;
        if (a != 0) {
            uint64_t b = (a >> 40) - 1, off = a & ((uint64_t(1) << 40) - 1);
            if (b >= nbuf || off > len[b]) fail("pointer field " + std::to_string(i) + " is in no buffer");
            p = base[b] + off;
        }
        std::memcpy(&params[8 * i], &p, 8);
    }
    const Kernel* k = nullptr;
    for (const Kernel& r : registry()) {
        if (name == r.name) k = &r;
    }
    if (!k) fail("no kernel " + name);
    if (k->size != params.size()) {
        fail("kernel " + name + ": parameter block of " + std::to_string(params.size()) + " bytes, the struct has " +
             std::to_string(k->size));
    }
    curFn = k->fn;
    curParams = params.data();
    for (group = 0; group < groups; group++) runGroup();
    uint32_t ok = 0;
    fwrite(&ok, 4, 1, stdout);
    for (uint32_t i = 0; i < nbuf; i++) fwrite(base[i], 1, len[i], stdout);
    fflush(stdout);
    for (uint32_t i = 0; i < nbuf; i++) munmap(maps[i], spans[i]);
}
}  // namespace
