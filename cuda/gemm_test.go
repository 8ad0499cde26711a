package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
)

// The QGemm struct and the tile geometry the host assumes are the ones the
// kernel source declares.
func TestGemmParamsMatchSource(t *testing.T) {
	src := Source()
	if m := regexp.MustCompile(`QP_STATIC_ASSERT\(sizeof\(QGemm\) == (\d+)`).FindStringSubmatch(src); m == nil || m[1] != fmt.Sprint(sizeQGemm) {
		t.Errorf("QGemm size: source %v, Go writes %d", m, sizeQGemm)
	}
	for name, v := range map[string]int{"QP_GM_BM": gemmBM, "QP_GM_BN": gemmBN, "QP_GM_BK": gemmBK, "QP_GF_BM": gemmFMABM, "QP_GF_BN": gemmFMABN} {
		if !strings.Contains(src, fmt.Sprintf("#define %s %d ", name, v)) && !strings.Contains(src, fmt.Sprintf("#define %s %d\n", name, v)) {
			t.Errorf("%s is not %d in the kernel source", name, v)
		}
	}
	// Go writes the fields in this order (gemmLaunch); the struct must
	// declare them so: 5 pointers, then 8 uint32.
	want := []string{"w", "s", "b", "x", "y", "n", "rows", "cols", "group", "stype", "bits", "ldy", "pad"}
	body := src[strings.Index(src, "struct QGemm {"):]
	body = body[:strings.Index(body, "};")]
	var got []string
	for _, line := range strings.Split(body, "\n")[1:] {
		if f := regexp.MustCompile(`^\s*(?:const )?\w+\*? (\w+);`).FindStringSubmatch(line); f != nil {
			got = append(got, f[1])
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("QGemm fields %v, want %v", got, want)
	}
}

func TestUseGemm(t *testing.T) {
	q4 := mlxq.Matrix{Rows: 512, Cols: 2048, Bits: 4, GroupSize: 64, Type: mlxq.BF16}
	down := mlxq.Matrix{Rows: 2048, Cols: 512, Bits: 8, GroupSize: 64, Type: mlxq.BF16}
	q3 := mlxq.Matrix{Rows: 8192, Cols: 2048, Bits: 3, GroupSize: 64, Type: mlxq.BF16}
	dense := mlxq.Matrix{Rows: 4100, Cols: 300, Type: mlxq.F16}
	big := mlxq.Matrix{Rows: 8192, Cols: 2048, Bits: 4, GroupSize: 64, Type: mlxq.BF16}
	for _, c := range []struct {
		w    mlxq.Matrix
		n    int
		want bool
	}{
		{q4, 1, false}, {q4, gemmMinVectors, false}, {q4, gemmManyVectors - 1, false},
		{q4, gemmManyVectors, true}, {q4, 4096, true},
		{down, gemmMinVectors, false}, {down, 100, true},
		{big, gemmMinVectors - 1, false}, {big, gemmMinVectors, true},
		{q3, 4096, false}, {dense, 4096, true}, {dense, 2, false}, {dense, 63, false}, {dense, 64, true},
	} {
		if got := useGemm(c.w, c.n); got != c.want {
			t.Errorf("useGemm(q%d %dx%d, n=%d) = %v", c.w.Bits, c.w.Rows, c.w.Cols, c.n, got)
		}
	}
	for _, c := range []struct {
		w    mlxq.Matrix
		want string
	}{
		{q4, "gemm_q4"}, {mlxq.Matrix{Rows: 1, Cols: 32, Bits: 8, GroupSize: 32}, "gemm_q8"},
		{mlxq.Matrix{Rows: 1, Cols: 64, Type: mlxq.BF16}, "gemm_bf16"}, {mlxq.Matrix{Rows: 1, Cols: 64, Type: mlxq.F16}, "gemm_f16"},
		{mlxq.Matrix{Rows: 1, Cols: 64, Type: mlxq.F32}, "gemm_f32"}, {dense, ""}, {q3, ""},
	} {
		if got := gemmKernel(c.w, false); got != c.want {
			t.Errorf("gemmKernel(%+v) = %q, want %q", c.w, got, c.want)
		}
		half := c.want
		if half == "gemm_q4" || half == "gemm_q8" || half == "gemm_bf16" {
			half += "_h"
		}
		if got := gemmKernel(c.w, true); got != half {
			t.Errorf("gemmKernel(%+v, half) = %q, want %q", c.w, got, half)
		}
	}
}

// recDev is the fake device recording each launch's parameter block.
type recDev struct {
	*fakeDev
	params  [][]byte
	compute func(kernel string, p gemmParams) // if set, runs each gemm launch
}

func (d *recDev) launch(fn uintptr, grid, block [3]uint32, p []byte) error {
	d.params = append(d.params, append([]byte(nil), p...))
	if err := d.fakeDev.launch(fn, grid, block, p); err != nil || d.compute == nil {
		return err
	}
	if k := kernelNames[fn-1]; strings.HasPrefix(k, "gemm_") && !strings.HasPrefix(k, "gemm_group_") {
		d.compute(k, decodeGemm(p))
	}
	return nil
}

// gemmOnCPU makes the fake device compute the gemm kernels' launches with
// the CPU backend (the fake does so for every gemm launch already; this
// keeps the tests' intent explicit).
func (d *recDev) gemmOnCPU(t *testing.T) {
	d.compute = func(kernel string, p gemmParams) { d.fakeDev.gemmOnCPU(kernel, p) }
}

// gemmParams is a decoded QGemm block.
type gemmParams struct {
	w, s, b, x, y                               devptr
	n, rows, cols, group, stype, bits, ldy, pad int
}

func decodeGemm(p []byte) gemmParams {
	u64 := func(i int) devptr { return binary.LittleEndian.Uint64(p[8*i:]) }
	u32 := func(i int) int { return int(binary.LittleEndian.Uint32(p[40+4*i:])) }
	return gemmParams{u64(0), u64(1), u64(2), u64(3), u64(4), u32(0), u32(1), u32(2), u32(3), u32(4), u32(5), u32(6), u32(7)}
}

// The launcher's choice of kernel, its grid, its parameter block, and the
// split of the rows past maxGridY row blocks, on the fake device.
func TestGemmLaunchHostLogic(t *testing.T) {
	d := &recDev{fakeDev: newFake(t)}
	d.gemmLaunchOnly = true // the addresses below are made up: check the launches only
	b, err := newBackend(d)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const wp, sp, bp, xp, yp = 1 << 40, 2 << 40, 3 << 40, 4 << 40, 5 << 40
	type want struct {
		kernel string
		grids  [][3]uint32
	}
	for _, c := range []struct {
		what   string
		w      mlxq.Matrix
		n      int
		xp, wp devptr
		want   want
	}{
		{"q4 expert", mlxq.Matrix{Rows: 512, Cols: 2048, Bits: 4, GroupSize: 64, Type: mlxq.BF16}, 4096, xp, wp,
			want{"gemm_q4", [][3]uint32{{32, 4, 1}}}},
		{"q8 tails", mlxq.Matrix{Rows: 129, Cols: 96, Bits: 8, GroupSize: 32, Type: mlxq.F32}, 129, xp, wp,
			want{"gemm_q8", [][3]uint32{{2, 2, 1}}}},
		{"f16 dense", mlxq.Matrix{Rows: 1, Cols: 32, Type: mlxq.F16}, 2, xp, wp, want{"gemm_f16", [][3]uint32{{1, 1, 1}}}},
		{"odd columns", mlxq.Matrix{Rows: 65, Cols: 300, Type: mlxq.BF16}, 65, xp, wp, want{"gemm_fma", [][3]uint32{{2, 2, 1}}}},
		{"misaligned x", mlxq.Matrix{Rows: 64, Cols: 64, Bits: 4, GroupSize: 32, Type: mlxq.BF16}, 8, xp + 4, wp, want{"gemm_fma", [][3]uint32{{1, 1, 1}}}},
		{"misaligned w", mlxq.Matrix{Rows: 64, Cols: 64, Type: mlxq.BF16}, 8, xp, wp + 2, want{"gemm_fma", [][3]uint32{{1, 1, 1}}}},
		{"6 bits", mlxq.Matrix{Rows: 64, Cols: 64, Bits: 6, GroupSize: 64, Type: mlxq.F16}, 8, xp, wp, want{"gemm_fma", [][3]uint32{{1, 1, 1}}}},
		{"rows past one grid", mlxq.Matrix{Rows: maxGridY*gemmBN + 3, Cols: 64, Bits: 4, GroupSize: 32, Type: mlxq.F16}, 300, xp, wp,
			want{"gemm_q4", [][3]uint32{{3, maxGridY, 1}, {3, 1, 1}}}},
	} {
		d.launches, d.grids, d.params = nil, nil, nil
		if err := b.gemm(c.wp, sp, bp, c.xp, yp, c.w, c.n); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if fmt.Sprint(d.grids) != fmt.Sprint(c.want.grids) {
			t.Errorf("%s: grids %v, want %v", c.what, d.grids, c.want.grids)
		}
		r0 := 0
		for i, k := range d.launches {
			if k != c.want.kernel {
				t.Errorf("%s: launch %d ran %s, want %s", c.what, i, k, c.want.kernel)
			}
			p := decodeGemm(d.params[i])
			bn := gemmBN
			if k == "gemm_fma" {
				bn = gemmFMABN
			}
			nr := min(c.w.Rows-r0, maxGridY*bn)
			off := uint64(r0)
			sRow := uint64(c.w.Groups() * c.w.Type.Size())
			want := gemmParams{c.wp + off*uint64(c.w.RowBytes()), sp + off*sRow, bp + off*sRow, c.xp, yp + 4*off,
				c.n, nr, c.w.Cols, c.w.GroupSize, int(c.w.Type), c.w.Bits, c.w.Rows, 0}
			if p != want {
				t.Errorf("%s: launch %d params\n%+v\nwant\n%+v", c.what, i, p, want)
			}
			r0 += nr
		}
		if r0 != c.w.Rows {
			t.Errorf("%s: launches cover %d rows of %d", c.what, r0, c.w.Rows)
		}
	}
	if err := b.gemm(wp, sp, bp, xp, yp, mlxq.Matrix{Rows: 4, Cols: 32, Type: mlxq.F32}, 0); err == nil {
		t.Error("gemm of 0 vectors succeeded")
	}
}

// matMulGemm places MatMul's arguments for gemm: staged, or in place from
// Alloc memory when 16-byte aligned; the results (computed by the fake
// device from the parameter blocks) are the CPU's, bit for bit.
func TestFakeMatMulGemm(t *testing.T) {
	d := &recDev{fakeDev: newFake(t)}
	d.gemmOnCPU(t)
	b, err := newBackend(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	r := rand.New(rand.NewPCG(27, 28))
	for _, c := range []struct {
		matCase
		n      int
		kernel string
	}{
		{matCase{129, 256, 4, 64, mlxq.BF16}, 130, "gemm_q4"},
		{matCase{40, 96, 8, 32, mlxq.F32}, 20, "gemm_q8"},
		{matCase{41, 300, 0, 0, mlxq.F16}, 17, "gemm_fma"},
		{matCase{33, 64, 0, 0, mlxq.BF16}, 16, "gemm_bf16"},
	} {
		m := makeMatrix(t, r, c.matCase)
		x := randVec(r, c.n*c.cols, 1)
		want := make([]float32, c.n*c.rows)
		runtime.CPU{}.MatMul(m, want, x, c.n)
		for _, inPlace := range []bool{false, true} {
			mm := m
			if inPlace {
				mm = inAlloc(t, b, m)
			}
			d.launches = nil
			before := b.Stats()
			got := make([]float32, c.n*c.rows)
			b.mu.Lock()
			err := b.matMulGemm(mm, got, x, c.n)
			b.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			sameBits(t, fmt.Sprintf("%v in place %v", c.matCase, inPlace), got, want)
			if fmt.Sprint(d.launches) != fmt.Sprint([]string{c.kernel}) {
				t.Errorf("%v: launches %v, want %s", c.matCase, d.launches, c.kernel)
			}
			zc := b.Stats().ZeroCopyBytes - before.ZeroCopyBytes
			if inPlace && zc != m.Bytes() || !inPlace && zc != 0 {
				t.Errorf("%v in place %v: %d bytes read in place of %d", c.matCase, inPlace, zc, m.Bytes())
			}
		}
	}
}

// download copies n bytes of device memory back.
func download(tb testing.TB, b *Backend, p devptr, n int) []byte {
	tb.Helper()
	h, _, err := b.dev.hostAlloc(n)
	if err != nil {
		tb.Fatal(err)
	}
	defer b.dev.hostFree(h)
	if err := b.dev.dtoh(h, p); err != nil {
		tb.Fatal(err)
	}
	if err := b.dev.sync(); err != nil {
		tb.Fatal(err)
	}
	return append([]byte(nil), h...)
}

// gemmTol is the bound of the tf32 kernels: x and w rounded to tf32
// (relative error <= 2^-11 each, so <= 2^-10 + 2^-22 per product) and
// float32 sums: 9.77e-4 x sum_k |w x| from the roundings in the worst case
// (every error of one sign), plus the sums' <= (cols/8 + 3) x 2^-23 (1.3e-5
// at the 1024 columns of these tests); the project's bound for quantized
// products, 1e-3 x sum_k |w x|, is what they are held to (the tests log
// the largest ratio seen). gemmTolHalf is the bf16 kernels' worst case,
// (2^-7 + 2^-16) x sum_k |w x|. The FMA fallback is float32 throughout and
// held to matTol (1e-4), as the matvec.
const (
	gemmTol     = 1e-3
	gemmTolHalf = 7.9e-3
)

// gemmCheck runs the kernel through gemmLaunch (or gemm, for kernel "")
// on device copies of m and x, twice, and checks the result against the
// CPU backend and the bits of the second run against the first; the
// output buffer has a guard zone past its end, and starts as NaN so that
// an output never written fails.
func gemmCheck(t *testing.T, b *Backend, kernel string, m mlxq.Matrix, x []float32, n int, tol float64) float64 {
	t.Helper()
	wp := upload(t, b, m.Weight)
	var sp, bp devptr
	if m.Bits > 0 {
		sp, bp = upload(t, b, m.Scales), upload(t, b, m.Biases)
	}
	xp := upload(t, b, f32bytes(x))
	const guard = 256
	ny := n*m.Rows + guard
	nan := make([]byte, 4*ny)
	for i := 0; i < ny; i++ {
		binary.LittleEndian.PutUint32(nan[4*i:], 0x7fc00001)
	}
	yp := upload(t, b, nan)
	run := func() []float32 {
		var err error
		switch kernel {
		case "":
			err = b.gemm(wp, sp, bp, xp, yp, m, n)
		case "gemm_fma":
			err = b.gemmLaunch(kernel, gemmFMABM, gemmFMABN, wp, sp, bp, xp, yp, m, n)
		default:
			err = b.gemmLaunch(kernel, gemmBM, gemmBN, wp, sp, bp, xp, yp, m, n)
		}
		if err != nil {
			t.Fatal(err)
		}
		raw := download(t, b, yp, 4*ny)
		y := make([]float32, ny)
		copy(y, unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), ny))
		return y
	}
	got := run()
	for i := n * m.Rows; i < ny; i++ {
		if math.Float32bits(got[i]) != 0x7fc00001 {
			t.Fatalf("%s: wrote past the output, at %d of %d", kernel, i, n*m.Rows)
		}
	}
	again := run()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(again[i]) {
			t.Fatalf("%s: not deterministic at %d: %g then %g", kernel, i, got[i], again[i])
		}
	}
	return checkMatMulWithin(t, kernel, m, x, got, n, tol)
}

