// Test-only kernels, compiled into the C++ shim harness (never into the Metal
// library): they check the executor itself.

struct SelfTest {
    ulong in_off;
    ulong out_off;
    uint n;
    uint mode;
};

// Each thread publishes a value in threadgroup memory and reads its
// neighbour's. mode 1 skips the barrier: a correct executor must then be
// able to show the missing barrier (the fiber executor always does).
kernel void selftest_barrier(device const uchar* ib [[buffer(0)]],
                             device uchar* ob [[buffer(1)]],
                             constant SelfTest& p [[buffer(2)]],
                             uint3 tg [[threadgroup_position_in_grid]],
                             uint tid [[thread_index_in_threadgroup]],
                             uint3 tptg [[threads_per_threadgroup]]) {
    threadgroup float shared[64];
    device const float* in = (device const float*)(ib + p.in_off) + tg.x * tptg.x;
    device float* out = (device float*)(ob + p.out_off) + tg.x * tptg.x;
    shared[tid] = in[tid];
    if (p.mode == 0) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[tid] = shared[(tid + 1) % tptg.x];
    // Keep the next threadgroup from seeing this one's values.
    threadgroup_barrier(mem_flags::mem_threadgroup);
    shared[tid] = -1.0f;
}

// Simdgroup functions with a partial last simdgroup and lanes that have
// returned: out[tid] = (sum, max, value of lane 0, value of lane+1) over the
// active lanes of the caller's simdgroup. Lanes with in[tid] < 0 return.
kernel void selftest_simd(device const uchar* ib [[buffer(0)]],
                          device uchar* ob [[buffer(1)]],
                          constant SelfTest& p [[buffer(2)]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]]) {
    device const float* in = (device const float*)(ib + p.in_off);
    device float* out = (device float*)(ob + p.out_off) + tid * 4;
    float v = in[tid];
    if (v < 0.0f) {
        return;
    }
    out[0] = simd_sum(v);
    out[1] = simd_max(v);
    out[2] = simd_broadcast(v, 0);
    out[3] = simd_shuffle_down(v, 1);
    (void)lane;
}

// Threads of one simdgroup waiting at different barriers, half at the
// threadgroup barrier and half in a simdgroup exchange (undefined on a GPU,
// a deadlock for the thread executor): the fiber executor must report it.
kernel void selftest_diverge(device const uchar* ib [[buffer(0)]],
                             device uchar* ob [[buffer(1)]],
                             constant SelfTest& p [[buffer(2)]],
                             uint tid [[thread_index_in_threadgroup]]) {
    device float* out = (device float*)(ob + p.out_off);
    float v = 1.0f;
    if (tid < 16) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    } else {
        v = simd_sum(v);
    }
    out[tid] = v;
    (void)ib;
}
