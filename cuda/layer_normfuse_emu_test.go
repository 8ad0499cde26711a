package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The fused norm kernels (gemv_q4_set_norm, gemv_q8_set_norm) on the CPU
// emulator (testdata/emu/normset.cpp: the kernels' own source, 256 threads
// a group), against the two launches they replace run by the same emulator
// from their own source (add_rms_norm_rows of internal/gpukernels, then
// gemv_*_set of its output): x, the norm and every product the same bits,
// the group counter back to zero; and the norm and the products against
// the CPU backend within the kernels' bounds, so that a fault shared by
// both paths fails too.

// normSetImage runs kernel of the normset emulator over gx groups with
// block (its pointer fields at ptrs: offsets into img, ^0 for none) and
// returns the memory after the run.
func normSetImage(t *testing.T, bin, kernel string, gx int, block []byte, ptrs []int, img *moeImage) *moeImage {
	t.Helper()
	var in bytes.Buffer
	binary.Write(&in, binary.LittleEndian, uint32(len(block)))
	binary.Write(&in, binary.LittleEndian, uint32(len(ptrs)))
	for _, p := range ptrs {
		binary.Write(&in, binary.LittleEndian, uint32(p))
	}
	in.Write(block)
	binary.Write(&in, binary.LittleEndian, uint64(len(img.mem)))
	in.Write(img.mem)
	dir := t.TempDir()
	inf, outf := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	if err := os.WriteFile(inf, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, kernel, fmt.Sprint(gx), "1", inf, outf).CombinedOutput(); err != nil {
		t.Fatalf("emu %s: %v\n%s", kernel, err, out)
	}
	raw, err := os.ReadFile(outf)
	if err != nil || len(raw) != len(img.mem) {
		t.Fatalf("emu %s: %d bytes back of %d (%v)", kernel, len(raw), len(img.mem), err)
	}
	return &moeImage{mem: raw}
}