// TestGemmConformance: every tensor-core kernel (tf32 and bf16 inputs) and
// the fallback against the CPU backend, on shapes with tails in every
// dimension (vectors and rows not multiples of the tiles; columns of one
// step and of many).
func TestGemmConformance(t *testing.T) {
	b := openOrSkip(t)
	r := rand.New(rand.NewPCG(21, 22))
	type shape struct{ n, rows, cols int }
	shapes := []shape{{1, 1, 128}, {3, 200, 384}, {130, 129, 256}, {140, 300, 1024}}
	worst := map[string]float64{}
	check := func(m mlxq.Matrix, x []float32, n int) {
		for _, half := range []bool{false, true} {
			k, tol := gemmKernel(m, half), gemmTol
			if strings.HasSuffix(k, "_h") {
				tol = gemmTolHalf
			}
			worst[k] = max(worst[k], gemmCheck(t, b, k, m, x, n, tol))
		}
	}
	for _, bits := range []int{4, 8} {
		for _, g := range []int{32, 64, 128} {
			for _, st := range []mlxq.Float{mlxq.BF16, mlxq.F16, mlxq.F32} {
				for _, s := range shapes {
					m := makeMatrix(t, r, matCase{s.rows, s.cols, bits, g, st})
					check(m, randVec(r, s.n*s.cols, 1), s.n)
				}
			}
		}
	}
	for _, st := range []mlxq.Float{mlxq.BF16, mlxq.F16, mlxq.F32} {
		for _, s := range shapes {
			m := makeMatrix(t, r, matCase{s.rows, s.cols, 0, 0, st})
			check(m, randVec(r, s.n*s.cols, 1), s.n)
		}
	}
	// Large activations (an outlier vector): tf32 and bf16 keep float32's
	// range.
	m := makeMatrix(t, r, matCase{64, 256, 4, 64, mlxq.BF16})
	x := randVec(r, 16*256, 1)
	for i := range 256 {
		x[5*256+i] *= 1e5
	}
	check(m, x, 16)
	// The fallback on every width, odd columns and the tails.
	for _, c := range []struct {
		matCase
		n int
	}{
		{matCase{67, 512, 4, 64, mlxq.BF16}, 70}, {matCase{65, 256, 8, 32, mlxq.F16}, 3},
		{matCase{33, 384, 3, 64, mlxq.BF16}, 65}, {matCase{9, 256, 5, 32, mlxq.F32}, 9},
		{matCase{20, 384, 6, 128, mlxq.F16}, 17}, {matCase{70, 256, 2, 32, mlxq.BF16}, 64},
		{matCase{41, 300, 0, 0, mlxq.BF16}, 66}, {matCase{41, 300, 0, 0, mlxq.F16}, 5}, {matCase{130, 77, 0, 0, mlxq.F32}, 129},
	} {
		m := makeMatrix(t, r, c.matCase)
		x := randVec(r, c.n*c.cols, 1)
		worst["gemm_fma"] = max(worst["gemm_fma"], gemmCheck(t, b, "gemm_fma", m, x, c.n, matTol))
	}
	// gemm itself: the default kernel, and odd columns to the fallback.
	m = makeMatrix(t, r, matCase{100, 512, 4, 64, mlxq.BF16})
	x = randVec(r, 9*512, 1)
	gemmCheck(t, b, "", m, x, 9, gemmTol)
	m = makeMatrix(t, r, matCase{41, 300, 0, 0, mlxq.F32})
	x = randVec(r, 9*300, 1)
	gemmCheck(t, b, "", m, x, 9, matTol)
	for k, v := range worst {
		t.Logf("%s: largest |gpu - cpu| / sum|w x| = %.3g", k, v)
	}
}

