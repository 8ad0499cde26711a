// The emulator's runtime (one copy per program: include it once, from the
// file with main): the thread and group ids, the barriers, and the grid
// loop that runs each group as QP_TG threads, one group at a time.
//
// A group's threads are fibers on one OS thread (cpurun's fiber.h: the
// switch written once for both CPU runs of the kernels), resumed in turn
// by a scheduler: a thread runs until it waits at a barrier (the group's,
// or its warp's for the simdgroup exchanges) or returns, and a waiting
// thread runs on once the barrier's last thread has arrived. A sweep over
// the threads in which none arrived at, left or ran past a barrier can
// never end the wait (a thread skipped a barrier its group or warp waits
// at): the emulator then stops with exit status 3 and says where, instead
// of hanging. With an OS thread per GPU thread and pthread barriers, a
// group of 256 cost hundreds of trips through the kernel's scheduler per
// barrier on a 2-core machine: the emulated MoE kernels took 267 s there,
// 14 s as fibers.
//
// Built with ThreadSanitizer (TestGemmEmulatedRaces), the threads are OS
// threads and the barriers pthread barriers, as before: TSan checks the
// order of real threads (it does not take fibers switched this way for
// threads), so an access to shared memory that no barrier orders is a race
// it reports.
#pragma once

#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_THREAD__)
#define QP_EMU_THREADS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define QP_EMU_THREADS 1
#endif
#endif
#ifndef QP_EMU_THREADS
#define QP_EMU_THREADS 0
#endif

uint qp_emu_gx, qp_emu_gy, qp_emu_groups;
QpEmuWarp qp_emu_warps[8];
float qp_emu_shfl[8][32];

#if QP_EMU_THREADS
#include <pthread.h>

#include <thread>
#include <vector>

thread_local uint qp_emu_tid;
uint qp_emu_thread_id() { return qp_emu_tid; }
static pthread_barrier_t qp_emu_group_barrier;
static pthread_barrier_t qp_emu_warp_barriers[8];

void qp_emu_barrier() { pthread_barrier_wait(&qp_emu_group_barrier); }
void qp_emu_warp_barrier(uint w) { pthread_barrier_wait(&qp_emu_warp_barriers[w]); }

// qp_emu_run runs kern(p) over gx × gy groups of QP_TG threads.
template <typename P>
void qp_emu_run(void (*kern)(P), const P& p, uint gx, uint gy) {
    pthread_barrier_init(&qp_emu_group_barrier, nullptr, QP_TG);
    for (auto& wb : qp_emu_warp_barriers) {
        pthread_barrier_init(&wb, nullptr, 32);
    }
    qp_emu_groups = gx * gy;
    for (uint y = 0; y < gy; y++) {
        for (uint x = 0; x < gx; x++) {
            qp_emu_gx = x;
            qp_emu_gy = y;
            std::vector<std::thread> th;
            for (uint t = 0; t < QP_TG; t++) {
                th.emplace_back([=] {
                    qp_emu_tid = t;
                    kern(p);
                });
            }
            for (auto& t : th) {
                t.join();
            }
        }
    }
}

#else
#include "../../../internal/gpukernels/cpurun/src/fiber.h"

uint qp_emu_tid; // the running fiber's thread id
uint qp_emu_thread_id() { return qp_emu_tid; }

namespace qp_emu {

struct Barrier {
    uint expected; // threads that wait at it
    uint count;    // arrived in this round
    uint round;    // rounds completed
};

static Barrier group_barrier = {QP_TG, 0, 0};
static Barrier warp_barriers[QP_TG / 32];
static qpfiber::Context scheduler;
static qpfiber::Context fibers[QP_TG];
static bool finished[QP_TG];
static bool progress; // something changed in this sweep


// wait blocks the running thread at b until b.expected threads have
// arrived; the last one to arrive runs on without yielding.
static void wait(Barrier& b) {
    progress = true;
    uint round = b.round;
    if (++b.count == b.expected) {
        b.count = 0;
        b.round++;
        return;
    }
    uint me = qp_emu_tid;
    while (b.round == round) {
        qpfiber::swap(fibers[me], scheduler);
    }
    progress = true;
}

// Launch runs kern(*p) as a fiber's whole life, then hands the OS thread
// back to the scheduler for good.
template <typename P>
struct Launch {
    static void (*kern)(P);
    static const P* p;
    static void entry(void*) {
        kern(*p);
        uint me = qp_emu_tid;
        finished[me] = true;
        progress = true;
        qpfiber::swap(fibers[me], scheduler);
    }
};
template <typename P>
void (*Launch<P>::kern)(P);
template <typename P>
const P* Launch<P>::p;

} // namespace qp_emu

void qp_emu_barrier() { qp_emu::wait(qp_emu::group_barrier); }
void qp_emu_warp_barrier(uint w) { qp_emu::wait(qp_emu::warp_barriers[w]); }

// qp_emu_run runs kern(p) over gx × gy groups of QP_TG threads.
template <typename P>
void qp_emu_run(void (*kern)(P), const P& p, uint gx, uint gy) {
    using namespace qp_emu;
    static qpfiber::Stacks stacks(QP_TG, 256 << 10);
    Launch<P>::kern = kern;
    Launch<P>::p = &p;
    for (auto& wb : warp_barriers) {
        wb = Barrier{32, 0, 0};
    }
    group_barrier = Barrier{QP_TG, 0, 0};
    qp_emu_groups = gx * gy;
    for (uint y = 0; y < gy; y++) {
        for (uint x = 0; x < gx; x++) {
            qp_emu_gx = x;
            qp_emu_gy = y;
            for (uint t = 0; t < QP_TG; t++) {
                qpfiber::start(fibers[t], stacks.at(t), stacks.size(), Launch<P>::entry, nullptr);
                finished[t] = false;
            }
            uint left = QP_TG;
            while (left > 0) {
                progress = false;
                for (uint t = 0; t < QP_TG; t++) {
                    if (finished[t]) {
                        continue;
                    }
                    qp_emu_tid = t;
                    qpfiber::swap(scheduler, fibers[t]);
                    if (finished[t]) {
                        left--;
                    }
                }
                if (!progress && left > 0) {
                    fprintf(stderr, "emu: group (%u, %u): %u threads wait at a barrier that no other thread will reach "
                                    "(group barrier: %u arrived)\n",
                            x, y, left, group_barrier.count);
                    exit(3);
                }
            }
        }
    }
}
#endif
