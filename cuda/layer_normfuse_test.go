package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The deferred one-row AddRMSNorm on the fake device: which launches each
// sequence of ops queues (the norm fused into the products that read its
// output, alone before anything else, kept pending across Flush, never
// fused into products that write its x or r) and that every tensor ends
// with the bits of the same ops with the fusion off.
func TestNormFuseLaunches(t *testing.T) {
	for _, c := range normFuseCases(t) {
		t.Run(c.name, func(t *testing.T) {
			var onL, offL []string
			var onV, offV [][]float32
			for _, off := range []bool{false, true} {
				b, f := fakeBackend(t)
				b.fuse = fusesIf(!off)
				v := normFuseRun(t, b, 256, c.ops, func() { f.launches = nil })
				if off {
					offL, offV = slices.Clone(f.launches), v
				} else {
					onL, onV = slices.Clone(f.launches), v
				}
			}
			if !slices.Equal(onL, c.on) {
				t.Errorf("fused: launches %v, want %v", onL, c.on)
			}
			if !slices.Equal(offL, c.off) {
				t.Errorf("not fused: launches %v, want %v", offL, c.off)
			}
			for i := range onV {
				sameBits(t, fmt.Sprintf("tensor %d", i), onV[i], offV[i])
			}
		})
	}
}

// normFuseOps is what a case's ops work on: x, r, y of two rows of C, the
// norm's weight, products of C columns (two 4-bit, one 8-bit), and the
// outputs the ops add (compared after the ops).
type normFuseOps struct {
	l        *Layer
	C        int
	X, R, Y  nn.Tensor
	w        nn.Tensor
	q4a, q4b nn.Mat
	q8       nn.Mat
	outs     []nn.Tensor
}