// TestGemmEachKernel runs every gemm kernel once on a small shape with
// tails in every dimension (2 x 2 groups of threads): the case for the
// compute-sanitizer runs (memcheck, racecheck, synccheck, initcheck),
// where TestGemmConformance would take too long.
func TestGemmEachKernel(t *testing.T) {
	b := openOrSkip(t)
	r := rand.New(rand.NewPCG(25, 26))
	const n, rows = 130, 129
	for _, k := range kernelNames {
		if !strings.HasPrefix(k, "gemm_") || k == "gemm_base" || strings.HasPrefix(k, "gemm_group_") {
			continue // gemm_base: TestGemmBaselineKernel; gemm_group_*: TestLayerGroupedExpertsGPU
		}
		c := matCase{rows, 96, 0, 0, mlxq.BF16}
		switch k {
		case "gemm_q4", "gemm_q4_h":
			c.bits, c.group = 4, 32
		case "gemm_q8", "gemm_q8_h":
			c.bits, c.group, c.t = 8, 32, mlxq.F16
		case "gemm_f16":
			c.t = mlxq.F16
		case "gemm_f32":
			c.t = mlxq.F32
		case "gemm_fma":
			c = matCase{rows, 100, 0, 0, mlxq.F32}
		}
		m := makeMatrix(t, r, c)
		if k != "gemm_fma" && gemmKernel(m, strings.HasSuffix(k, "_h")) != k {
			t.Fatalf("case for %s picks %s", k, gemmKernel(m, strings.HasSuffix(k, "_h")))
		}
		x := randVec(r, n*c.cols, 1)
		tol := emuTol(k)
		gemmCheck(t, b, k, m, x, n, tol)
	}
}