func buildNormSetEmu(t *testing.T) string {
	t.Helper()
	cxx, err := exec.LookPath("clang++")
	if err != nil {
		t.Skipf("no clang++: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "normset")
	args := []string{"-std=c++17", "-O1", "-g", "-pthread", "-Wall", "-o", bin, "testdata/emu/normset.cpp"}
	if out, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
		t.Fatalf("clang++ %v: %v\n%s", args, err, out)
	}
	return bin
}

// setPtrs are QGemvSet's pointer fields (w, s, b, y of each product, x);
// QGemvSetNorm adds r, nw, y, done.
var setPtrs = func() []int {
	var p []int
	for i := range 17 {
		p = append(p, 8*i)
	}
	return p
}()

// emuSet puts a random matrix of each of rows × cols into img, with a
// zeroed output each, and returns the set of their products, the matrices
// and the outputs' addresses.
func emuSet(t *testing.T, r *rand.Rand, img *moeImage, rows []int, cols, bits, group int, st mlxq.Float) (gemvSet, []mlxq.Matrix, []uint64) {
	t.Helper()
	var set gemvSet
	var mats []mlxq.Matrix
	var outs []uint64
	for _, n := range rows {
		m := makeMatrix(t, r, matCase{n, cols, bits, group, st})
		mats = append(mats, m)
		o := img.put(make([]byte, 4*n))
		outs = append(outs, o)
		set.add(&devMat{w: img.put(m.Weight), s: img.put(m.Scales), b: img.put(m.Biases)}, o, m)
	}
	return set, mats, outs
}

// sameFused checks a fused launch's image one against that of the
// launches it replaces, two: the group counter at done back to zero and
// every product's outputs the same bits.
func sameFused(t *testing.T, name string, one, two *moeImage, done uint64, outs []uint64, rows []int) {
	t.Helper()
	if d := binary.LittleEndian.Uint32(one.mem[done:]); d != 0 {
		t.Errorf("%s: the group counter is %d after the launch, want 0", name, d)
	}
	for i, o := range outs {
		sameBits(t, fmt.Sprintf("%s: product %d", name, i), one.floats(o, rows[i]), two.floats(o, rows[i]))
	}
}

func TestNormSetEmulated(t *testing.T) {
	bin := buildNormSetEmu(t)
	r := rand.New(rand.NewPCG(71, 72))
	b := &Backend{}
	for _, c := range []struct {
		bits, group int
		st          mlxq.Float
		cols        int
		rows        []int
		kind        nn.NormKind
		split       int
		rk          int  // the choice of rk of product 0's rows (a router's logits)
		rnorm       bool // its weights renormalised
	}{
		{4, 32, mlxq.BF16, 2048, []int{40, 9, 1}, nn.NormWeight, 1, 0, false},
		{4, 64, mlxq.F16, 4160, []int{16, 16, 16, 16}, nn.NormUnit, 2, 0, false}, // two batches of norm loads and a partial third
		{8, 64, mlxq.F32, 320, []int{33, 1}, nn.NormOffset, 4, 0, false},
		{8, 32, mlxq.BF16, 96, []int{5}, nn.NormWeight, 1, 0, false},       // a set of one (a lone MatMul after the norm)
		{8, 64, mlxq.BF16, 2048, []int{64, 1}, nn.NormOffset, 1, 8, true},  // a router and a shared expert's gate
		{4, 32, mlxq.F32, 512, []int{300, 2}, nn.NormWeight, 2, 10, false}, // more experts than threads a group
	} {
		name := fmt.Sprintf("%d-bit g%d %v cols %d rows %v kind %d split %d choice %d", c.bits, c.group, c.st, c.cols, c.rows, c.kind, c.split, c.rk)
		b.splitOverride = c.split
		img := &moeImage{}
		x, res, w := randVec(r, c.cols, 2), randVec(r, c.cols, 2), randVec(r, c.cols, 1)
		xo, ro, wo := img.put(f32b(x)), img.put(f32b(res)), img.put(f32b(w))
		yo := img.put(make([]byte, 4*c.cols))
		done := img.put(make([]byte, 4))
		selo, wtso := img.put(make([]byte, 4*max(c.rk, 1))), img.put(make([]byte, 4*max(c.rk, 1)))
		k := setKey{fmt.Sprintf("gemv_q%d_set", c.bits), c.cols, c.group, int(c.st)}
		set, mats, outs := emuSet(t, r, img, c.rows, c.cols, c.bits, c.group, c.st)
		// Every output must be written: NaN until then.
		poison := func(m *moeImage) {
			for i, o := range outs {
				for j := range c.rows[i] {
					binary.LittleEndian.PutUint32(m.mem[o+uint64(4*j):], math.Float32bits(float32(math.NaN())))
				}
			}
			for j := range c.cols {
				binary.LittleEndian.PutUint32(m.mem[yo+uint64(4*j):], math.Float32bits(float32(math.NaN())))
			}
		}
		poison(img)
		wp := wo
		if c.kind == nn.NormUnit {
			wp = ^uint64(0)
		}
		spec := nn.NormSpec{Rows: 1, Width: c.cols, Eps: 1e-5, Kind: c.kind}

		// The two launches the fused one replaces.
		norm := params(nil).ptr(xo).ptr(ro).ptr(wp).ptr(yo).u32(1).u32(c.cols).u32(c.cols).f32(spec.Eps).u32(int(c.kind)).u32(0)
		two := normSetImage(t, bin, "add_rms_norm_rows", 1, norm, []int{0, 8, 16, 24}, img)
		blk, blocks, err := b.gemvSetBlock(nil, k, set, yo, 1)
		if err != nil {
			t.Fatal(err)
		}
		two = normSetImage(t, bin, k.kernel, blocks, blk, setPtrs, two)
		if c.rk > 0 {
			rn := 0
			if c.rnorm {
				rn = 1
			}
			route := params(nil).ptr(outs[0]).ptr(selo).ptr(wtso).u32(1).u32(c.rows[0]).u32(c.rk).u32(rn)
			two = normSetImage(t, bin, "route_topk", 1, route, []int{0, 8, 16}, two)
		}

		// The fused launch, its block as gemvSetNorm lays it out.
		blk, blocks, err = b.gemvSetBlock(nil, k, set, xo, 1)
		if err != nil {
			t.Fatal(err)
		}
		rn := 0
		if c.rnorm {
			rn = 1
		}
		blk = blk.ptr(ro).ptr(wp).ptr(yo).ptr(done).f32(spec.Eps).u32(int(c.kind)).ptr(selo).ptr(wtso).u32(c.rk).u32(rn).u32(0).u32(0)
		if len(blk) != sizeQGemvSetNorm {
			t.Fatalf("%s: fused block of %d bytes", name, len(blk))
		}
		one := normSetImage(t, bin, k.kernel+"_norm", blocks, blk, append(setPtrs, 192, 200, 208, 216, 232, 240), img)

		if blocks < 2 && len(c.rows) > 1 {
			t.Fatalf("%s: %d groups: the case does not test the last group's stores", name, blocks)
		}
		sameFused(t, name, one, two, done, outs, c.rows)
		sameBits(t, name+": x", one.floats(xo, c.cols), two.floats(xo, c.cols))
		sameBits(t, name+": norm", one.floats(yo, c.cols), two.floats(yo, c.cols))
		if c.rk > 0 {
			// The choice: route_topk's bits, and nn.RouteSoftmaxTopK's
			// experts on the same logits.
			if !bytes.Equal(one.mem[selo:selo+uint64(4*c.rk)], two.mem[selo:selo+uint64(4*c.rk)]) {
				t.Errorf("%s: sel %v, route_topk %v", name, one.mem[selo:selo+uint64(4*c.rk)], two.mem[selo:selo+uint64(4*c.rk)])
			}
			sameBits(t, name+": wts", one.floats(wtso, c.rk), two.floats(wtso, c.rk))
			r := nn.NewRouting(1, c.rk)
			nn.RouteSoftmaxTopK(r, append([]float32(nil), one.floats(outs[0], c.rows[0])...), 1, c.rows[0], c.rnorm)
			for j, e := range r.Sel {
				if got := int32(binary.LittleEndian.Uint32(one.mem[selo+uint64(4*j):])); got != int32(e) {
					t.Errorf("%s: slot %d chose %d, nn.RouteSoftmaxTopK %d", name, j, got, e)
				}
				if d := math.Abs(float64(one.floats(wtso, c.rk)[j] - r.Wts[j])); d > 1e-6 {
					t.Errorf("%s: slot %d weight %g, nn.RouteSoftmaxTopK %g", name, j, one.floats(wtso, c.rk)[j], r.Wts[j])
				}
			}
		}

		// Against the CPU backend.
		h := make([]float32, c.cols)
		for i := range h {
			h[i] = x[i] + res[i]
		}
		sameBits(t, name+": x against x+r", one.floats(xo, c.cols), h)
		want := make([]float32, c.cols)
		nw := w
		if c.kind == nn.NormUnit {
			nw = nil
		}
		nn.HostDevice{}.RMSNorm(nn.HostTensor(want), nn.HostTensor(h), nn.HostTensor(nw), spec)
		got := one.floats(yo, c.cols)
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); !(d <= 1e-5*math.Abs(float64(want[i]))+1e-6) {
				t.Fatalf("%s: norm[%d] = %g, cpu %g", name, i, got[i], want[i])
			}
		}
		for i, m := range mats {
			checkMatMulWithin(t, fmt.Sprintf("%s: product %d", name, i), m, want, one.floats(outs[i], c.rows[i]), 1, matTol)
		}
	}
}

