// The interface between the MSL shim (metal_stdlib) and the executor
// (harness.cpp). Plain C++ with no MSL macros, so the executor can use the
// standard library freely (the shim defines `thread`, `device`, ... as macros).
#pragma once
#include <cstddef>
#include <cstdint>

namespace shim {

struct Pos {
    uint32_t x, y, z;
};

// Where the calling kernel thread is, in Metal's terms. Threadgroups are
// linearized x fastest; simdgroup s of a threadgroup holds the threads with
// index_in_threadgroup in [32 s, 32 s + 32), as on Apple GPUs.
struct ThreadCtx {
    Pos thread_position_in_grid;
    Pos threadgroup_position_in_grid;
    Pos thread_position_in_threadgroup;
    Pos threads_per_threadgroup;
    Pos threadgroups_per_grid;
    Pos threads_per_grid;
    uint32_t thread_index_in_threadgroup;
    uint32_t thread_index_in_simdgroup;
    uint32_t simdgroup_index_in_threadgroup;
    uint32_t threads_per_simdgroup;
    uint32_t simdgroups_per_threadgroup;
};

// The calling thread's position (valid inside a kernel).
const ThreadCtx& ctx();

// Waits for every thread of the threadgroup that has not yet returned from
// the kernel.
void threadgroup_barrier();

// Simdgroup data exchange: every active lane of the caller's simdgroup
// contributes size (<= 16) bytes at in; out receives lane i's bytes at
// i*size for each active lane i. Returns the mask of active lanes (lanes
// that have not returned from the kernel). All active lanes must call it.
uint32_t simd_exchange(const void* in, void* out, size_t size);

}  // namespace shim

// One compiled kernel: fn calls it with the bound buffers (the parameter
// struct is the last one) for the calling thread's position.
struct ShimKernel {
    const char* name;
    void (*fn)(void** buffers);
    int nbuffers;
};
extern "C" const ShimKernel shim_kernels[];
extern "C" const int shim_nkernels;
