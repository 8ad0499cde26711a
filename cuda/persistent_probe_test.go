package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The persistent decode kernel's first measurement (cuda/README.md, "Next"):
// what one grid-wide barrier costs, and how close a chain of dependent
// phases separated by barriers inside one launch comes to the HBM limit,
// against the same phases as one kernel each (on the stream, and in a graph
// with programmatic dependent launches, as a layer's ops run now). The probe
// kernels are this file's own module, compiled on a device opened for the
// benchmark alone; they are not the backend's Source() and not recorded.

// probeSource: probe_phase reads one phase's slice of src (a grid-stride
// sum, four loads in flight a thread); probe_persistent reads every phase's
// slice in order with a grid-wide barrier after each. The barrier is a
// monotonic arrival counter (bar[0]; the host zeroes it before each
// launch): a group's thread 0 publishes the group's writes (a fence),
// arrives, and waits until every group has arrived for this phase, for at
// most about 2^31 cycles; a wait that runs out sets bar[1] and the host
// fails the run rather than hang. The grid must be co-resident (the
// benchmark launches at most two 256-thread groups a multiprocessor).
const probeSource = `
struct alignas(16) pf4 { float x, y, z, w; };

struct ProbeP {
    const pf4* src;
    float* sink;
    unsigned* bar;
    unsigned n4;     // pf4s a phase
    unsigned phases;
    unsigned phase;  // probe_phase: which slice
    unsigned pad;
};
static_assert(sizeof(ProbeP) == 40, "ProbeP layout");

__device__ __forceinline__ float probe_sum(const pf4* s, unsigned n4) {
    float acc = 0.0f;
    unsigned stride = gridDim.x * blockDim.x;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        pf4 a = s[i], b = s[i + stride], c = s[i + 2 * stride], d = s[i + 3 * stride];
        acc += (a.x + a.y + a.z + a.w) + (b.x + b.y + b.z + b.w) + (c.x + c.y + c.z + c.w) + (d.x + d.y + d.z + d.w);
    }
    for (; i < n4; i += stride) {
        pf4 a = s[i];
        acc += a.x + a.y + a.z + a.w;
    }
    return acc;
}

__device__ __forceinline__ unsigned probe_load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ long long probe_clock() {
    long long c;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
    return c;
}

__device__ __forceinline__ void probe_grid_barrier(unsigned* bar, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        // The group's writes (ordered before thread 0's by the barrier
        // above) published at device scope, then the arrival.
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
        long long t0 = probe_clock();
        while (probe_load_acquire(bar) < target) {
            if (probe_clock() - t0 > (1ll << 31)) {
                asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(bar + 1) : "memory");
                break;
            }
        }
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(256) probe_phase(ProbeP p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    float acc = probe_sum(p.src + (unsigned long long)p.phase * p.n4, p.n4);
    if (acc == -1.0f) p.sink[blockIdx.x] = acc; // never: keeps the loads
}

extern "C" __global__ void __launch_bounds__(256) probe_persistent(ProbeP p) {
    float acc = 0.0f;
    for (unsigned ph = 0; ph < p.phases; ph++) {
        acc += probe_sum(p.src + (unsigned long long)ph * p.n4, p.n4);
        probe_grid_barrier(p.bar, (ph + 1) * gridDim.x);
    }
    if (acc == -1.0f) p.sink[blockIdx.x] = acc;
}
`

func probeParams(src, sink, bar devptr, n4, phases, phase int) params {
	return params(nil).ptr(src).ptr(sink).ptr(bar).u32(n4).u32(phases).u32(phase).u32(0)
}

// multiprocessors reads the SM count from the device's label.
func multiprocessors(name string) (int, error) {
	m := regexp.MustCompile(`, (\d+) SMs\)`).FindStringSubmatch(name)
	if m == nil {
		return 0, fmt.Errorf("no SM count in the device label %q", name)
	}
	return strconv.Atoi(m[1])
}

// TestProbeSourceClang: the probe compiles (clang's CUDA front end), so a
// device call is not spent on a syntax error.
func TestProbeSourceClang(t *testing.T) {
	checkProbePTX(t, probeSource, "probe_phase", "probe_persistent")
}

// checkProbePTX compiles a probe's own source to PTX with clang's CUDA
// front end and checks that each of entries is a kernel of it.
func checkProbePTX(t *testing.T, src string, entries ...string) {
	t.Helper()
	dir, out, err := clangCUDA(t, src, "-O2", "-S", "-o", "probe.ptx")
	if err != nil {
		t.Fatalf("clang rejects the probe: %v\n%s", err, out)
	}
	ptx, err := os.ReadFile(filepath.Join(dir, "probe.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range entries {
		if !strings.Contains(string(ptx), ".entry "+k+"(") {
			t.Errorf("%s is not an entry of the PTX", k)
		}
	}
}

func TestMultiprocessors(t *testing.T) {
	n, err := multiprocessors("NVIDIA H200 (sm_90, 132 SMs)")
	if err != nil || n != 132 {
		t.Fatalf("got %d, %v", n, err)
	}
	if _, err := multiprocessors("NVIDIA H200"); err == nil {
		t.Fatal("a label without the count was accepted")
	}
}
