package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/internal/gpukernels/cpurun"
	"github.com/qpack-go/qpack/runtime/nn"
)

// cpuDev is a device whose kernels are the shared bodies compiled for the
// CPU (cpurun): the launchers' parameter blocks, grids and the kernels'
// arithmetic are checked together against nn.HostDevice, without a GPU.
// Device memory is buffer i at cpurun.Addr(i, 0).
type cpuDev struct {
	h    *cpurun.Harness
	bufs [][]byte
}

func (d *cpuDev) name() string                                   { return "cpu" }
func (d *cpuDev) computeCapability() (int, int)                  { return 9, 0 }
func (d *cpuDev) compile(string, string) (string, string, error) { return "cpu", "", nil }
func (d *cpuDev) function(name string) (uintptr, error) {
	for i, k := range kernelNames {
		if k == name {
			return uintptr(i + 1), nil
		}
	}
	return 0, fmt.Errorf("no kernel %s", name)
}
func (d *cpuDev) memAlloc(n int) (devptr, error) {
	d.bufs = append(d.bufs, make([]byte, n))
	return cpurun.Addr(len(d.bufs)-1, 0), nil
}
func (d *cpuDev) memFree(devptr) error                  { return nil }
func (d *cpuDev) hostAlloc(int) ([]byte, devptr, error) { return nil, 0, errors.New("no host memory") }
func (d *cpuDev) hostFree([]byte) error                 { return nil }
func (d *cpuDev) at(p devptr, n int) []byte {
	i := int(p>>40) - 1
	off := int(p & (1<<40 - 1))
	return d.bufs[i][off : off+n]
}
func (d *cpuDev) htod(dst devptr, src []byte) error      { copy(d.at(dst, len(src)), src); return nil }
func (d *cpuDev) dtoh(dst []byte, src devptr) error      { copy(dst, d.at(src, len(dst))); return nil }
func (d *cpuDev) dtod(dst, src devptr, n int) error      { copy(d.at(dst, n), d.at(src, n)); return nil }
func (d *cpuDev) sync() error                            { return nil }
func (d *cpuDev) timed(fn func() error) (float32, error) { return 0, fn() }
func (d *cpuDev) close() error                           { return nil }
func (d *cpuDev) launch(fn uintptr, grid, block [3]uint32, p []byte) error {
	if block != [3]uint32{tgThreads, 1, 1} || grid[1] != 1 || grid[2] != 1 {
		return fmt.Errorf("grid %v block %v", grid, block)
	}
	return d.h.Launch(kernelNames[fn-1], int(grid[0]), p, d.bufs)
}

