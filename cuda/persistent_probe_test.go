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
	dir, out, err := clangCUDA(t, probeSource, "-O2", "-S", "-o", "probe.ptx")
	if err != nil {
		t.Fatalf("clang rejects the probe: %v\n%s", err, out)
	}
	ptx, err := os.ReadFile(filepath.Join(dir, "probe.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"probe_phase", "probe_persistent"} {
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

// BenchmarkPersistentPhasesGPU prints, for phases of 0 bytes to 16 MiB
// (32 phases, each its own slice of a buffer far larger than the L2): the
// GPU time a phase as one kernel each on the stream, as one kernel each in
// a graph with programmatic dependent launches, and inside one persistent
// launch (a group or two a multiprocessor) with a grid barrier after each;
// and each against the phase's HBM time (its bytes ÷ the copy bandwidth
// measured in the same run). At 0 bytes the persistent figure is the cost
// of one barrier.
func BenchmarkPersistentPhasesGPU(b *testing.B) {
	d, err := openDevice(0)
	if err != nil {
		if os.Getenv("QPACK_CUDA_REQUIRE") == "" {
			b.Skipf("no CUDA device: %v", err)
		}
		b.Fatal(err)
	}
	defer d.close()
	g, ok := d.(*gpu)
	if !ok {
		b.Skip("not a driver device")
	}
	sms, err := multiprocessors(g.name())
	if err != nil {
		b.Fatal(err)
	}
	if _, log, err := g.compile(probeSource, "probe.cu"); err != nil {
		b.Fatalf("probe: %v\n%s", err, log)
	}
	fPhase, err := g.function("probe_phase")
	if err != nil {
		b.Fatal(err)
	}
	fPersist, err := g.function("probe_persistent")
	if err != nil {
		b.Fatal(err)
	}
	const phases = 32
	const maxPhase = 16 << 20
	src, err := g.memAlloc(phases * maxPhase)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(src)
	sink, err := g.memAlloc(4 * 4 * sms)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(sink)
	bar, err := g.memAlloc(256)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(bar)
	if err := g.memset(src, phases*maxPhase); err != nil {
		b.Fatal(err)
	}
	// The copy bandwidth (read + written), as MeasureCopyBandwidth.
	const cp = 1 << 30
	dst, err := g.memAlloc(cp)
	if err != nil {
		b.Fatal(err)
	}
	for range 2 {
		if err := g.dtod(dst, src, min(cp, phases*maxPhase)); err != nil {
			b.Fatal(err)
		}
	}
	ms, err := g.timed(func() error {
		for range 8 {
			if err := g.dtod(dst, src, min(cp, phases*maxPhase)); err != nil {
				return err
			}
		}
		return nil
	})
	g.memFree(dst)
	if err != nil || !(ms > 0) {
		b.Fatalf("copy bandwidth: %v (%g ms)", err, ms)
	}
	bw := 2 * float64(min(cp, phases*maxPhase)) * 8 / (float64(ms) / 1e3)
	b.Logf("device %s: copy bandwidth %.0f GB/s; %d phases a run, the best of 5 runs", g.name(), bw/1e9, phases)
	best := func(run func() (float32, error)) float64 {
		m := float32(0)
		for i := range 6 {
			v, err := run()
			if err != nil {
				b.Fatal(err)
			}
			if i > 0 && (m == 0 || v < m) { // the first run warms up
				m = v
			}
		}
		return float64(m) * 1000 / phases // µs a phase
	}
	kernels := func(n4, grid int) (float32, error) {
		return g.timed(func() error {
			for ph := range phases {
				if err := g.launch(fPhase, [3]uint32{uint32(grid), 1, 1}, [3]uint32{256, 1, 1},
					probeParams(src, sink, bar, n4, phases, ph)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	graph := func(n4, grid int) (float32, error) {
		if err := g.beginCapture(); err != nil {
			return 0, err
		}
		for ph := range phases {
			if err := g.launch(fPhase, [3]uint32{uint32(grid), 1, 1}, [3]uint32{256, 1, 1},
				probeParams(src, sink, bar, n4, phases, ph)); err != nil {
				g.endCapture()
				return 0, err
			}
		}
		gr, err := g.endCapture()
		if err != nil {
			return 0, err
		}
		defer g.destroyGraph(gr)
		exec, err := g.instantiate(gr)
		if err != nil {
			return 0, err
		}
		defer g.destroyExec(exec)
		if err := g.graphLaunch(exec); err != nil { // the upload
			return 0, err
		}
		return g.timed(func() error { return g.graphLaunch(exec) })
	}
	persistent := func(n4, grid int) (float32, error) {
		if err := g.memset(bar, 256); err != nil {
			return 0, err
		}
		ms, err := g.timed(func() error {
			return g.launch(fPersist, [3]uint32{uint32(grid), 1, 1}, [3]uint32{256, 1, 1},
				probeParams(src, sink, bar, n4, phases, 0))
		})
		if err != nil {
			return 0, err
		}
		out, _, err := g.hostAlloc(8)
		if err != nil {
			return 0, err
		}
		defer g.hostFree(out)
		if err := g.dtoh(out, bar); err != nil {
			return 0, err
		}
		if err := g.sync(); err != nil {
			return 0, err
		}
		arrived := uint32(out[0]) | uint32(out[1])<<8 | uint32(out[2])<<16 | uint32(out[3])<<24
		if out[4]|out[5]|out[6]|out[7] != 0 || int(arrived) != phases*grid {
			return 0, fmt.Errorf("grid barrier: %d arrivals of %d, timeouts %v (groups not co-resident?)", arrived, phases*grid, out[4:8])
		}
		return ms, nil
	}
	for range b.N {
		b.Logf("%9s %8s | %-22s | %-22s | %-22s | %-22s", "phase", "HBM us", "kernels (stream)", "kernels (graph, PDL)", "persistent, 1/SM", "persistent, 2/SM")
		for _, size := range []int{0, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20} {
			n4 := size / 16
			hbm := float64(size) / bw * 1e6 // bw counts bytes read and written alike
			col := func(us float64) string {
				if size == 0 {
					return fmt.Sprintf("%7.2f us", us)
				}
				return fmt.Sprintf("%7.2f us %5.2fx", us, hbm/us)
			}
			k := best(func() (float32, error) { return kernels(n4, 2*sms) })
			gp := best(func() (float32, error) { return graph(n4, 2*sms) })
			p1 := best(func() (float32, error) { return persistent(n4, sms) })
			p2 := best(func() (float32, error) { return persistent(n4, 2*sms) })
			b.Logf("%9d %8.2f | %-22s | %-22s | %-22s | %-22s", size, hbm, col(k), col(gp), col(p1), col(p2))
			if size == 0 {
				b.ReportMetric(p2, "barrier_us")
				b.ReportMetric(gp, "graph_kernel_us")
			}
			if size == 4<<20 {
				b.ReportMetric(hbm/p2, "persistent_4MiB_x")
				b.ReportMetric(hbm/gp, "graph_4MiB_x")
			}
		}
	}
}
