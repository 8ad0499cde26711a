// The emulator's runtime (one copy per program: include it once, from the
// file with main): the thread and group ids, the barriers, and the grid
// loop that runs each group as QP_TG threads, one group at a time.
#pragma once
#include <thread>
#include <vector>

thread_local uint qp_emu_tid;
uint qp_emu_gx, qp_emu_gy;
QpEmuWarp qp_emu_warps[8];
float qp_emu_shfl[8][32];
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