// The DeltaNet's gated norm fused into its output projection
// (gemv_*_set_gnorm) against deltanet_out then gemv_*_set, on the
// emulator: y (rewritten in place) and the products the same bits.
func TestGatedNormSetEmulated(t *testing.T) {
	bin := buildNormSetEmu(t)
	r := rand.New(rand.NewPCG(73, 74))
	b := &Backend{}
	for _, c := range []struct {
		bits, group int
		st          mlxq.Float
		nv, dv      int
		rows        []int
		split       int
	}{
		{4, 32, mlxq.BF16, 8, 128, []int{48}, 2},
		{8, 64, mlxq.F16, 4, 64, []int{20, 7}, 1},
		{8, 32, mlxq.F32, 5, 96, []int{33}, 4}, // a head of three simdgroups' columns
	} {
		W := c.nv * c.dv
		name := fmt.Sprintf("%d-bit g%d %v heads %d x %d rows %v split %d", c.bits, c.group, c.st, c.nv, c.dv, c.rows, c.split)
		b.splitOverride = c.split
		img := &moeImage{}
		o, z, nw := randVec(r, W, 3), randVec(r, W, 2), randVec(r, c.dv, 1)
		yo, zo, wo := img.put(f32b(o)), img.put(f32b(z)), img.put(f32b(nw))
		done := img.put(make([]byte, 4))
		k := setKey{fmt.Sprintf("gemv_q%d_set", c.bits), W, c.group, int(c.st)}
		set, _, outs := emuSet(t, r, img, c.rows, W, c.bits, c.group, c.st)
		const eps = 1e-6
		// deltanet_out (its DNRec block: y, z and norm, the heads; the
		// state and the other inputs unused), then the set.
		none := ^uint64(0)
		out := params(nil).ptr(none).ptr(yo).ptr(none).ptr(zo).ptr(none).ptr(none).ptr(none).ptr(none).ptr(wo).
			u32(1).u32(0).u32(1).u32(c.nv).u32(c.dv).u32(c.dv).f32(eps).u32(0)
		if len(out) != sizeDNRec {
			t.Fatalf("DNRec block of %d bytes", len(out))
		}
		two := normSetImage(t, bin, "deltanet_out", c.nv, out, []int{0, 8, 16, 24, 32, 40, 48, 56, 64}, img)
		blk, blocks, err := b.gemvSetBlock(nil, k, set, yo, 1)
		if err != nil {
			t.Fatal(err)
		}
		two = normSetImage(t, bin, k.kernel, blocks, blk, setPtrs, two)

		blk, blocks, err = b.gemvSetBlock(nil, k, set, yo, 1)
		if err != nil {
			t.Fatal(err)
		}
		blk = blk.ptr(zo).ptr(wo).ptr(yo).ptr(done).f32(eps).u32(normGated).ptr(none).ptr(none).u32(0).u32(0).u32(c.dv).u32(0)
		one := normSetImage(t, bin, k.kernel+"_gnorm", blocks, blk, append(setPtrs, 192, 200, 208, 216, 232, 240), img)
		sameFused(t, name, one, two, done, outs, c.rows)
		sameBits(t, name+": y", one.floats(yo, W), two.floats(yo, W))
		// The norm against float64: rmsnorm(o)·w·silu(z) per head.
		got := one.floats(yo, W)
		for h := range c.nv {
			var ss float64
			for j := range c.dv {
				ss += float64(o[h*c.dv+j]) * float64(o[h*c.dv+j])
			}
			inv := 1 / math.Sqrt(ss/float64(c.dv)+eps)
			for j := range c.dv {
				i := h*c.dv + j
				zv := float64(z[i])
				want := float64(o[i]) * inv * float64(nw[j]) * zv / (1 + math.Exp(-zv))
				if d := math.Abs(float64(got[i]) - want); !(d <= 1e-5*math.Abs(want)+1e-6) {
					t.Fatalf("%s: y[%d] = %g, want %g", name, i, got[i], want)
				}
			}
		}
	}
}