// TestGemmBaselineKernel checks the benchmark's bf16 x bf16 kernel (gemm_base) on
// inputs exact in bf16 (so the CPU's float32 product of the same values is
// the reference, within the float32 bound).
func TestGemmBaselineKernel(t *testing.T) {
	b := openOrSkip(t)
	r := rand.New(rand.NewPCG(23, 24))
	const n, rows, cols = 150, 140, 320
	m := makeMatrix(t, r, matCase{rows, cols, 0, 0, mlxq.BF16})
	x := randVec(r, n*cols, 1)
	xh := make([]byte, 2*len(x))
	mlxq.EncodeFloats(xh, x, mlxq.BF16)
	mlxq.DecodeFloats(x, xh, mlxq.BF16) // x exact in bf16
	wp, xp := upload(t, b, m.Weight), upload(t, b, xh)
	yp := upload(t, b, make([]byte, 4*n*rows))
	if err := b.gemmLaunch("gemm_base", gemmBM, gemmBN, wp, 0, 0, xp, yp, m, n); err != nil {
		t.Fatal(err)
	}
	raw := download(t, b, yp, 4*n*rows)
	got := make([]float32, n*rows)
	copy(got, unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), n*rows))
	checkMatMul(t, "gemm_base", m, x, got, n)
}

