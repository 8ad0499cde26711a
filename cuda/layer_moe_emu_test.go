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
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
)

// The routed-expert kernels (kernels/22_moe.cu) on the CPU emulator
// (testdata/emu/moe.cpp: the kernels' own source, 256 threads a group,
// the simdgroup sums warp-collective), against the CPU backend's products:
// the table lookups, the slots' and tokens' rows, the fused GLU and the
// combine's order, every kernel variant, and a token without an expert.

// moeImage is the emulator's memory: buffers at 256-byte aligned offsets.
type moeImage struct{ mem []byte }

func (m *moeImage) put(b []byte) uint64 {
	off := (len(m.mem) + 255) &^ 255
	m.mem = append(m.mem, make([]byte, off-len(m.mem))...)
	m.mem = append(m.mem, b...)
	return uint64(off)
}

func (m *moeImage) floats(off uint64, n int) []float32 { return f32s(m.mem[off : off+uint64(4*n)]) }

// runMoEEmu runs kernel over (gx, gy) groups with p (pointers as offsets
// into img, ^0 for none; next 0 is none too) and returns the memory after
// the run.
func runMoEEmu(t *testing.T, bin, kernel string, gy int, split splitFunc, p moeParams, img *moeImage) *moeImage {
	t.Helper()
	gx, sp := moeGrid(kernel, p.m, gy, split)
	if p.next == 0 {
		p.next = ^uint64(0) // offset 0 is the image's first bytes
	}
	q := p.block(nil, sp)
	var in bytes.Buffer
	in.Write(q)
	binary.Write(&in, binary.LittleEndian, uint64(len(img.mem)))
	in.Write(img.mem)
	dir := t.TempDir()
	inf, outf := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	if err := os.WriteFile(inf, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, kernel, fmt.Sprint(gx), fmt.Sprint(gy), inf, outf).CombinedOutput(); err != nil {
		t.Fatalf("emu %s: %v\n%s", kernel, err, out)
	}
	raw, err := os.ReadFile(outf)
	if err != nil || len(raw) != len(img.mem) {
		t.Fatalf("emu %s: %d bytes back of %d (%v)", kernel, len(raw), len(img.mem), err)
	}
	return &moeImage{mem: raw}
}

// splitFunc picks gateup's split (moeSplitFor, or a test's forced one).
type splitFunc = func(rows, cols, bits, n int) int

func buildMoEEmu(t *testing.T, defines ...string) string {
	t.Helper()
	cxx, err := exec.LookPath("clang++")
	if err != nil {
		t.Skipf("no clang++: %v", err)
	}
	src, err := os.ReadFile("testdata/emu/moe.cpp")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(src, []byte(fmt.Sprintf("#define QK_ACT_GELU_TANH %du", actGELUTanh))) {
		t.Fatalf("testdata/emu/moe.cpp's QK_ACT_GELU_TANH is not %d", actGELUTanh)
	}
	bin := filepath.Join(t.TempDir(), "moe")
	args := append([]string{"-std=c++17", "-O1", "-g", "-pthread", "-Wall", "-o", bin, "testdata/emu/moe.cpp"}, defines...)
	if out, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
		t.Fatalf("clang++ %v: %v\n%s", args, err, out)
	}
	return bin
}

// absMag is Σ_j |W_ij x_j| per row i (a product's error scale).
func absMag(m mlxq.Matrix, x []float32) []float64 {
	w := weights(m)
	mag := make([]float64, m.Rows)
	for r := range m.Rows {
		for j := range m.Cols {
			mag[r] += math.Abs(float64(w[r*m.Cols+j]) * float64(x[j]))
		}
	}
	return mag
}

// Each case runs on two builds: x staged in threadgroup memory (the
// default, QP_GEMV_STAGE) and read in place (what vectors longer than
// QP_XS_COLS get). A case's split forces gateup's (its sums over 2, 4 or 8
// simdgroups of a row quad: gemvSplit picks more than 1 only for rows of
// 64 chunks or more); down products of at most 16 chunks a row run on half
// simdgroups (moeDownHalf), the 20-chunk case on whole ones. A run whose
// kernel prefetches a line outside the emulator's memory, or not at a
// line's start, fails (moe.cpp).
func TestMoEKernelsEmulated(t *testing.T) {
	bins := map[string]string{"staged": buildMoEEmu(t), "in place": buildMoEEmu(t, "-DQP_GEMV_STAGE=0")}
	for _, build := range []string{"staged", "in place"} {
		testMoEKernelsEmulated(t, build, bins[build])
	}
}

