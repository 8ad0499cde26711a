package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// deltanet_rec_reg (the state in registers) and deltanet_rec_cols with
// deltanet_out (a head's columns over several groups, the norm after) give
// deltanet_rec's bits: the kernel bodies run on the CPU (cpurun) over the
// same inputs, on heads of odd sizes within 128 x 128, chunks of one and
// more tokens, several value heads a key head, gates past softplus's
// threshold.
func TestDeltaNetRecRegCPU(t *testing.T) {
	b, d := cpuBackend(t)
	r := rand.New(rand.NewPCG(7, 11))
	for _, c := range []struct{ T, nk, nv, dk, dv int }{
		{1, 1, 3, 24, 40}, {5, 2, 6, 24, 40}, {3, 1, 2, 128, 128}, {4, 2, 2, 33, 97},
		{2, 1, 4, 1, 1}, {3, 1, 1, 7, 128}, {6, 3, 3, 128, 5}, {0, 1, 2, 24, 40},
		{41, 1, 2, 128, 96}, // a prefill chunk: every chunk takes deltanet_rec_cols now
	} {
		what := fmt.Sprintf("%+v", c)
		C := 2*c.nk*c.dk + c.nv*c.dv
		// The conv output after deltanet_qknorm: q and k rows of unit norm
		// (q scaled by dk^-1/2), v as it comes.
		cv := rnd(r, max(c.T, 1)*C, 1)
		for tok := range c.T {
			for hh := range 2 * c.nk {
				x := cv[tok*C+hh*c.dk : tok*C+(hh+1)*c.dk]
				var ss float64
				for _, v := range x {
					ss += float64(v) * float64(v)
				}
				s := 1 / math.Sqrt(ss+1e-6)
				if hh < c.nk {
					s /= math.Sqrt(float64(c.dk))
				}
				for i := range x {
					x[i] = float32(float64(x[i]) * s)
				}
			}
		}
		nt := max(c.T, 1)
		z, bb, aa := rnd(r, nt*c.nv*c.dv, 2), rnd(r, nt*c.nv, 3), rnd(r, nt*c.nv, 3)
		negA, dt, norm := rnd(r, c.nv, 1), rnd(r, c.nv, 1), rnd(r, c.dv, 1)
		for i := range negA {
			negA[i] = -float32(math.Abs(float64(negA[i])))
		}
		if c.T > 1 {
			aa[c.nv] = 25 // a + dtbias past softplus's threshold of 20
		}
		S := rnd(r, c.nv*c.dk*c.dv, 0.5)
		pCV, pZ, pB, pA := d.put(cv), d.put(z), d.put(bb), d.put(aa)
		pNegA, pDt, pNorm := d.put(negA), d.put(dt), d.put(norm)
		run := func(kernel string) ([]float32, []float32) {
			st, y := d.put(S), d.put(make([]float32, nt*c.nv*c.dv))
			p := params(make([]byte, 0, sizeDNRec)).ptr(st).ptr(y).ptr(pCV).ptr(pZ).ptr(pB).ptr(pA).
				ptr(pNegA).ptr(pDt).ptr(pNorm).
				u32(c.T).u32(C).u32(c.nk).u32(c.nv).u32(c.dk).u32(c.dv).f32(1e-6).u32(0)
			launches := [][2]any{{kernel, c.nv}}
			if kernel == "deltanet_rec_cols" { // then its norm and gate
				launches = [][2]any{{kernel, c.nv * ceilDiv(c.dv, simdWidth)}}
				if c.T > 0 {
					launches = append(launches, [2]any{"deltanet_out", c.T * c.nv})
				}
			}
			for _, l := range launches {
				if err := b.launch(l[0].(string), [3]int{l[1].(int), 1, 1}, tgThreads, p, sizeDNRec); err != nil {
					t.Fatalf("%s %s: %v", what, l[0], err)
				}
			}
			return d.get(st, len(S)), d.get(y, nt*c.nv*c.dv)
		}
		wantS, wantY := run("deltanet_rec")
		gotS, gotY := run("deltanet_rec_reg")
		same := func(name string, got, want []float32) {
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %s: [%d] = %g (%#x), deltanet_rec %g (%#x)", what, name, i,
						got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
		same("state", gotS, wantS)
		same("y", gotY, wantY)
		if c.T == 0 {
			same("state (no tokens)", gotS, S)
		}
		// deltanet_rec_cols and deltanet_out: the same bits again.
		gotS, gotY = run("deltanet_rec_cols")
		same("state (cols)", gotS, wantS)
		same("y (cols)", gotY, wantY)
	}
}

// launchLog records the kernels launched on a cpuDev.
type launchLog struct {
	*cpuDev
	names []string
}

func (l *launchLog) launch(fn uintptr, grid, block [3]uint32, p []byte) error {
	l.names = append(l.names, kernelNames[fn-1])
	return l.cpuDev.launch(fn, grid, block, p)
}

// kDeltaNet takes deltanet_rec_cols and deltanet_out for heads up to 128 x
// 128 in every chunk (QPACK_CUDA_DN_COLS: 0 never, N in chunks of up to N
// tokens, deltanet_rec_reg for the others), and deltanet_rec beyond.
func TestDeltaNetRecChoice(t *testing.T) {
	_, d := cpuBackend(t)
	l := &launchLog{cpuDev: d}
	b, err := newBackend(l)
	if err != nil {
		t.Fatal(err)
	}
	const cols = "deltanet_rec_cols deltanet_out"
	for _, c := range []struct {
		env       string
		T, dk, dv int
		want      string
	}{
		{"", 1, 128, 128, cols}, {"", 1, 24, 40, cols}, {"", 300, 128, 128, cols},
		{"", 1, 129, 16, "deltanet_rec"}, {"", 1, 16, 256, "deltanet_rec"},
		{"0", 1, 128, 128, "deltanet_rec_reg"}, {"0", 40, 128, 128, "deltanet_rec_reg"},
		{"16", 16, 128, 128, cols}, {"16", 17, 128, 128, "deltanet_rec_reg"}, {"16", 17, 16, 256, "deltanet_rec"},
		{"all", 40, 128, 128, cols}, {"all", 40, 16, 256, "deltanet_rec"}, {"-3", 40, 128, 128, cols},
	} {
		b.dnCols = dnColsFor(c.env)
		C := 2*c.dk + c.dv
		p := &deltaNetPtrs{T: c.T, Nk: 1, Nv: 1, Dk: c.dk, Dv: c.dv, K: 2, Eps: 1e-6,
			Window: d.put(make([]float32, C)), State: d.put(make([]float32, c.dk*c.dv)), Scratch: d.put(make([]float32, c.T*C)),
			Y: d.put(make([]float32, c.T*c.dv)), Mixed: d.put(make([]float32, c.T*C)), Z: d.put(make([]float32, c.T*c.dv)),
			B: d.put(make([]float32, c.T)), A: d.put(make([]float32, c.T)), Conv: d.put(make([]float32, 2*C)),
			NegA: d.put(make([]float32, 1)), DtBias: d.put(make([]float32, 1)), Norm: d.put(make([]float32, c.dv))}
		l.names = nil
		if err := b.kDeltaNet(p); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(l.names[2:], " "); got != c.want {
			t.Errorf("%s=%q, T %d, dk %d, dv %d: %v, want %s after the conv and q/k norms", dnColsEnv, c.env, c.T, c.dk, c.dv, l.names, c.want)
		}
	}
}

// deltanet_rec_cols with deltanet_out on the GPU at Qwen3.6-35B's DeltaNet
// dims (16 key and 32 value heads of 128, kernel 4), a decode token and a
// chunk of 7, against deltanet_rec_reg: the CPU run shows the same bits
// (TestDeltaNetRecRegCPU); on the GPU NVRTC's contraction of multiply-adds
// decides, so this requires agreement to 1e-6 of the largest value and
// logs whether the bits are the same.
func TestDeltaNetColsGPU(t *testing.T) {
	b := openOrSkip(t)
	deltaNetColsCheck(t, b, func(x []float32) devptr { return upload(t, b, f32b(x)) }, func(p devptr, n int) []float32 {
		raw := download(t, b, p, 4*n)
		return unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), n)
	})
}