// devMem allocates n bytes of device memory, filled by repeating one block
// of at most 16 MiB made by gen (nil: left as allocated); free releases it.
func devMem(tb testing.TB, b *Backend, n int, gen func([]byte)) (p devptr, free func()) {
	tb.Helper()
	p, err := b.dev.memAlloc(n)
	if err != nil {
		tb.Fatal(err)
	}
	free = func() {
		if err := b.dev.memFree(p); err != nil {
			tb.Error(err)
		}
	}
	if gen == nil {
		return p, free
	}
	blk := min(n, 16<<20)
	h, _, err := b.dev.hostAlloc(blk)
	if err != nil {
		tb.Fatal(err)
	}
	defer b.dev.hostFree(h)
	gen(h)
	if err := b.dev.htod(p, h); err != nil {
		tb.Fatal(err)
	}
	for off := blk; off < n; off += blk {
		if err := b.dev.dtod(p+uint64(off), p, min(blk, n-off)); err != nil {
			tb.Fatal(err)
		}
	}
	if err := b.dev.sync(); err != nil {
		tb.Fatal(err)
	}
	return p, free
}

// bf16Gen fills a block with bf16 values uniform in [lo, hi).
func bf16Gen(r *rand.Rand, lo, hi float32) func([]byte) {
	return func(p []byte) {
		for i := 0; i+2 <= len(p); i += 2 {
			binary.LittleEndian.PutUint16(p[i:], mlxq.F32ToBF16(lo+(hi-lo)*r.Float32()))
		}
	}
}