// An attention's output gate fused into its output projection
// (gemv_*_set_sigmul) against sigmoid_mul then gemv_*_set, on the
// emulator: o (gated in place) and the products the same bits.
func TestSigmulSetEmulated(t *testing.T) {
	bin := buildNormSetEmu(t)
	r := rand.New(rand.NewPCG(79, 83))
	b := &Backend{}
	for _, c := range []struct {
		bits, group int
		st          mlxq.Float
		heads, hd   int
		gs          int // the gate's row stride (Qwen's: 2·hd, the gate beside each head's q)
		rows        []int
		split       int
	}{
		{4, 64, mlxq.BF16, 8, 256, 512, []int{40}, 4},
		{8, 32, mlxq.F16, 3, 96, 100, []int{17, 5}, 1},
	} {
		W := c.heads * c.hd
		name := fmt.Sprintf("%d-bit g%d %v %d heads of %d, gate stride %d, rows %v", c.bits, c.group, c.st, c.heads, c.hd, c.gs, c.rows)
		b.splitOverride = c.split
		img := &moeImage{}
		o, g := randVec(r, W, 2), randVec(r, (c.heads-1)*c.gs+c.hd, 3)
		oo, go_ := img.put(f32b(o)), img.put(f32b(g))
		done := img.put(make([]byte, 4))
		k := setKey{fmt.Sprintf("gemv_q%d_set", c.bits), W, c.group, int(c.st)}
		set, _, outs := emuSet(t, r, img, c.rows, W, c.bits, c.group, c.st)
		sm := params(nil).ptr(oo).ptr(go_).u32(c.heads).u32(c.hd).u32(c.hd).u32(c.gs)
		two := normSetImage(t, bin, "sigmoid_mul", ceilDiv(W, tgThreads), sm, []int{0, 8}, img)
		blk, blocks, err := b.gemvSetBlock(nil, k, set, oo, 1)
		if err != nil {
			t.Fatal(err)
		}
		two = normSetImage(t, bin, k.kernel, blocks, blk, setPtrs, two)
		none := ^uint64(0)
		blk, blocks, err = b.gemvSetBlock(nil, k, set, oo, 1)
		if err != nil {
			t.Fatal(err)
		}
		blk = blk.ptr(go_).ptr(none).ptr(oo).ptr(done).f32(0).u32(normSigMul).ptr(none).ptr(none).u32(0).u32(0).u32(c.hd).u32(c.gs)
		one := normSetImage(t, bin, k.kernel+"_sigmul", blocks, blk, append(setPtrs, 192, 200, 208, 216, 232, 240), img)
		sameFused(t, name, one, two, done, outs, c.rows)
		sameBits(t, name+": o", one.floats(oo, W), two.floats(oo, W))
		got := one.floats(oo, W)
		for h := range c.heads {
			for j := range c.hd {
				gv := float64(g[h*c.gs+j])
				want := float64(o[h*c.hd+j]) / (1 + math.Exp(-gv))
				if d := math.Abs(float64(got[h*c.hd+j]) - want); !(d <= 1e-6*math.Abs(want)+1e-7) {
					t.Fatalf("%s: o[%d] = %g, want %g", name, h*c.hd+j, got[h*c.hd+j], want)
				}
			}
		}
	}
}