// deltaNetColsCheck is TestDeltaNetColsGPU on b, whose memory up and get
// write and read.
func deltaNetColsCheck(t *testing.T, b *Backend, up func([]float32) devptr, get func(devptr, int) []float32) {
	defer func() { b.dnCols = dnColsFor("") }()
	const nk, nv, d, K = 16, 32, 128, 4
	C := 2*nk*d + nv*d
	r := rand.New(rand.NewPCG(3, 5))
	for _, T := range []int{1, 7} {
		S, win := rnd(r, nv*d*d, 0.5), rnd(r, (K-1)*C, 1)
		mixed, z, bb, aa := rnd(r, T*C, 1), rnd(r, T*nv*d, 2), rnd(r, T*nv, 3), rnd(r, T*nv, 3)
		conv, dt, norm := rnd(r, C*K, 0.5), rnd(r, nv, 1), rnd(r, d, 1)
		negA := rnd(r, nv, 1)
		for i := range negA {
			negA[i] = -float32(math.Abs(float64(negA[i])))
		}
		run := func(policy dnColsPolicy) (y, state []float32) {
			b.dnCols = policy
			a := deltaNetPtrs{T: T, Nk: nk, Nv: nv, Dk: d, Dv: d, K: K, Eps: 1e-6, Window: up(win), State: up(S),
				Scratch: up(make([]float32, T*C)), Y: up(make([]float32, T*nv*d)), Mixed: up(mixed), Z: up(z),
				B: up(bb), A: up(aa), Conv: up(conv), NegA: up(negA), DtBias: up(dt), Norm: up(norm)}
			if err := b.kDeltaNet(&a); err != nil {
				t.Fatal(err)
			}
			return get(a.Y, T*nv*d), get(a.State, nv*d*d)
		}
		wantY, wantS := run(-1)
		gotY, gotS := run(0)
		for _, c := range []struct {
			name      string
			got, want []float32
		}{{"y", gotY, wantY}, {"state", gotS, wantS}} {
			var top, diff float64
			same := 0
			for i := range c.want {
				top = max(top, math.Abs(float64(c.want[i])))
				diff = max(diff, math.Abs(float64(c.got[i])-float64(c.want[i])))
				if math.Float32bits(c.got[i]) == math.Float32bits(c.want[i]) {
					same++
				}
			}
			t.Logf("T %d, %s: %d of %d values bit-identical to deltanet_rec_reg's, largest difference %.3g (largest value %.3g)",
				T, c.name, same, len(c.want), diff, top)
			if !(diff <= 1e-6*top) {
				t.Errorf("T %d, %s: deltanet_rec_cols differs from deltanet_rec_reg by %.3g (largest value %.3g)", T, c.name, diff, top)
			}
		}
	}
}

