package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// deltanet_rec_reg (the state in registers) gives deltanet_rec's bits: both
// kernel bodies run on the CPU (cpurun) over the same inputs, on heads of
// odd sizes within its 128 x 128, chunks of one and more tokens, several
// value heads a key head, gates past softplus's threshold.
func TestDeltaNetRecRegCPU(t *testing.T) {
	b, d := cpuBackend(t)
	r := rand.New(rand.NewPCG(7, 11))
	for _, c := range []struct{ T, nk, nv, dk, dv int }{
		{1, 1, 3, 24, 40}, {5, 2, 6, 24, 40}, {3, 1, 2, 128, 128}, {4, 2, 2, 33, 97},
		{2, 1, 4, 1, 1}, {3, 1, 1, 7, 128}, {6, 3, 3, 128, 5}, {0, 1, 2, 24, 40},
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
			if err := b.launch(kernel, [3]int{c.nv, 1, 1}, tgThreads, p, sizeDNRec); err != nil {
				t.Fatalf("%s %s: %v", what, kernel, err)
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

// kDeltaNet takes deltanet_rec_reg for heads up to 128 x 128 and
// deltanet_rec beyond.
func TestDeltaNetRecChoice(t *testing.T) {
	_, d := cpuBackend(t)
	l := &launchLog{cpuDev: d}
	b, err := newBackend(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dk, dv int
		want   string
	}{{128, 128, "deltanet_rec_reg"}, {24, 40, "deltanet_rec_reg"}, {129, 16, "deltanet_rec"}, {16, 256, "deltanet_rec"}} {
		C := 2*c.dk + c.dv
		p := &deltaNetPtrs{T: 1, Nk: 1, Nv: 1, Dk: c.dk, Dv: c.dv, K: 2, Eps: 1e-6,
			Window: d.put(make([]float32, C)), State: d.put(make([]float32, c.dk*c.dv)), Scratch: d.put(make([]float32, C)),
			Y: d.put(make([]float32, c.dv)), Mixed: d.put(make([]float32, C)), Z: d.put(make([]float32, c.dv)),
			B: d.put(make([]float32, 1)), A: d.put(make([]float32, 1)), Conv: d.put(make([]float32, 2*C)),
			NegA: d.put(make([]float32, 1)), DtBias: d.put(make([]float32, 1)), Norm: d.put(make([]float32, c.dv))}
		l.names = nil
		if err := b.kDeltaNet(p); err != nil {
			t.Fatal(err)
		}
		if got := l.names[len(l.names)-1]; got != c.want {
			t.Errorf("dk %d, dv %d: %v, want the last %s", c.dk, c.dv, l.names, c.want)
		}
	}
}