// f32Gen fills a block with float32 values uniform in [-1, 1).
func f32Gen(r *rand.Rand) func([]byte) {
	return func(p []byte) {
		for i := 0; i+4 <= len(p); i += 4 {
			binary.LittleEndian.PutUint32(p[i:], math.Float32bits(2*r.Float32()-1))
		}
	}
}

// msPer runs fn twice to warm up, then reps times between two events, and
// returns the GPU milliseconds per run.
func msPer(tb testing.TB, b *Backend, reps int, fn func() error) float64 {
	tb.Helper()
	for range 2 {
		if err := fn(); err != nil {
			tb.Fatal(err)
		}
	}
	ms, err := b.dev.timed(func() error {
		for range reps {
			if err := fn(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return float64(ms) / float64(reps)
}

// BenchmarkGemmRate measures, in one run: the GPU's matmul rate (the
// baseline: gemm_base, this package's bf16 tensor-core kernel with bf16
// inputs, on a square 8192 problem; and cuBLAS's bf16 GEMM where libcublas
// is found, for reference); the same kernel body with tf32 inputs on the
// same problem (gemm_f32, the ceiling of the tf32 kernels); then the
// batched products of a 4,096-token prefill on the Qwen3.6-35B shapes
// (experts [512, 2048] and [2048, 512], dense [8192, 2048] and the
// vocabulary head [248320, 2048]) in 4-bit, 8-bit (group 64, bf16 scales)
// and bf16, each with tf32 inputs (the default) and bf16 inputs (_h), in
// TFLOP/s (2·n·rows·cols per product) and as a ratio to the baseline; the
// FMA fallback's rate on one shape; and, for an expert shape, gemm's time
// against the matvec per vector for n = 1 .. 256 (where useGemm's
// threshold should lie).
func BenchmarkGemmRate(bb *testing.B) {
	b := openOrSkip(bb)
	r := rand.New(rand.NewPCG(31, 32))
	tflops := func(n, rows, cols int, ms float64) float64 {
		return 2 * float64(n) * float64(rows) * float64(cols) / (ms / 1e3) / 1e12
	}

	for _, k := range kernelNames {
		if strings.HasPrefix(k, "gemm_") {
			bb.Logf("%s: %s", k, kernelResources(b, k))
		}
	}

	const sq = 8192
	sqm := mlxq.Matrix{Rows: sq, Cols: sq, Type: mlxq.BF16}
	wp, freeW := devMem(bb, b, 2*sq*sq, bf16Gen(r, -1, 1))
	xp, freeX := devMem(bb, b, 2*sq*sq, bf16Gen(r, -1, 1))
	yp, freeY := devMem(bb, b, 4*sq*sq, nil)
	ms := msPer(bb, b, 5, func() error { return b.gemmLaunch("gemm_base", gemmBM, gemmBN, wp, 0, 0, xp, yp, sqm, sq) })
	base := tflops(sq, sq, sq, ms)
	bb.Logf("baseline gemm_base (bf16 inputs) [%d]^3: %.3f ms, %.1f TFLOP/s", sq, ms, base)
	bb.ReportMetric(base, "base-TFLOP/s")
	if rate, note := cublasRate(bb, b, wp, xp, yp, sq); rate > 0 {
		bb.Logf("cuBLAS bf16 GEMM [%d]^3 (%s): %.1f TFLOP/s; the baseline is %.2fx of it", sq, note, rate, base/rate)
		bb.ReportMetric(rate, "cublas-TFLOP/s")
	} else {
		bb.Logf("cuBLAS: not measured (%s)", note)
	}
	freeW()
	freeX()
	wp, freeW = devMem(bb, b, 4*sq*sq, f32Gen(r))
	xp, freeX = devMem(bb, b, 4*sq*sq, f32Gen(r))
	sqf := mlxq.Matrix{Rows: sq, Cols: sq, Type: mlxq.F32}
	ms = msPer(bb, b, 3, func() error { return b.gemmLaunch("gemm_f32", gemmBM, gemmBN, wp, 0, 0, xp, yp, sqf, sq) })
	bb.Logf("gemm_f32 (tf32 inputs, float32 W and X) [%d]^3: %.3f ms, %.1f TFLOP/s = %.2fx the baseline",
		sq, ms, tflops(sq, sq, sq, ms), tflops(sq, sq, sq, ms)/base)
	freeW()
	freeX()
	freeY()

	const n = 4096
	type kind struct {
		name  string
		bits  int
		dense mlxq.Float
	}
	kinds := []kind{{"q4", 4, 0}, {"q8", 8, 0}, {"bf16", 0, mlxq.BF16}}
	xp, freeX = devMem(bb, b, 4*n*8192, f32Gen(r))
	defer freeX()
	for _, shape := range [][2]int{{512, 2048}, {2048, 512}, {8192, 2048}, {248320, 2048}} {
		rows, cols := shape[0], shape[1]
		for _, k := range kinds {
			w := mlxq.Matrix{Rows: rows, Cols: cols, Bits: k.bits, Type: mlxq.BF16}
			if k.bits > 0 {
				w.GroupSize = 64
			} else {
				w.Type = k.dense
			}
			var wgen func([]byte)
			if k.bits > 0 {
				wgen = func(p []byte) {
					for i := 0; i+8 <= len(p); i += 8 {
						binary.LittleEndian.PutUint64(p[i:], r.Uint64())
					}
				}
			} else {
				wgen = bf16Gen(r, -0.05, 0.05)
			}
			wp, freeW := devMem(bb, b, rows*w.RowBytes(), wgen)
			var sp, bp devptr
			freeS, freeB := func() {}, func() {}
			if k.bits > 0 {
				sp, freeS = devMem(bb, b, rows*w.Groups()*2, bf16Gen(r, 0.001, 0.011))
				bp, freeB = devMem(bb, b, rows*w.Groups()*2, bf16Gen(r, -0.05, 0.05))
			}
			yp, freeY := devMem(bb, b, 4*n*rows, nil)
			reps := max(3, min(50, int(2e12/(2*float64(n)*float64(rows)*float64(cols)))))
			gv := 0.0 // the matvec per vector, for comparison (not on the vocabulary head: seconds)
			if rows <= 8192 {
				kernel, _ := gemvKernel(w)
				gv = msPer(bb, b, 1, func() error { return b.gemv(kernel, wp, sp, bp, xp, yp, w, n) })
			}
			for _, half := range []bool{false, true} {
				kernel := gemmKernel(w, half)
				ms := msPer(bb, b, reps, func() error { return b.gemmLaunch(kernel, gemmBM, gemmBN, wp, sp, bp, xp, yp, w, n) })
				rate := tflops(n, rows, cols, ms)
				vs := ""
				if gv > 0 {
					vs = fmt.Sprintf(", %.1fx faster than the matvec per vector (%.3f ms)", gv/ms, gv)
				}
				bb.Logf("%s n=%d [%d, %d]: %.3f ms, %.1f TFLOP/s = %.2fx the baseline%s", kernel, n, rows, cols, ms, rate, rate/base, vs)
				bb.ReportMetric(rate/base, fmt.Sprintf("x-base-%s-%dx%d", kernel, rows, cols))
			}
			if rows == 2048 && cols == 512 && k.bits == 0 {
				ms := msPer(bb, b, reps, func() error {
					return b.gemmLaunch("gemm_fma", gemmFMABM, gemmFMABN, wp, sp, bp, xp, yp, w, n)
				})
				rate := tflops(n, rows, cols, ms)
				bb.Logf("gemm_fma (the fallback) %s n=%d [%d, %d]: %.3f ms, %.1f TFLOP/s = %.2fx the baseline",
					k.name, n, rows, cols, ms, rate, rate/base)
			}
			if k.bits == 4 && (rows == 512 || rows == 2048 || rows == 8192) {
				kernel, _ := gemvKernel(w)
				for _, nv := range []int{4, 8, 16, 32, 64, 128, 256, 512} {
					gv := msPer(bb, b, 10, func() error { return b.gemv(kernel, wp, sp, bp, xp, yp, w, nv) })
					gm := msPer(bb, b, 10, func() error { return b.gemm(wp, sp, bp, xp, yp, w, nv) })
					bb.Logf("crossover q4 [%d, %d] n=%d: gemv %.1f us, gemm %.1f us (gemm/gemv %.2f; useGemm %v)",
						rows, cols, nv, 1e3*gv, 1e3*gm, gm/gv, useGemm(w, nv))
				}
			}
			freeY()
			freeB()
			freeS()
			freeW()
		}
	}
}
