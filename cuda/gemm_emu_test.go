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

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// buildEmu compiles the host emulator of the batched-product kernels
// (testdata/emu: kernels/10_common.cu and kernels/25_gemm.cu themselves,
// over a CPU prelude; flags adds e.g. a sanitizer), skipping without
// clang++.
func buildEmu(t *testing.T, flags ...string) string {
	t.Helper()
	cxx, err := exec.LookPath("clang++")
	if err != nil {
		t.Skipf("no clang++: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "emu")
	args := append([]string{"-std=c++17", "-O1", "-g", "-pthread", "-Wall", "-o", bin, "testdata/emu/main.cpp"}, flags...)
	if out, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
		if len(flags) > 0 { // a sanitizer runtime may be missing: not this code's failure
			t.Skipf("clang++ %v: %v\n%s", flags, err, out)
		}
		t.Fatalf("clang++ %v: %v\n%s", args, err, out)
	}
	return bin
}

// runEmu runs one kernel on the emulator: W as m, X as given bytes
// (float32, or bf16 for gemm_base), n vectors.
func runEmu(t *testing.T, bin, kernel string, m mlxq.Matrix, xb []byte, n int) []float32 {
	t.Helper()
	var in bytes.Buffer
	for _, v := range []uint32{uint32(n), uint32(m.Rows), uint32(m.Cols), uint32(m.GroupSize), uint32(m.Type), uint32(m.Bits)} {
		binary.Write(&in, binary.LittleEndian, v)
	}
	for _, p := range [][]byte{m.Weight, m.Scales, m.Biases, xb} {
		binary.Write(&in, binary.LittleEndian, uint64(len(p)))
	}
	for _, p := range [][]byte{m.Weight, m.Scales, m.Biases, xb} {
		in.Write(p)
	}
	dir := t.TempDir()
	inf, outf := filepath.Join(dir, "in"), filepath.Join(dir, "out")
	if err := os.WriteFile(inf, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	bm, bn := gemmBM, gemmBN
	if kernel == "gemm_fma" {
		bm, bn = gemmFMABM, gemmFMABN
	}
	if out, err := exec.Command(bin, kernel, fmt.Sprint(bm), fmt.Sprint(bn), inf, outf).CombinedOutput(); err != nil {
		if bytes.Contains(out, []byte("ThreadSanitizer: unexpected memory mapping")) {
			t.Skipf("ThreadSanitizer cannot run on this kernel's address layout: %s", out)
		}
		t.Fatalf("emu %s: %v\n%s", kernel, err, out)
	}
	raw, err := os.ReadFile(outf)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 4*n*m.Rows {
		t.Fatalf("emu %s: %d bytes of output, want %d", kernel, len(raw), 4*n*m.Rows)
	}
	y := make([]float32, n*m.Rows)
	for i := range y {
		y[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return y
}

type emuCase struct {
	kernel string
	c      matCase
	n      int
}

func emuCases() []emuCase {
	return []emuCase{
		{"gemm_q4", matCase{129, 96, 4, 32, mlxq.BF16}, 130},
		{"gemm_q4", matCase{64, 256, 4, 128, mlxq.F32}, 5},
		{"gemm_q8", matCase{140, 128, 8, 64, mlxq.F16}, 20},
		{"gemm_q8", matCase{3, 384, 8, 128, mlxq.BF16}, 129},
		{"gemm_group_q4", matCase{129, 96, 4, 32, mlxq.BF16}, 300},
		{"gemm_group_q8", matCase{140, 128, 8, 64, mlxq.F16}, 261},
		{"gemm_bf16", matCase{130, 64, 0, 0, mlxq.BF16}, 129},
		{"gemm_f16", matCase{9, 32, 0, 0, mlxq.F16}, 17},
		{"gemm_f32", matCase{200, 96, 0, 0, mlxq.F32}, 33},
		{"gemm_q4_h", matCase{129, 96, 4, 32, mlxq.BF16}, 130},
		{"gemm_q4_h", matCase{64, 256, 4, 128, mlxq.F32}, 5},
		{"gemm_q8_h", matCase{140, 128, 8, 64, mlxq.F16}, 20},
		{"gemm_bf16_h", matCase{130, 64, 0, 0, mlxq.BF16}, 129},
		{"gemm_base", matCase{70, 160, 0, 0, mlxq.BF16}, 131},
		{"gemm_fma", matCase{70, 384, 3, 64, mlxq.BF16}, 65},
		{"gemm_fma", matCase{65, 256, 6, 32, mlxq.F16}, 3},
		{"gemm_fma", matCase{20, 256, 2, 128, mlxq.F32}, 70},
		{"gemm_fma", matCase{9, 160, 5, 32, mlxq.BF16}, 9},
		{"gemm_fma", matCase{66, 256, 4, 64, mlxq.BF16}, 64},
		{"gemm_fma", matCase{41, 300, 0, 0, mlxq.F16}, 66},
		{"gemm_fma", matCase{130, 77, 0, 0, mlxq.F32}, 2},
	}
}

// emuTol is the bound a kernel is held to (see gemmTol).
func emuTol(kernel string) float64 {
	switch {
	case kernel == "gemm_fma" || kernel == "gemm_base":
		return matTol // float32 throughout, or inputs exact in bf16
	case strings.HasSuffix(kernel, "_h"):
		return gemmTolHalf
	}
	return gemmTol
}

// TestGemmEmulated runs every batched-product kernel's source on the CPU
// emulator (the only execution these kernels get without a GPU) against
// the CPU backend, on shapes with tails in every dimension.
func TestGemmEmulated(t *testing.T) {
	bin := buildEmu(t)
	r := rand.New(rand.NewPCG(41, 42))
	seen := map[string]bool{}
	for _, c := range emuCases() {
		seen[c.kernel] = true
		m := makeMatrix(t, r, c.c)
		x := randVec(r, c.n*c.c.cols, 1)
		xb := f32bytes(x)
		if c.kernel == "gemm_base" {
			xb = make([]byte, 2*len(x))
			mlxq.EncodeFloats(xb, x, mlxq.BF16)
			mlxq.DecodeFloats(x, xb, mlxq.BF16)
		}
		got := runEmu(t, bin, c.kernel, m, xb, c.n)
		worst := checkMatMulWithin(t, fmt.Sprintf("%s %v n=%d", c.kernel, c.c, c.n), m, x, got, c.n, emuTol(c.kernel))
		if plain, ok := strings.CutPrefix(c.kernel, "gemm_group_"); ok {
			// The grouped tiles give each output the plain kernel's bits.
			want := runEmu(t, bin, "gemm_"+plain, m, xb, c.n)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %v: output %d is %g, gemm_%s gives %g", c.kernel, c.c, i, got[i], plain, want[i])
				}
			}
		}
		t.Logf("%s %v n=%d: largest |emu - cpu| / sum|w x| = %.3g", c.kernel, c.c, c.n, worst)
	}
	for _, k := range kernelNames {
		if strings.HasPrefix(k, "gemm_") && !seen[k] {
			t.Errorf("kernel %s is not emulated", k)
		}
	}
}

// TestGemmEmulatedRaces runs a few of the cases on the emulator built with
// ThreadSanitizer: a shared-memory access not ordered by the kernel's
// barriers is reported (the emulator's threads are the group's threads).
func TestGemmEmulatedRaces(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	bin := buildEmu(t, "-fsanitize=thread")
	r := rand.New(rand.NewPCG(43, 44))
	for _, c := range []emuCase{
		{"gemm_q4", matCase{129, 96, 4, 32, mlxq.BF16}, 130},
		{"gemm_f32", matCase{20, 64, 0, 0, mlxq.F32}, 9},
		{"gemm_q8_h", matCase{140, 64, 8, 64, mlxq.F16}, 20},
		{"gemm_fma", matCase{65, 80, 0, 0, mlxq.BF16}, 65},
	} {
		m := makeMatrix(t, r, c.c)
		x := randVec(r, c.n*c.c.cols, 1)
		got := runEmu(t, bin, c.kernel, m, f32bytes(x), c.n)
		checkMatMulWithin(t, fmt.Sprintf("tsan %s %v", c.kernel, c.c), m, x, got, c.n, emuTol(c.kernel))
	}
}