// put uploads floats (or int32s) and returns their device address.
func (d *cpuDev) put(x []float32) devptr {
	p, _ := d.memAlloc(4 * max(len(x), 1))
	copy(d.at(p, 4*len(x)), unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x)))
	return p
}
func (d *cpuDev) putI(x []int32) devptr {
	f := make([]float32, len(x))
	for i, v := range x {
		f[i] = math.Float32frombits(uint32(v))
	}
	return d.put(f)
}
func (d *cpuDev) get(p devptr, n int) []float32 {
	out := make([]float32, n)
	b := d.at(p, 4*n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func cpuBackend(t *testing.T) (*Backend, *cpuDev) {
	t.Helper()
	h, err := cpurun.Build(t.TempDir())
	if errors.Is(err, cpurun.ErrNoCompiler) {
		t.Skip("g++ not installed: the CPU run of the kernel bodies needs it")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	d := &cpuDev{h: h}
	b, err := newBackend(d)
	if err != nil {
		t.Fatal(err)
	}
	return b, d
}

func rnd(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = (r.Float32()*2 - 1) * scale
	}
	return x
}

// near fails unless |got-want| <= tol·(1+|want|) everywhere.
func near(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.Abs(g-w) > tol*(1+math.Abs(w)) {
			t.Fatalf("%s: [%d] = %g, want %g", what, i, g, w)
		}
	}
}

var host nn.HostDevice

func TestLayerKernelsCPU(t *testing.T) {
	b, d := cpuBackend(t)
	r := rand.New(rand.NewPCG(5, 6))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("rms_norm_rows", func(t *testing.T) {
		for kind := nn.NormWeight; kind <= nn.NormUnit; kind++ {
			for _, c := range []struct{ rows, width, xs, ys int }{{3, 300, 0, 0}, {4, 64, 80, 0}, {2, 600, 600, 700}} {
				xs, ys := max(c.xs, c.width), max(c.ys, c.width)
				x := rnd(r, c.rows*xs, 2)
				w := rnd(r, c.width, 1)
				y0 := rnd(r, c.rows*ys, 1)
				s := nn.NormSpec{Rows: c.rows, Width: c.width, XStride: c.xs, YStride: c.ys, Eps: 1e-6, Kind: kind}
				want := append([]float32(nil), y0...)
				host.RMSNorm(nn.HostTensor(want), nn.HostTensor(x), nn.HostTensor(w), s)
				py := d.put(y0)
				must(b.kRMSNorm(py, d.put(x), d.put(w), s))
				near(t, fmt.Sprintf("kind %d %+v", kind, c), d.get(py, len(y0)), want, 2e-6)
				// in place
				if c.xs == c.ys {
					px := d.put(x)
					must(b.kRMSNorm(px, px, d.put(w), s))
					wantIn := append([]float32(nil), x...)
					host.RMSNorm(nn.HostTensor(wantIn), nn.HostTensor(wantIn), nn.HostTensor(w), s)
					near(t, "in place", d.get(px, len(x)), wantIn, 2e-6)
				}
			}
		}
	})

	// add_rms_norm_rows: the sum, then the norm of rms_norm_rows bit for
	// bit (its contract), in registers (up to 4,096 wide, one batch or
	// two, a partial one) and in the loops (wider); near the host's.
	t.Run("add_rms_norm_rows", func(t *testing.T) {
		for kind := nn.NormWeight; kind <= nn.NormUnit; kind++ {
			for _, c := range []struct{ rows, width, ys int }{{2, 300, 0}, {1, 2048, 0}, {2, 3000, 3100}, {1, 4096, 0}, {2, 5000, 0}} {
				ys := max(c.ys, c.width)
				x, res, w := rnd(r, c.rows*c.width, 2), rnd(r, c.rows*c.width, 2), rnd(r, c.width, 1)
				y0 := rnd(r, c.rows*ys, 1)
				s := nn.NormSpec{Rows: c.rows, Width: c.width, YStride: c.ys, Eps: 1e-6, Kind: kind}
				sum := make([]float32, len(x))
				for i := range sum {
					sum[i] = x[i] + res[i]
				}
				want := append([]float32(nil), y0...)
				py := d.put(want)
				must(b.kRMSNorm(py, d.put(sum), d.put(w), s))
				want = d.get(py, len(y0))
				px, py := d.put(x), d.put(y0)
				must(b.kAddRMSNorm(px, d.put(res), py, d.put(w), s))
				what := fmt.Sprintf("kind %d %+v", kind, c)
				sameBits(t, what+": the sum", d.get(px, len(x)), sum)
				sameBits(t, what+": rms_norm_rows of the sum", d.get(py, len(y0)), want)
				hx, hy := append([]float32(nil), x...), append([]float32(nil), y0...)
				nn.AddRMSNorm(host, nn.HostTensor(hx), nn.HostTensor(res), nn.HostTensor(hy), nn.HostTensor(w), s)
				near(t, what+": the host's", d.get(py, len(y0)), hy, 2e-6)
			}
		}
	})

	t.Run("rope", func(t *testing.T) {
		for _, c := range []struct {
			rope          *nn.RoPE
			rows, per, st int
		}{{nn.NewRoPE(64, 1e6), 8, 4, 64}, {nn.NewRoPE(32, 1e4), 6, 2, 96}, {nn.NewProportionalRoPE(128, 16, 1e6, 1), 4, 2, 128},
			{&nn.RoPE{InvFreq: nn.NewRoPE(32, 1e4).InvFreq, Interleaved: true}, 5, 5, 40}} {
			s := nn.RoPESpec{Rows: c.rows, PerPos: c.per, Stride: c.st, Pos0: 1000}
			x := rnd(r, c.rows*c.st, 1)
			want := append([]float32(nil), x...)
			host.RoPE(nn.HostTensor(want), c.rope, s)
			px := d.put(x)
			must(b.kRoPE(px, d.put(c.rope.InvFreq), len(c.rope.InvFreq), c.rope.Half, c.rope.Interleaved, s))
			near(t, fmt.Sprintf("rope %+v", s), d.get(px, len(x)), want, 1e-5)
		}
	})

	t.Run("attention", func(t *testing.T) {
		for _, c := range []struct{ pre, T, window, heads, kvh, hd, vd, qstride int }{
			{0, 5, 0, 4, 2, 64, 64, 64}, {300, 3, 0, 2, 1, 32, 48, 64}, {10, 7, 4, 4, 4, 16, 16, 16},
			{270, 2, 260, 2, 2, 512, 512, 512}, {0, 1, 0, 1, 1, 8, 8, 8},
			// attention_tile's: Qwen3.6-35B's heads, and a window over the
			// cache with unequal head and value dims.
			{0, 40, 0, 16, 2, 256, 256, 256}, {100, 37, 64, 8, 1, 128, 96, 160},
			// attention_gqa's (chunks below 4 tokens): a decode step at
			// the 35B's dims past several chunks of 128 keys, a window
			// over a ring with 4 query heads a KV head and unequal dims,
			// 8 a KV head at small dims.
			{700, 1, 0, 16, 2, 256, 256, 512}, {1000, 2, 300, 8, 2, 64, 128, 64}, {40, 1, 0, 8, 1, 16, 24, 16},
		} {
			kw, vw := c.kvh*c.hd, c.kvh*c.vd
			d2 := nn.AttnDims{Heads: c.heads, KVHeads: c.kvh, HeadDim: c.hd, QStride: c.qstride, VDim: c.vd, Scale: 0.125}
			kv := nn.NewKVCache(kw, vw, c.window)
			// fill the cache with c.pre positions through the host
			Kp, Vp := rnd(r, c.pre*kw, 1), rnd(r, c.pre*vw, 1)
			if c.pre > 0 {
				O := make([]float32, c.pre*c.heads*c.vd)
				kv.Attend(O, rnd(r, c.pre*c.heads*c.qstride, 1), Kp, Vp, c.pre, d2)
			}
			kc, vc := cacheRows(Kp, Vp, c.pre, c.window, kw, vw)
			Q, K, V := rnd(r, c.T*c.heads*c.qstride, 1), rnd(r, c.T*kw, 1), rnd(r, c.T*vw, 1)
			want := make([]float32, c.T*c.heads*c.vd)
			kv.Attend(want, Q, K, V, c.T, d2)
			// Whole, and split into runs (some empty for the chunk's
			// first tokens, the last shorter), merged by attention_merge.
			// Whole also without attention_tile (chunks of 4 tokens or
			// more take it by default).
			// 260 runs (none of its rows' runs hold more than two keys)
			// take attention_merge's loops past its shared memory.
			splits := []int{1, 3, 8, -1}
			if c.T*c.heads <= 6 {
				splits = append(splits, 260)
			}
			// Below 4 tokens, with attention_gqa where it takes the dims
			// and without.
			gqa := []bool{false}
			if gpukernels.AttnGQA(c.T, c.heads, c.kvh, c.hd, c.vd) {
				gqa = append(gqa, true)
			}
			for _, g := range gqa {
				for _, ns := range splits {
					b.attnTileOff, b.attnGQAOff = ns < 0, !g
					ns = max(ns, 1)
					po := d.put(make([]float32, len(want)))
					part := d.put(make([]float32, attnPartFloats(c.T, c.heads, c.vd, ns)))
					must(b.kAttention(po, d.put(Q), d.put(K), d.put(V), d.put(kc), d.put(vc), part, c.pre, c.T, c.window, kw, vw, ns, d2))
					near(t, fmt.Sprintf("%+v nsplit %d, tiles off %v, gqa %v", c, ns, b.attnTileOff, g), d.get(po, len(want)), want, 2e-5)
					b.attnTileOff, b.attnGQAOff = false, false
				}
			}
		}
	})

	t.Run("deltanet", func(t *testing.T) {
		for _, c := range []struct{ T, nk, nv, dk, dv, K int }{{3, 2, 4, 32, 16, 4}, {1, 1, 2, 128, 128, 4}, {5, 1, 1, 8, 300 % 256, 2}, {2, 1, 1, 16, 16, 1},
			// The conv's runs of tokens: several a run, the last shorter;
			// fewer tokens than the window (its entries shift).
			{37, 2, 4, 32, 16, 4}, {2, 1, 2, 16, 16, 4}} {
			C := 2*c.nk*c.dk + c.nv*c.dv
			a := &nn.DeltaNetArgs{T: c.T, Nk: c.nk, Nv: c.nv, Dk: c.dk, Dv: c.dv, K: c.K, Eps: 1e-6}
			mixed, z, bb, aa := rnd(r, c.T*C, 1), rnd(r, c.T*c.nv*c.dv, 1), rnd(r, c.T*c.nv, 2), rnd(r, c.T*c.nv, 2)
			conv, negA, dt, norm := rnd(r, C*c.K, 0.5), rnd(r, c.nv, 1), rnd(r, c.nv, 1), rnd(r, c.dv, 1)
			for i := range negA {
				negA[i] = -float32(math.Abs(float64(negA[i])))
			}
			win, S := rnd(r, (c.K-1)*C, 1), rnd(r, c.nv*c.dk*c.dv, 0.1)
			a.Mixed, a.Z, a.B, a.A = nn.HostTensor(mixed), nn.HostTensor(z), nn.HostTensor(bb), nn.HostTensor(aa)
			a.Conv, a.NegA, a.DtBias, a.Norm = nn.HostTensor(conv), nn.HostTensor(negA), nn.HostTensor(dt), nn.HostTensor(norm)
			Y := make([]float32, c.T*c.nv*c.dv)
			a.Y = nn.HostTensor(Y)
			wantWin, wantS := append([]float32(nil), win...), append([]float32(nil), S...)
			nn.DeltaNetHost(wantWin, wantS, a)
			p := &deltaNetPtrs{T: c.T, Nk: c.nk, Nv: c.nv, Dk: c.dk, Dv: c.dv, K: c.K, Eps: 1e-6,
				Window: d.put(win), State: d.put(S), Scratch: d.put(make([]float32, c.T*C)), Y: d.put(make([]float32, len(Y))),
				Mixed: d.put(mixed), Z: d.put(z), B: d.put(bb), A: d.put(aa), Conv: d.put(conv), NegA: d.put(negA), DtBias: d.put(dt), Norm: d.put(norm)}
			must(b.kDeltaNet(p))
			what := fmt.Sprintf("%+v", c)
			near(t, what+" window", d.get(p.Window, len(win)), wantWin, 0)
			near(t, what+" state", d.get(p.State, len(S)), wantS, 2e-5)
			near(t, what+" y", d.get(p.Y, len(Y)), Y, 5e-5)
		}
	})

	t.Run("elementwise", func(t *testing.T) {
		n := 1000
		x, y := rnd(r, n, 3), rnd(r, n, 3)
		for _, act := range []nn.Activation{nn.SiLUGate, nn.GELUTanhGate} {
			want := make([]float32, n)
			host.GLU(act, nn.HostTensor(want), nn.HostTensor(x), nn.HostTensor(y), n)
			py := d.put(make([]float32, n))
			must(b.kGLU(act, py, d.put(x), d.put(y), n))
			near(t, fmt.Sprintf("glu %d", act), d.get(py, n), want, 1e-6)
		}
		check := func(what string, got devptr, want []float32, tol float64) {
			near(t, what, d.get(got, len(want)), want, tol)
		}
		{
			want := append([]float32(nil), x...)
			host.Add(nn.HostTensor(want), nn.HostTensor(y), n-3)
			px := d.put(x)
			must(b.kAdd(px, d.put(y), n-3))
			check("add", px, want, 0)
		}
		{
			want := append([]float32(nil), x...)
			host.Scale(nn.HostTensor(want), 0.37, n)
			px := d.put(x)
			must(b.kScale(px, 0.37, n))
			check("scale", px, want, 0)
		}
		{
			want := append([]float32(nil), x...)
			host.Softcap(nn.HostTensor(want), 2.5, n)
			px := d.put(x)
			must(b.kSoftcap(px, 2.5, n))
			check("softcap", px, want, 1e-6)
		}
		{
			rows, width, os, gs := 7, 50, 64, 100
			o, gg := rnd(r, rows*os, 2), rnd(r, rows*gs, 2)
			want := append([]float32(nil), o...)
			host.SigmoidMul(nn.HostTensor(want), nn.HostTensor(gg), rows, width, os, gs)
			po := d.put(o)
			must(b.kSigmoidMul(po, d.put(gg), rows, width, os, gs))
			check("sigmoid_mul", po, want, 1e-6)
		}
		{
			rows, width := 6, 130
			out, xx, gg := rnd(r, rows*width, 1), rnd(r, rows*width, 1), rnd(r, rows, 3)
			want := append([]float32(nil), out...)
			host.AddGated(nn.HostTensor(want), nn.HostTensor(xx), nn.HostTensor(gg), rows, width)
			po := d.put(out)
			must(b.kAddGated(po, d.put(xx), d.put(gg), rows, width))
			check("add_gated", po, want, 1e-6)
		}
		{
			T, k, width := 3, 4, 70
			res, wts := rnd(r, T*k*width, 1), rnd(r, T*k, 1)
			want := make([]float32, T*width)
			host.Combine(nn.HostTensor(want), nn.HostTensor(res), wts, T, k, width)
			po := d.put(make([]float32, T*width))
			must(b.kCombine(po, d.put(res), d.put(wts), T, k, width))
			check("combine", po, want, 1e-6)
		}
		{
			rows, stride := 3, 40
			ix := []int32{5, 0, 39, 7, 7, 12}
			src := rnd(r, rows*stride, 1)
			want := make([]float32, rows*len(ix))
			host.Gather(nn.HostTensor(want), nn.HostTensor(src), nn.Index{Host: ix}, rows, stride)
			pd := d.put(make([]float32, len(want)))
			must(b.kGather(pd, d.put(src), d.putI(ix), len(ix), rows, stride))
			check("gather", pd, want, 0)
		}
		{
			width, srcRows := 33, 9
			rows := []int{4, 0, 8, 2}
			r32 := []int32{4, 0, 8, 2}
			src := rnd(r, srcRows*width, 1)
			want := make([]float32, len(rows)*width)
			host.GatherRows(nn.HostTensor(want), nn.HostTensor(src), rows, width)
			pd := d.put(make([]float32, len(want)))
			must(b.kGatherRows(pd, d.put(src), d.putI(r32), len(rows), srcRows, width))
			check("gather_rows", pd, want, 0)
			dst := rnd(r, srcRows*width, 1)
			sc := rnd(r, len(rows)*width, 1)
			want = append([]float32(nil), dst...)
			host.ScatterRows(nn.HostTensor(want), nn.HostTensor(sc), rows, width)
			pd = d.put(dst)
			must(b.kScatterRows(pd, d.put(sc), d.putI(r32), len(rows), srcRows, width))
			check("scatter_rows", pd, want, 0)
		}
	})

	t.Run("route_topk", func(t *testing.T) {
		for _, c := range []struct {
			T, E, k int
			norm    bool
		}{{3, 512, 10, true}, {2, 64, 8, false}, {1, 4096, 64, true}, {2, 300, 1, false}, {1, 8, 8, true}} {
			logits := rnd(r, c.T*c.E, 4)
			// ties: equal logits must go to the lower index, in two
			// lanes (3, 7) and in one lane's own experts (3, 35, 67)
			logits[3], logits[7] = 9, 9
			for _, i := range []int{35, 67} {
				if i < c.E {
					logits[i] = 9
				}
			}
			want := nn.NewRouting(c.T, c.k)
			hostLogits := append([]float32(nil), logits...)
			if err := host.Route(want, nn.HostTensor(hostLogits), c.T, c.E, c.norm); err != nil {
				t.Fatal(err)
			}
			ps, pw := d.put(make([]float32, c.T*c.k)), d.put(make([]float32, c.T*c.k))
			must(b.kRouteTopK(ps, pw, d.put(logits), c.T, c.E, c.k, c.norm))
			sel := d.get(ps, c.T*c.k)
			for i, e := range want.Sel {
				if got := int(int32(math.Float32bits(sel[i]))); got != e {
					t.Fatalf("%+v: sel[%d] = %d, want %d", c, i, got, e)
				}
			}
			near(t, fmt.Sprintf("%+v weights", c), d.get(pw, c.T*c.k), want.Wts, 1e-6)
		}
		// A NaN logit selects nothing: every sel entry of its token is -1
		// (the host's fault check), the other token's are unchanged.
		logits := rnd(r, 2*96, 4)
		logits[96+40] = float32(math.NaN())
		want := nn.NewRouting(1, 6)
		if err := host.Route(want, nn.HostTensor(append([]float32(nil), logits[:96]...)), 1, 96, true); err != nil {
			t.Fatal(err)
		}
		ps, pw := d.put(make([]float32, 12)), d.put(make([]float32, 12))
		must(b.kRouteTopK(ps, pw, d.put(logits), 2, 96, 6, true))
		sel := d.get(ps, 12)
		for i := range 12 {
			got, exp := int(int32(math.Float32bits(sel[i]))), -1
			if i < 6 {
				exp = want.Sel[i]
			}
			if got != exp {
				t.Fatalf("NaN token: sel[%d] = %d, want %d", i, got, exp)
			}
		}
	})
}

// cacheRows lays out the cache the kernel reads after n positions of keys
// K and values V: full, position j at row j; ring (window W), position j at
// row j % W for the last W positions.
func cacheRows(K, V []float32, n, window, kw, vw int) ([]float32, []float32) {
	rows, lo := n, 0
	if window > 0 {
		rows, lo = window, max(0, n-window)
	}
	kc, vc := make([]float32, max(rows, 1)*kw), make([]float32, max(rows, 1)*vw)
	for j := lo; j < n; j++ {
		s := j
		if window > 0 {
			s = j % window
		}
		copy(kc[s*kw:(s+1)*kw], K[j*kw:(j+1)*kw])
		copy(vc[s*vw:(s+1)*vw], V[j*vw:(j+1)*vw])
	}
	return kc, vc
}

// Extents out of the kernels' limits are errors before anything is queued;
// zero counts queue nothing.
func TestLayerKernelsExtents(t *testing.T) {
	b, f := fakeBackend(t)
	ad := nn.AttnDims{Heads: 4, KVHeads: 2, HeadDim: 64, QStride: 64, Scale: 1}
	bad := map[string]error{
		"norm width 0":     b.kRMSNorm(1, 1, 1, nn.NormSpec{Rows: 1, Width: 0}),
		"norm past 2^31":   b.kRMSNorm(1, 1, 1, nn.NormSpec{Rows: 1 << 20, Width: 1 << 12}),
		"rope half<pairs":  b.kRoPE(1, 1, 8, 4, false, nn.RoPESpec{Rows: 1, PerPos: 1, Stride: 16}),
		"rope perpos 0":    b.kRoPE(1, 1, 8, 8, false, nn.RoPESpec{Rows: 1, Stride: 16}),
		"attn head dim":    b.kAttention(1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 2*1024, 2*1024, 1, nn.AttnDims{Heads: 2, KVHeads: 2, HeadDim: 1024, QStride: 1024}),
		"attn gqa":         b.kAttention(1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 192, 192, 1, nn.AttnDims{Heads: 4, KVHeads: 3, HeadDim: 64, QStride: 64}),
		"attn kwidth":      b.kAttention(1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 64, 128, 1, ad),
		"attn past 2^31":   b.kAttention(1, 1, 1, 1, 1, 1, 0, 1<<30, 1, 0, 128, 128, 1, ad),
		"deltanet dk":      b.kDeltaNet(&deltaNetPtrs{T: 1, Nk: 1, Nv: 1, Dk: 512, Dv: 16, K: 4}),
		"deltanet K":       b.kDeltaNet(&deltaNetPtrs{T: 1, Nk: 1, Nv: 1, Dk: 16, Dv: 16, K: 17}),
		"deltanet nv%nk":   b.kDeltaNet(&deltaNetPtrs{T: 1, Nk: 2, Nv: 3, Dk: 16, Dv: 16, K: 4}),
		"glu activation":   b.kGLU(7, 1, 1, 1, 4),
		"softcap 0":        b.kSoftcap(1, 0, 4),
		"add negative":     b.kAdd(1, 1, -1),
		"gather stride":    b.kGather(1, 1, 1, 4, 1, 0),
		"route E":          b.kRouteTopK(1, 1, 1, 1, routeMaxE+1, 8, true),
		"route k > E":      b.kRouteTopK(1, 1, 1, 1, 4, 8, true),
		"route k > 64":     b.kRouteTopK(1, 1, 1, 1, 128, 65, true),
		"combine 2^31":     b.kCombine(1, 1, 1, 1<<16, 8, 1<<13),
		"sigmoid_mul span": b.kSigmoidMul(1, 1, 1<<16, 8, 1<<16, 8),
	}
	for what, err := range bad {
		if err == nil {
			t.Errorf("%s: no error", what)
		}
	}
	for what, err := range map[string]error{
		"norm rows 0": b.kRMSNorm(1, 1, 1, nn.NormSpec{Width: 8}),
		"attn T 0":    b.kAttention(1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 128, 128, 1, ad),
		"scale 0":     b.kScale(1, 2, 0),
		"route T 0":   b.kRouteTopK(1, 1, 1, 0, 8, 2, false),
	} {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	if len(f.launches) != 0 {
		t.Fatalf("launched %v", f.launches)
	}
}
