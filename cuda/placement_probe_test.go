package cuda

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Where the block scheduler puts a grid's groups (cuda/README.md "Next",
// the MoE gate/up with the shared expert as slot k): a probe kernel with
// moe_gateup_q4's footprint (256 threads, 41,216 bytes of static shared
// memory, launch bounds of 2 groups a multiprocessor, and of 3) reads its
// own ~40 KB slice, as a gate/up group of 16 rows does, and records its
// multiprocessor (%smid) and its start and end (%globaltimer). The probe is
// this file's own module, compiled on a device opened for the benchmark
// alone; it is not the backend's Source() and not recorded.
const placeSource = `
struct alignas(16) pf4 { float x, y, z, w; };

struct PlaceP {
    const pf4* src;              // group g reads src[g*per4 .. (g+1)*per4)
    unsigned* sm;                // [grid] the group's multiprocessor
    unsigned long long* t;       // [2*grid] its start and end, ns
    float* sink;
    unsigned per4;
    unsigned pad;
};
static_assert(sizeof(PlaceP) == 40, "PlaceP layout");

__device__ __forceinline__ unsigned long long place_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ void place_body(const PlaceP& p, float* pad) {
    unsigned long long t0 = place_now();
    const pf4* s = p.src + (unsigned long long)blockIdx.x * p.per4;
    float acc = 0.0f;
    for (unsigned i = threadIdx.x; i < p.per4; i += blockDim.x) {
        pf4 a = s[i];
        acc += (a.x + a.y) + (a.z + a.w);
    }
    pad[threadIdx.x * 40u] = acc; // 40 x 256 floats: the whole array in use
    __syncthreads();
    acc += pad[((threadIdx.x + 1u) % blockDim.x) * 40u];
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned id;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        p.sm[blockIdx.x] = id;
        p.t[2 * blockIdx.x] = t0;
        p.t[2 * blockIdx.x + 1] = place_now();
    }
    if (acc == -1.0f) p.sink[blockIdx.x] = acc; // never: keeps the loads
}

extern "C" __global__ void __launch_bounds__(256, 2) probe_place2(PlaceP p) {
    __shared__ float pad[10304];
    place_body(p, pad);
}

extern "C" __global__ void __launch_bounds__(256, 3) probe_place3(PlaceP p) {
    __shared__ float pad[10304];
    place_body(p, pad);
}
`

// placeStats summarises one launch of the probe: how many multiprocessors
// ran a group, the most groups one ran, how many ran each count (index n:
// multiprocessors with n groups), the groups that started only after some
// group had ended (a later round; %globaltimer ticks about once a
// microsecond on some parts, so a group that started in the tick the first
// one ended counts), and the launch's span in µs.
type placeStats struct {
	used, most int
	byCount    []int
	late       int
	spanUS     float64
}

// placement computes placeStats from the probe's records: sm[g] the
// multiprocessor of group g, t[2g] and t[2g+1] its start and end (ns), on
// a device of sms multiprocessors. An id out of range is an error.
func placement(sm []uint32, t []uint64, sms int) (placeStats, error) {
	if len(t) != 2*len(sm) || len(sm) == 0 {
		return placeStats{}, fmt.Errorf("placement: %d groups, %d times", len(sm), len(t))
	}
	per := make([]int, sms)
	for g, id := range sm {
		if int(id) >= sms {
			return placeStats{}, fmt.Errorf("placement: group %d on multiprocessor %d of %d", g, id, sms)
		}
		per[id]++
	}
	var s placeStats
	s.most = slices.Max(per)
	s.byCount = make([]int, s.most+1)
	for _, n := range per {
		s.byCount[n]++
		if n > 0 {
			s.used++
		}
	}
	firstEnd, start, end := t[1], t[0], t[1]
	for g := range sm {
		firstEnd, start, end = min(firstEnd, t[2*g+1]), min(start, t[2*g]), max(end, t[2*g+1])
	}
	for g := range sm {
		if t[2*g] >= firstEnd {
			s.late++
		}
	}
	s.spanUS = float64(end-start) / 1e3
	return s, nil
}

func (s placeStats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%3d multiprocessors, at most %d groups on one (", s.used, s.most)
	for n, c := range s.byCount[1:] {
		if n > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d with %d", c, n+1)
	}
	fmt.Fprintf(&b, "), %3d groups started after one had ended, %6.2f us", s.late, s.spanUS)
	return b.String()
}

func TestPlacement(t *testing.T) {
	// 5 groups on 4 multiprocessors: 2 on #1, one each on #0 and #3, one
	// on #1 again later; #2 idle.
	sm := []uint32{1, 0, 3, 1, 1}
	ts := []uint64{100, 300, 100, 250, 110, 260, 105, 280, 250, 400}
	s, err := placement(sm, ts, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := placeStats{used: 3, most: 3, byCount: []int{1, 2, 0, 1}, late: 1, spanUS: 0.3}
	if s.used != want.used || s.most != want.most || !slices.Equal(s.byCount, want.byCount) || s.late != want.late || s.spanUS != want.spanUS {
		t.Errorf("placement = %+v, want %+v", s, want)
	}
	if got := s.String(); !strings.Contains(got, "2 with 1, 0 with 2, 1 with 3") {
		t.Errorf("String() = %q", got)
	}
	if _, err := placement([]uint32{4}, []uint64{1, 2}, 4); err == nil {
		t.Error("a multiprocessor id out of range was accepted")
	}
	if _, err := placement([]uint32{0}, []uint64{1}, 4); err == nil {
		t.Error("a group without its two times was accepted")
	}
}

// TestPlaceSourceClang: the probe compiles (clang's CUDA front end), so a
// device call is not spent on a syntax error.
func TestPlaceSourceClang(t *testing.T) {
	checkProbePTX(t, placeSource, "probe_place2", "probe_place3")
}