// normFuseRun sets up the env on b's Layer (the same data for the same
// C), calls mark, runs ops, and returns every tensor's values after them.
func normFuseRun(t *testing.T, b *Backend, C int, ops func(e *normFuseOps), mark func()) [][]float32 {
	t.Helper()
	r := rand.New(rand.NewPCG(15, uint64(C)))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	l := b.Layer()
	mat := func(rows, bits int) nn.Mat {
		m, err := mlxq.Quantize(vec(rows*C), rows, C, bits, 64, mlxq.BF16)
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.Resident(m)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	e := &normFuseOps{l: l, C: C, q4a: mat(40, 4), q4b: mat(9, 4), q8: mat(20, 8)}
	var err error
	if e.w, err = l.Constant(vec(C)); err != nil {
		t.Fatal(err)
	}
	e.X, e.R, e.Y = l.Temp(2*C), l.Temp(2*C), l.Temp(2*C)
	l.Write(e.X, vec(2*C))
	l.Write(e.R, vec(2*C))
	mark()
	ops(e)
	var got [][]float32
	for _, tn := range append([]nn.Tensor{e.X, e.Y}, e.outs...) {
		v := make([]float32, tn.N)
		if err := l.Read(v, tn); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if err := l.EndPass(); err != nil {
		t.Fatal(err)
	}
	return got
}

// normFuseRoPE rotates 16 pairs of 64-wide rows, halves 32 apart.
var normFuseRoPE = func() *nn.RoPE {
	f := make([]float32, 16)
	for i := range f {
		f[i] = float32(math.Pow(10000, -float64(i)/16))
	}
	return &nn.RoPE{Half: 32, InvFreq: f}
}()

type normFuseCase struct {
	name    string
	ops     func(e *normFuseOps)
	on, off []string // the fake's launches of ops
}

func normFuseCases(t *testing.T) []normFuseCase {
	type env = normFuseOps
	norm := func(e *env) {
		C := e.C
		nn.AddRMSNorm(e.l, e.X.Slice(0, C), e.R.Slice(0, C), e.Y.Slice(0, C), e.w, nn.NormSpec{Rows: 1, Width: C, Eps: 1e-6, Kind: nn.NormOffset})
	}
	products := func(e *env, x nn.Tensor, mats ...nn.Mat) {
		var ps []nn.Product
		for _, m := range mats {
			y := e.l.Temp(m.W.Rows)
			e.outs = append(e.outs, y)
			ps = append(ps, nn.Product{W: m, Y: y})
		}
		nn.MatMuls(e.l, x, 1, ps...)
	}
	return []normFuseCase{
		{"norm then a set and a lone q8", func(e *env) {
			norm(e)
			products(e, e.Y.Slice(0, e.C), e.q4a, e.q4b, e.q8)
		}, []string{"gemv_q4_set_norm", "gemv_q8"}, []string{"add_rms_norm_rows", "gemv_q4_set", "gemv_q8"}},
		{"norm then a lone MatMul", func(e *env) {
			norm(e)
			y := e.l.Temp(20)
			e.outs = append(e.outs, y)
			e.l.MatMul(e.q8, y, e.Y.Slice(0, e.C), 1)
		}, []string{"gemv_q8_set_norm"}, []string{"add_rms_norm_rows", "gemv_q8"}},
		{"norm, Flush, products", func(e *env) {
			norm(e)
			if err := e.l.Flush(); err != nil {
				t.Fatal(err)
			}
			products(e, e.Y.Slice(0, e.C), e.q4a, e.q4b)
		}, []string{"gemv_q4_set_norm"}, []string{"add_rms_norm_rows", "gemv_q4_set"}},
		{"norm then a Read", func(e *env) {
			norm(e)
			v := make([]float32, e.C)
			if err := e.l.Read(v, e.Y); err != nil {
				t.Fatal(err)
			}
		}, []string{"add_rms_norm_rows"}, []string{"add_rms_norm_rows"}},
		{"norm then products of another vector", func(e *env) {
			norm(e)
			products(e, e.Y.Slice(e.C, 2*e.C), e.q4a, e.q4b)
		}, []string{"add_rms_norm_rows", "gemv_q4_set"}, []string{"add_rms_norm_rows", "gemv_q4_set"}},
		{"norm then products into its residual", func(e *env) {
			norm(e)
			// The second product writes x's second row: no overlap, fused;
			// then one that writes r's first row: not fused.
			nn.MatMuls(e.l, e.Y.Slice(0, e.C), 1, nn.Product{W: e.q4a, Y: e.l.Temp(40)}, nn.Product{W: e.q4b, Y: e.X.Slice(e.C, e.C+9)})
			norm(e)
			nn.MatMuls(e.l, e.Y.Slice(0, e.C), 1, nn.Product{W: e.q4a, Y: e.l.Temp(40)}, nn.Product{W: e.q4b, Y: e.R.Slice(3, 12)})
		}, []string{"gemv_q4_set_norm", "add_rms_norm_rows", "gemv_q4_set"}, []string{"add_rms_norm_rows", "gemv_q4_set", "add_rms_norm_rows", "gemv_q4_set"}},
		{"two norms", func(e *env) {
			norm(e)
			nn.AddRMSNorm(e.l, e.X.Slice(e.C, 2*e.C), e.R.Slice(e.C, 2*e.C), e.Y.Slice(e.C, 2*e.C), e.w, nn.NormSpec{Rows: 1, Width: e.C, Eps: 1e-5})
			products(e, e.Y.Slice(e.C, 2*e.C), e.q4a, e.q4b)
		}, []string{"add_rms_norm_rows", "gemv_q4_set_norm"}, []string{"add_rms_norm_rows", "add_rms_norm_rows", "gemv_q4_set"}},
		{"two rows: not deferred", func(e *env) {
			nn.AddRMSNorm(e.l, e.X, e.R, e.Y, e.w, nn.NormSpec{Rows: 2, Width: e.C, Eps: 1e-6})
			products(e, e.Y.Slice(0, e.C), e.q4a, e.q4b)
		}, []string{"add_rms_norm_rows", "gemv_q4_set"}, []string{"add_rms_norm_rows", "gemv_q4_set"}},
		{"rows normalised in place, then their RoPE", func(e *env) {
			rows := 2 * e.C / 64
			e.l.RMSNorm(e.X, e.X, e.w.Slice(0, 64), nn.NormSpec{Rows: rows, Width: 64, Eps: 1e-6})
			e.l.RoPE(e.X, normFuseRoPE, nn.RoPESpec{Rows: rows, PerPos: 4, Stride: 64, Pos0: 3})
		}, []string{"rms_norm_rope"}, []string{"rms_norm_rows", "rope"}},
		{"rows normalised in place, then another's RoPE", func(e *env) {
			rows := e.C / 64
			e.l.RMSNorm(e.X, e.X, e.w.Slice(0, 64), nn.NormSpec{Rows: rows, Width: 64, Eps: 1e-6})
			e.l.RoPE(e.Y, normFuseRoPE, nn.RoPESpec{Rows: rows, PerPos: 4, Stride: 64, Pos0: 3})
		}, []string{"rms_norm_rows", "rope"}, []string{"rms_norm_rows", "rope"}},
		{"rows normalised elsewhere, then their RoPE", func(e *env) {
			rows := e.C / 64
			e.l.RMSNorm(e.Y, e.X, e.w.Slice(0, 64), nn.NormSpec{Rows: rows, Width: 64, Eps: 1e-6})
			e.l.RoPE(e.Y, normFuseRoPE, nn.RoPESpec{Rows: rows, PerPos: 4, Stride: 64, Pos0: 3})
		}, []string{"rms_norm_rows", "rope"}, []string{"rms_norm_rows", "rope"}},
		{"an output gate, then the product of its rows", func(e *env) {
			e.l.SigmoidMul(e.X, e.Y, e.C/64, 64, 64, 128)
			y := e.l.Temp(20)
			e.outs = append(e.outs, y)
			e.l.MatMul(e.q8, y, e.X.Slice(0, e.C), 1)
		}, []string{"gemv_q8_set_sigmul"}, []string{"sigmoid_mul", "gemv_q8"}},
		{"an output gate, then another product", func(e *env) {
			e.l.SigmoidMul(e.X, e.Y, e.C/64, 64, 64, 128)
			products(e, e.X.Slice(e.C, 2*e.C), e.q4a, e.q4b)
		}, []string{"sigmoid_mul", "gemv_q4_set"}, []string{"sigmoid_mul", "gemv_q4_set"}},
		{"norm at the pass's end", func(e *env) {
			norm(e)
			if err := e.l.EndPass(); err != nil {
				t.Fatal(err)
			}
		}, []string{"add_rms_norm_rows"}, []string{"add_rms_norm_rows"}},
	}
}

// The same cases on the GPU, at a decode step's width and at one that
// takes a partial third batch of the norm's loads: every tensor the bits
// of the launches the fusion replaces, and one launch fewer per fused norm.
func TestNormFuseGPU(t *testing.T) { testNormFuseBits(t, openOrSkip(t)) }

// The GPU tests' logic on the fake device.
func TestNormFuseBitsFake(t *testing.T) {
	b, _ := fakeBackend(t)
	testNormFuseBits(t, b)
	on, fOn := fakeBackend(t)
	off, fOff := fakeBackend(t)
	testNormFuseModels(t, on, off)
	// Decode routes on the device (every expert is cached after the
	// prompt): its router launches make the choice where the models'
	// router follows the fused norm (the Qwen ones), so fewer route_topk.
	count := func(ls []string, k string) (n int) {
		for _, l := range ls {
			if l == k {
				n++
			}
		}
		return n
	}
	ron, roff := count(fOn.launches, "route_topk"), count(fOff.launches, "route_topk")
	t.Logf("route_topk launches: %d fused, %d not", ron, roff)
	if roff == 0 || ron >= roff {
		t.Errorf("route_topk launches: %d fused, %d not: no choice made by a fused launch", ron, roff)
	}
}

func testNormFuseBits(t *testing.T, b *Backend) {
	for _, C := range []int{2048, 4160} {
		for _, c := range normFuseCases(t) {
			var vals [2][][]float32
			var launches [2]int64
			for i, off := range []bool{false, true} {
				b.fuse = fusesIf(!off)
				var s0 int64
				vals[i] = normFuseRun(t, b, C, c.ops, func() { s0 = b.Stats().Launches })
				launches[i] = b.Stats().Launches - s0
			}
			b.fuse = fuseAll
			name := fmt.Sprintf("C %d: %s", C, c.name)
			for i := range vals[0] {
				sameBits(t, fmt.Sprintf("%s: tensor %d", name, i), vals[0][i], vals[1][i])
			}
			if saved := launches[1] - launches[0]; saved != int64(len(c.off)-len(c.on)) {
				t.Errorf("%s: %d launches fused, %d not: want %d fewer", name, launches[0], launches[1], len(c.off)-len(c.on))
			}
		}
	}
}

// Decode on the GPU with the norms fused against two launches each:
// the same logits, bit for bit, over 24 steps of a model of each
// architecture, and fewer launches.
func TestNormFuseModelsGPU(t *testing.T) {
	on := openOrSkip(t)
	off, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	testNormFuseModels(t, on, off)
}

func testNormFuseModels(t *testing.T, on, off *Backend) {
	on.fuse, off.fuse = fuseAll, 0
	for _, name := range []string{"qwen3_next-q4g64", "qwen3_5_moe-q8g64", "gemma4-q4g32"} {
		dir := filepath.Join(tinyDir, name)
		a, err := runtime.Load(dir, &runtime.LoadOptions{Backend: on})
		if err != nil {
			t.Fatal(err)
		}
		b, err := runtime.Load(dir, &runtime.LoadOptions{Backend: off})
		if err != nil {
			t.Fatal(err)
		}
		la, lb := on.Stats().Launches, off.Stats().Launches
		sa, sb := a.NewState(), b.NewState()
		for i := range 24 {
			stepBoth(t, fmt.Sprintf("%s step %d", name, i), a, sa, b, sb, []int{(3*i + 2) % a.Config.Vocab})
		}
		na, nb := on.Stats().Launches-la, off.Stats().Launches-lb
		t.Logf("%s: %d launches fused, %d not", name, na, nb)
		if na >= nb {
			t.Errorf("%s: no launch saved (%d against %d)", name, na, nb)
		}
		a.Close()
		b.Close()
	}
}

// rms_norm_rope (the kernel bodies on the CPU, cpurun) gives the bits of
// rms_norm_rows then rope over the same rows: partial rotary dims, pairs
// interleaved or halves apart, rows strided past their width, each kind of
// norm, positions per row and from a far start.
func TestNormRoPECPU(t *testing.T) {
	b, d := cpuBackend(t)
	r := rand.New(rand.NewPCG(17, 19))
	for _, c := range []struct {
		rows, width, stride int
		kind                nn.NormKind
		pairs, half         int
		inter               bool
		perPos, pos0        int
	}{
		{16, 256, 512, nn.NormWeight, 32, 32, false, 8, 5},     // qwen3.5's q: a quarter rotated, the gate beside
		{4, 256, 256, nn.NormOffset, 128, 128, false, 2, 4095}, // every dim rotated
		{6, 512, 512, nn.NormUnit, 64, 256, false, 3, 0},       // gemma4's global heads, partly rotated
		{5, 96, 100, nn.NormWeight, 40, 0, true, 1, 77},        // interleaved, a partial batch of norm loads
		{3, 300, 300, nn.NormWeight, 150, 150, false, 3, 1},    // two batches of rows' threads
	} {
		what := fmt.Sprintf("%+v", c)
		x := rnd(r, (c.rows-1)*c.stride+c.width+3, 2)
		w, inv := rnd(r, c.width, 1), rnd(r, c.pairs, 0.3)
		var wp devptr
		if c.kind != nn.NormUnit {
			wp = d.put(w)
		}
		fp := d.put(inv)
		ns := nn.NormSpec{Rows: c.rows, Width: c.width, XStride: c.stride, YStride: c.stride, Eps: 1e-6, Kind: c.kind}
		rs := nn.RoPESpec{Rows: c.rows, PerPos: c.perPos, Stride: c.stride, Pos0: c.pos0}
		two := d.put(x)
		if err := b.kRMSNorm(two, two, wp, ns); err != nil {
			t.Fatal(err)
		}
		if err := b.kRoPE(two, fp, c.pairs, c.half, c.inter, rs); err != nil {
			t.Fatal(err)
		}
		one := d.put(x)
		if err := b.kNormRoPE(one, wp, fp, ns, c.pairs, c.half, c.inter, rs); err != nil {
			t.Fatal(err)
		}
		got, want := d.get(one, len(x)), d.get(two, len(x))
		sameBits(t, what, got, want)
		if slicesEqualBits(got, x) {
			t.Fatalf("%s: nothing changed", what)
		}
	}
}

// scatter_rows2 (cpurun) stores what two scatter_rows store: keys and
// values of different widths into rows in any order.
func TestScatterRows2CPU(t *testing.T) {
	b, d := cpuBackend(t)
	r := rand.New(rand.NewPCG(23, 29))
	const n, far, w0, w1 = 5, 9, 48, 80
	rows := []int32{7, 0, 3, 8, 5}
	k, v := rnd(r, n*w0, 1), rnd(r, n*w1, 1)
	kc, vc := rnd(r, far*w0, 1), rnd(r, far*w1, 1)
	ix, pk, pv := d.putI(rows), d.put(k), d.put(v)
	k1, v1, k2, v2 := d.put(kc), d.put(vc), d.put(kc), d.put(vc)
	if err := b.kScatterRows(k1, pk, ix, n, far, w0); err != nil {
		t.Fatal(err)
	}
	if err := b.kScatterRows(v1, pv, ix, n, far, w1); err != nil {
		t.Fatal(err)
	}
	if err := b.kScatterRows2(k2, pk, v2, pv, ix, n, far, w0, w1); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "keys", d.get(k2, far*w0), d.get(k1, far*w0))
	sameBits(t, "values", d.get(v2, far*w1), d.get(v1, far*w1))
	if got := d.get(k2, far*w0); got[7*w0] != k[0] || got[0] != k[w0] {
		t.Fatal("rows not stored where the list says")
	}
}

// fusesIf is every fusion when on, none otherwise.
func fusesIf(on bool) fuseSet {
	if on {
		return fuseAll
	}
	return 0
}

// QPACK_CUDA_FUSE's values: the default, all, none, names joined by '+';
// an unknown name is an error that names it.
func TestParseFuse(t *testing.T) {
	for v, want := range map[string]fuseSet{"": fuseDefault, "all": fuseAll, "none": 0, "rope": fuseRoPE,
		"norm+route": fuseNorm | fuseRoute, "gnorm+qknorm+kv+sigmul": fuseGNorm | fuseQKNorm | fuseKV | fuseSigMul} {
		if got, err := parseFuse(v); err != nil || got != want {
			t.Errorf("parseFuse(%q) = %b, %v; want %b", v, got, err, want)
		}
	}
	for _, v := range []string{"rope+", "norms", "all+rope", "ROPE"} {
		if _, err := parseFuse(v); err == nil || !strings.Contains(err.Error(), fuseEnv) {
			t.Errorf("parseFuse(%q): error %v, want one naming %s", v, err, fuseEnv)
		}
	}
	if fuseDefault&^fuseAll != 0 || fuseDefault&(fuseNorm|fuseGNorm|fuseSigMul) != 0 {
		t.Errorf("fuseDefault %b: only fusions that add no work to a launch's groups", fuseDefault)
	}
}
