// Fibers for running a GPU group's threads on one OS thread (cpurun's
// exec.cpp, and cuda/testdata/emu/run.h; include it from one file of a
// program: it defines the switch): a context is a suspended stack;
// swap saves the running one into `from` and resumes `to`. On x86-64 Linux
// the switch is a few instructions (the callee-saved registers and the
// stack pointer, as the System V ABI has them); elsewhere it is ucontext's
// swapcontext, which also saves the signal mask with a system call per
// switch: the emulated kernels switch at every barrier and simdgroup
// exchange of every thread, and those calls were half of their run time.
// (ThreadSanitizer does not see fibers as threads: a build for it runs
// the threads as OS threads instead, cuda/testdata/emu/run.h.)
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

#if defined(__x86_64__) && defined(__linux__)
#define QP_FIBER_ASM 1
#else
#define QP_FIBER_ASM 0
#include <ucontext.h>
#endif

#if QP_FIBER_ASM
extern "C" void qp_fiber_switch(void** save_sp, void* load_sp);
extern "C" void qp_fiber_entry();
// qp_fiber_switch pushes rbp, rbx, r12-r15, saves rsp, loads the other
// stack's and pops them back; a new stack "returns" into qp_fiber_entry
// with fn in r12 and arg in r13.
asm(R"(
    .text
    .globl qp_fiber_switch
    .type qp_fiber_switch, @function
qp_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size qp_fiber_switch, .-qp_fiber_switch

    .globl qp_fiber_entry
    .type qp_fiber_entry, @function
qp_fiber_entry:
    andq $-16, %rsp
    movq %r13, %rdi
    call *%r12
    ud2
    .size qp_fiber_entry, .-qp_fiber_entry
)");

#endif

namespace qpfiber {

struct Context {
#if QP_FIBER_ASM
    void* sp = nullptr;
#else
    ucontext_t uc;
    void (*fn)(void*) = nullptr;
    void* arg = nullptr;
#endif
};

// Stacks holds n fiber stacks of size bytes each, every one with pages
// below it that fault (an overflow crashes rather than writing into the
// next stack); memory is committed as the stacks are used.
class Stacks {
  public:
    Stacks(size_t n, size_t size) : size_(size) {
        span_ = n * (kGuard + size);
        void* m = mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "fiber: mmap of %zu bytes of stacks failed\n", span_);
            exit(2);
        }
        base_ = (char*)m;
        for (size_t i = 0; i < n; i++) {
            mprotect(base_ + i * (kGuard + size), kGuard, PROT_NONE);
        }
    }
    char* at(size_t i) const { return base_ + i * (kGuard + size_) + kGuard; }
    size_t size() const { return size_; }

  private:
    static const size_t kGuard = 64 << 10;
    char* base_;
    size_t size_, span_;
};

#if QP_FIBER_ASM

// start makes c run fn(arg) on [stack, stack+size) when first swapped to.
// fn must never return: its last act is a swap away from c.
inline void start(Context& c, char* stack, size_t size, void (*fn)(void*), void* arg) {
    void** top = (void**)((size_t)(stack + size) & ~(size_t)15);
    void** sp = top - 8;
    sp[0] = nullptr;          // r15
    sp[1] = nullptr;          // r14
    sp[2] = arg;              // r13
    sp[3] = (void*)fn;        // r12
    sp[4] = nullptr;          // rbx
    sp[5] = nullptr;          // rbp
    sp[6] = (void*)qp_fiber_entry; // the return address
    sp[7] = nullptr;
    c.sp = sp;
}

inline void swap(Context& from, Context& to) {
    qp_fiber_switch(&from.sp, to.sp);
}
#else
inline Context*& starting() {
    static Context* c;
    return c;
}

inline void ucEntry() {
    Context* c = starting();
    c->fn(c->arg);
    abort(); // fn returned
}

inline void start(Context& c, char* stack, size_t size, void (*fn)(void*), void* arg) {
    c.fn = fn;
    c.arg = arg;
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, ucEntry, 0);
}

inline void swap(Context& from, Context& to) {
    starting() = &to; // read by ucEntry on to's first run
    swapcontext(&from.uc, &to.uc);
}
#endif

} // namespace qpfiber
