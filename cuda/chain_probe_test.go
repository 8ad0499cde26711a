package cuda

import "testing"

// The ceiling of the decode step's execution model (thirtieth session,
// cuda/README.md "Next"): a layer's dependent ops as one kernel each, in a
// graph with programmatic dependent launches, where every op is a plain
// read of its bytes and nothing else (no arithmetic, no reductions), at
// the byte counts of a Qwen3.6-35B DeltaNet layer's ops (chainPhases), for
// 8 layers whose bytes are distinct (far more than the L2). Two variants:
// each kernel waits for the one before and then reads its slice; or it
// first prefetches its slice into the L2 (before the wait, as the decode
// kernels prefetch their weights) and then waits and reads. The chain's
// time against its bytes' HBM time (the copy bandwidth of the same run) is
// the most a decode step built this way could reach, whatever its kernels.
// The probe kernels are this file's own module, not the backend's Source().

// chainPhases: the bytes each op of a Qwen3.6-35B DeltaNet layer reads at
// decode (BenchmarkDecodeKernels' figures, rounded): the input norm, the
// input projections (q4, 12,352 x 2,048), the conv, the recurrence (its
// state read and written), the gated norm, the output projection (2,048 x
// 4,096), the post-attention norm, the router and shared gate (q8, 257 x
// 2,048), the top-k, the MoE gate/up and down (9 slots of 512 x 2,048).
var chainPhases = []struct {
	name  string
	bytes int
}{
	{"input norm", 16 << 10},
	{"input projections", 15_868_160},
	{"conv", 128 << 10},
	{"recurrence", 4_554_752},
	{"gated norm", 64 << 10},
	{"output projection", 5_267_456},
	{"post norm", 24 << 10},
	{"router and shared gate", 566_272},
	{"top-k", 1 << 10},
	{"gate/up", 5_990_400},
	{"down", 5_974_016},
}

// chainSource: chain_phase reads n4 float4s from src+off (a grid-stride
// sum, four loads in flight a thread), after the grid wait; with pf set it
// first prefetches its share of those lines into the L2 (a line a thread
// in turn), before the wait.
const chainSource = `
struct alignas(16) cf4 { float x, y, z, w; };

struct ChainP {
    const cf4* src;
    float* sink;
    unsigned long long off; // float4s before the phase's slice
    unsigned n4;            // float4s of the slice
    unsigned pf;            // 1: prefetch the slice into the L2 before the wait
};
static_assert(sizeof(ChainP) == 32, "ChainP layout");

extern "C" __global__ void __launch_bounds__(256) chain_phase(ChainP p) {
    const cf4* s = p.src + p.off;
    unsigned stride = gridDim.x * blockDim.x;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (p.pf) {
        for (unsigned l = i * 8; l < p.n4; l += stride * 8) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(s + l));
        }
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    float acc = 0.0f;
    for (; i + 3 * stride < p.n4; i += 4 * stride) {
        cf4 a = s[i], b = s[i + stride], c = s[i + 2 * stride], d = s[i + 3 * stride];
        acc += (a.x + a.y + a.z + a.w) + (b.x + b.y + b.z + b.w) + (c.x + c.y + c.z + c.w) + (d.x + d.y + d.z + d.w);
    }
    for (; i < p.n4; i += stride) {
        cf4 a = s[i];
        acc += a.x + a.y + a.z + a.w;
    }
    if (acc == -1.0f) p.sink[blockIdx.x] = acc; // never: keeps the loads
}
`

// chainParams: the off field is a count, written as the 64-bit word it is.
func chainParams(src, sink devptr, off uint64, n4 int, pf bool) params {
	f := 0
	if pf {
		f = 1
	}
	return params(nil).ptr(src).ptr(sink).ptr(devptr(off)).u32(n4).u32(f)
}

// chainGrid: groups of 256 threads for a phase of n4 float4s, at most two
// a multiprocessor, at least one (a small op is a group or a few, as the
// norms and the top-k are).
func chainGrid(n4, sms int) uint32 {
	return uint32(max(1, min(2*sms, (n4+1023)/1024)))
}

func TestChainGrid(t *testing.T) {
	for _, c := range []struct {
		n4   int
		sms  int
		want uint32
	}{{0, 132, 1}, {64, 132, 1}, {1024, 132, 1}, {1025, 132, 2}, {1 << 20, 132, 264}, {8 << 10, 132, 8}} {
		if g := chainGrid(c.n4, c.sms); g != c.want {
			t.Errorf("chainGrid(%d, %d) = %d, want %d", c.n4, c.sms, g, c.want)
		}
	}
}

// TestChainSourceClang: the chain probe compiles (clang's CUDA front end),
// so a device call is not spent on a syntax error.
func TestChainSourceClang(t *testing.T) {
	checkProbePTX(t, chainSource, "chain_phase")
}