// testMoEKernelsEmulated runs the cases on one build; the in-place build
// only the small 4- and 8-bit ones' gateup (the others do not stage, down
// never does, and the emulator's threads make each group of 256 cost
// milliseconds).
func testMoEKernelsEmulated(t *testing.T, build, bin string) {
	r := rand.New(rand.NewPCG(61, 62))
	seen := map[string]bool{}
	halves := map[bool]bool{}
	for ci, c := range []struct {
		bits, group int
		st          mlxq.Float
		H, I        int
		gelu, scale bool
		split       int
	}{
		{4, 32, mlxq.BF16, 96, 64, false, false, 4},
		{4, 64, mlxq.F32, 128, 192, true, true, 2},
		{8, 64, mlxq.F16, 1024, 64, false, true, 2},   // both parts hold chunks (64 a row); gateup only
		{8, 32, mlxq.BF16, 128, 320, false, false, 0}, // down: 20 chunks a row, whole simdgroups
		{3, 64, mlxq.BF16, 128, 64, false, false, 0},
		{6, 32, mlxq.F16, 64, 96, true, false, 0},
		{0, 0, mlxq.BF16, 64, 40, false, false, 0},
		{0, 0, mlxq.F32, 40, 64, true, true, 0},
	} {
		if build != "staged" && (c.bits != 4 && c.bits != 8 || c.H > 256) {
			continue
		}
		split := moeSplitFor
		if c.split > 0 {
			split = func(int, int, int, int) int { return c.split }
		}
		const E, T, k, layer = 5, 3, 3, 7
		ks, err := moeKernels(mlxq.Matrix{Rows: c.I, Cols: c.H, Bits: c.bits, GroupSize: c.group, Type: c.st},
			mlxq.Matrix{Rows: c.I, Cols: c.H, Bits: c.bits, GroupSize: c.group, Type: c.st},
			mlxq.Matrix{Rows: c.H, Cols: c.I, Bits: c.bits, GroupSize: c.group, Type: c.st})
		if err != nil {
			t.Fatal(err)
		}
		seen[ks[0]], seen[ks[1]] = true, true
		name := fmt.Sprintf("%s: %s/%s %d-bit g%d %v H%d I%d split %d", build, ks[0], ks[1], c.bits, c.group, c.st, c.H, c.I, c.split)
		img := &moeImage{}
		var mats [E][3]mlxq.Matrix
		table := make([]byte, 8*9*E)
		for e := range E {
			for j, shape := range [][2]int{{c.I, c.H}, {c.I, c.H}, {c.H, c.I}} {
				m := makeMatrix(t, r, matCase{shape[0], shape[1], c.bits, c.group, c.st})
				mats[e][j] = m
				for i, part := range [][]byte{m.Weight, m.Scales, m.Biases} {
					binary.LittleEndian.PutUint64(table[8*(9*e+3*j+i):], img.put(part))
				}
			}
		}
		// Token 1's second slot chose no expert (a NaN in its logits).
		sel := []int32{4, 0, 2, 1, -1, 3, 2, 4, 0}
		wts := []float32{0.5, 0.3, 0.2, 0.6, 0.9, 0.4, 0.25, 0.7, 0.05}
		scale := []float32{1.5, 0.5, 2, 0.75, 1.25}
		x := randVec(r, T*c.H, 1)
		p := moeParams{table: img.put(table), sel: img.put(i32b(sel)), wts: img.put(f32b(wts)), scale: ^uint64(0),
			x: img.put(f32b(x)), gate: ^uint64(0), shared: ^uint64(0), k: k, E: E, layer: layer}
		if c.scale {
			p.scale = img.put(f32b(scale))
		}
		if c.gelu {
			p.act = actGELUTanh
		}
		h := img.put(make([]byte, 4*T*k*c.I))
		out := img.put(make([]byte, 4*T*c.H))
		p.fault = img.put(make([]byte, 4))
		// Poison the outputs: every element must be written.
		for i := range img.floats(h, T*k*c.I) {
			img.floats(h, T*k*c.I)[i] = float32(math.NaN())
		}
		for i := range img.floats(out, T*c.H) {
			img.floats(out, T*c.H)[i] = float32(math.NaN())
		}
		up := p
		up.y, up.m = h, mats[0][0]
		img = runMoEEmu(t, bin, ks[0], T*k, split, up, img)
		// Down's groups are its H rows': the emulator's 256 threads a group
		// make a large H slow, and the case is there for gateup's parts.
		// The in-place build differs from the staged one in gateup alone.
		upOnly := c.H > 256 || build != "staged"
		dn := p
		dn.x, dn.y, dn.m = h, out, mats[0][2]
		if !upOnly {
			img = runMoEEmu(t, bin, ks[1], T, split, dn, img)
			if c.bits == 4 || c.bits == 8 {
				halves[moeDownHalf(dn.m)] = true
			}
			// The same two launches with ranges to prefetch
			// (MoEParams.next, offsets the emulator does not check):
			// the loops over them end and change no bit.
			hb := append([]float32(nil), img.floats(h, T*k*c.I)...)
			ob := append([]float32(nil), img.floats(out, T*c.H)...)
			rng := make([]byte, pfTailBytes)
			for r := range 3 {
				binary.LittleEndian.PutUint64(rng[16*r+8:], uint64(len(img.mem)>>r))
			}
			up2, dn2 := up, dn
			up2.next = img.put(rng)
			dn2.next = up2.next
			img = runMoEEmu(t, bin, ks[0], T*k, split, up2, img)
			img = runMoEEmu(t, bin, ks[1], T, split, dn2, img)
			sameBits(t, name+": gate/up with ranges to prefetch", img.floats(h, T*k*c.I), hb)
			sameBits(t, name+": down with ranges to prefetch", img.floats(out, T*c.H), ob)
		}

		if f := binary.LittleEndian.Uint32(img.mem[p.fault:]); f != layer+1 {
			t.Errorf("%s: fault word %d, want %d (layer %d)", name, f, layer+1, layer)
		}
		hs := img.floats(h, T*k*c.I)
		for s, e := range sel {
			row := hs[s*c.I : (s+1)*c.I]
			if e < 0 {
				for i, v := range row {
					if v != 0 {
						t.Fatalf("%s: slot %d without an expert: h[%d] = %g, want 0", name, s, i, v)
					}
				}
				continue
			}
			xt := x[(s/k)*c.H : (s/k+1)*c.H]
			g, u := make([]float32, c.I), make([]float32, c.I)
			runtime.CPU{}.MatMul(mats[e][0], g, xt, 1)
			runtime.CPU{}.MatMul(mats[e][1], u, xt, 1)
			mg, mu := absMag(mats[e][0], xt), absMag(mats[e][1], xt)
			for i := range c.I {
				gv := float64(g[i])
				a := gv / (1 + math.Exp(-gv))
				if c.gelu {
					a = 0.5 * gv * (1 + math.Tanh(0.7978845608028654*(gv+0.044715*gv*gv*gv)))
				}
				want := a * float64(u[i])
				bound := matTol*(1.2*mg[i]*math.Abs(float64(u[i]))+math.Abs(a)*mu[i]) + 1e-6*math.Abs(want) + 1e-7
				if d := math.Abs(float64(row[i]) - want); !(d <= bound) {
					t.Fatalf("%s: slot %d (expert %d) h[%d] = %g, want %g (|d| %.3g > %.3g)", name, s, e, i, row[i], want, d, bound)
				}
			}
		}
		if upOnly {
			t.Logf("case %d %s: gateup within bounds", ci, name)
			continue
		}
		os := img.floats(out, T*c.H)
		for tok := range T {
			want, mag := make([]float64, c.H), make([]float64, c.H)
			for j := range k {
				s := tok*k + j
				e := sel[s]
				if e < 0 {
					continue
				}
				w := float64(wts[s])
				if c.scale {
					w *= float64(scale[e])
				}
				d := make([]float32, c.H)
				runtime.CPU{}.MatMul(mats[e][2], d, hs[s*c.I:(s+1)*c.I], 1)
				m := absMag(mats[e][2], hs[s*c.I:(s+1)*c.I])
				for i := range c.H {
					want[i] += w * float64(d[i])
					mag[i] += math.Abs(w) * (m[i] + math.Abs(float64(d[i])))
				}
			}
			for i := range c.H {
				if d := math.Abs(float64(os[tok*c.H+i]) - want[i]); !(d <= matTol*mag[i]+1e-7) {
					t.Fatalf("%s: out[%d][%d] = %g, want %g (|d| %.3g > %.3g)", name, tok, i, os[tok*c.H+i], want[i], d, matTol*mag[i])
				}
			}
		}
		// A sigmoid-gated shared expert after them (expert 0 as a table of
		// one, every token's slot 0): out += sigmoid(gl[t])·expert0(x[t]).
		routedOut := append([]float32(nil), os...)
		gl := randVec(r, T, 2)
		sh := p
		sh.E, sh.k, sh.sel, sh.wts, sh.scale = 1, 1, img.put(make([]byte, 4*T)), img.put(f32b([]float32{1, 1, 1})), ^uint64(0)
		h2 := img.put(make([]byte, 4*T*c.I))
		shUp := sh
		shUp.y, shUp.m = h2, mats[0][0]
		img = runMoEEmu(t, bin, ks[0], T, split, shUp, img)
		shDn := sh
		shDn.x, shDn.y, shDn.m, shDn.gate = h2, out, mats[0][2], img.put(f32b(gl))
		img = runMoEEmu(t, bin, ks[1], T, split, shDn, img)
		os = img.floats(out, T*c.H)
		h2s := img.floats(h2, T*c.I)
		for tok := range T {
			d := make([]float32, c.H)
			runtime.CPU{}.MatMul(mats[0][2], d, h2s[tok*c.I:(tok+1)*c.I], 1)
			m := absMag(mats[0][2], h2s[tok*c.I:(tok+1)*c.I])
			sg := 1 / (1 + math.Exp(-float64(gl[tok])))
			for i := range c.H {
				want := float64(routedOut[tok*c.H+i]) + sg*float64(d[i])
				bound := matTol*sg*(m[i]+math.Abs(float64(d[i]))) + 1e-6*math.Abs(want) + 1e-7
				if dd := math.Abs(float64(os[tok*c.H+i]) - want); !(dd <= bound) {
					t.Fatalf("%s: gated shared expert: out[%d][%d] = %g, want %g (|d| %.3g > %.3g)", name, tok, i, os[tok*c.H+i], want, dd, bound)
				}
			}
		}
		// The shared expert as every token's slot k of the same two
		// launches (MoEParams.shared): the bits of the four launches above.
		shTab := make([]byte, 8*9)
		copy(shTab, table[:8*9]) // expert 0's offsets
		mp := p
		mp.shared = img.put(shTab)
		h3 := img.put(make([]byte, 4*T*(k+1)*c.I))
		out3 := img.put(make([]byte, 4*T*c.H))
		for i := range img.floats(h3, T*(k+1)*c.I) {
			img.floats(h3, T*(k+1)*c.I)[i] = float32(math.NaN())
		}
		for i := range img.floats(out3, T*c.H) {
			img.floats(out3, T*c.H)[i] = float32(math.NaN())
		}
		mUp := mp
		mUp.y, mUp.m = h3, mats[0][0]
		img = runMoEEmu(t, bin, ks[0], T*(k+1), split, mUp, img)
		mDn := mp
		mDn.x, mDn.y, mDn.m, mDn.gate = h3, out3, mats[0][2], shDn.gate
		img = runMoEEmu(t, bin, ks[1], T, split, mDn, img)
		hs, h2s = img.floats(h, T*k*c.I), img.floats(h2, T*c.I)
		h3s := img.floats(h3, T*(k+1)*c.I)
		for tok := range T {
			for j := range k + 1 {
				var want []float32
				if j < k {
					want = hs[(tok*k+j)*c.I:][:c.I]
				} else {
					want = h2s[tok*c.I:][:c.I]
				}
				got := h3s[(tok*(k+1)+j)*c.I:][:c.I]
				for i := range c.I {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: shared slot: token %d slot %d h[%d] = %g, separate launches %g", name, tok, j, i, got[i], want[i])
					}
				}
			}
		}
		o3 := img.floats(out3, T*c.H)
		for i, v := range img.floats(out, T*c.H) {
			if math.Float32bits(o3[i]) != math.Float32bits(v) {
				t.Fatalf("%s: shared slot: out[%d] = %g, separate launches %g", name, i, o3[i], v)
			}
		}
		t.Logf("case %d %s: within bounds; the shared slot's bits are the separate launches'", ci, name)
	}
	for _, k := range kernelNames {
		if build == "staged" && strings.HasPrefix(k, "moe_") && !seen[k] {
			t.Errorf("kernel %s is not emulated", k)
		}
	}
	if build == "staged" && (!halves[true] || !halves[false]) {
		t.Errorf("down on half simdgroups %v, on whole ones %v: want both run", halves[true], halves[false])
	}
}