// deltanet_rec_cols normalising q and k itself over one token (DNRec's
// qscale, a decode step's deltanet_qknorm launch saved) gives the bits of
// deltanet_qknorm then deltanet_rec_cols: the kernel bodies on the CPU
// (cpurun), heads of odd sizes, several value heads a key head.
func TestDeltaNetInlineQKNormCPU(t *testing.T) {
	b, d := cpuBackend(t)
	r := rand.New(rand.NewPCG(9, 13))
	for _, c := range []struct{ nk, nv, dk, dv int }{
		{1, 3, 24, 40}, {1, 2, 128, 128}, {2, 2, 33, 97}, {2, 4, 1, 1}, {3, 3, 128, 5}, {1, 1, 7, 128},
	} {
		what := fmt.Sprintf("%+v", c)
		C := 2*c.nk*c.dk + c.nv*c.dv
		cv := rnd(r, C, 2) // the conv output before the norms
		z, bb, aa := rnd(r, c.nv*c.dv, 2), rnd(r, c.nv, 3), rnd(r, c.nv, 3)
		negA, dt, norm := rnd(r, c.nv, 1), rnd(r, c.nv, 1), rnd(r, c.dv, 1)
		for i := range negA {
			negA[i] = -float32(math.Abs(float64(negA[i])))
		}
		S := rnd(r, c.nv*c.dk*c.dv, 0.5)
		pZ, pB, pA := d.put(z), d.put(bb), d.put(aa)
		pNegA, pDt, pNorm := d.put(negA), d.put(dt), d.put(norm)
		qScale := float32(1 / math.Sqrt(float64(c.dk)))
		run := func(inline bool) ([]float32, []float32) {
			pCV := d.put(cv)
			st, y := d.put(S), d.put(make([]float32, c.nv*c.dv))
			var qs float32
			if inline {
				qs = qScale
			} else {
				p := params(make([]byte, 0, sizeDNNorm)).ptr(pCV).u32(1).u32(C).u32(c.nk).u32(c.dk).f32(qScale).u32(0)
				if err := b.launch("deltanet_qknorm", [3]int{2 * c.nk, 1, 1}, tgThreads, p, sizeDNNorm); err != nil {
					t.Fatal(err)
				}
			}
			p := params(make([]byte, 0, sizeDNRec)).ptr(st).ptr(y).ptr(pCV).ptr(pZ).ptr(pB).ptr(pA).
				ptr(pNegA).ptr(pDt).ptr(pNorm).
				u32(1).u32(C).u32(c.nk).u32(c.nv).u32(c.dk).u32(c.dv).f32(1e-6).f32(qs)
			if err := b.launch("deltanet_rec_cols", [3]int{c.nv * ceilDiv(c.dv, simdWidth), 1, 1}, tgThreads, p, sizeDNRec); err != nil {
				t.Fatal(err)
			}
			if err := b.launch("deltanet_out", [3]int{c.nv, 1, 1}, tgThreads, p, sizeDNRec); err != nil {
				t.Fatal(err)
			}
			return d.get(st, len(S)), d.get(y, c.nv*c.dv)
		}
		wantS, wantY := run(false)
		gotS, gotY := run(true)
		sameBits(t, what+": state", gotS, wantS)
		sameBits(t, what+": y", gotY, wantY)
		if slicesEqualBits(wantS, S) {
			t.Fatalf("%s: the state did not change", what)
		}
	}
}

func slicesEqualBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}
