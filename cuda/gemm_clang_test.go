package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGemmSourceClang compiles the whole kernel source (Source(), as
// NVRTC gets it) with clang's CUDA front end for sm_80 and sm_90 to PTX,
// with testdata/clang_cuda_shim.h declaring what NVRTC provides built in:
// a check of the source without a CUDA toolkit (skipped without clang++).
// On the PTX it checks that the tensor-core kernels keep their fragments
// and accumulators in registers (no .local arrays: an index the compiler
// cannot resolve would put them in local memory) and issue the expected
// number of mma instructions per step.
func TestGemmSourceClang(t *testing.T) {
	cxx, err := exec.LookPath("clang++")
	if err != nil {
		t.Skipf("no clang++: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "qpack_kernels.cu")
	if err := os.WriteFile(src, []byte(Source()), 0o644); err != nil {
		t.Fatal(err)
	}
	shim, err := filepath.Abs("testdata/clang_cuda_shim.h")
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"sm_80", "sm_90"} {
		ptx := filepath.Join(dir, arch+".ptx")
		args := []string{"-x", "cuda", "--cuda-gpu-arch=" + arch, "--cuda-device-only", "-nocudainc", "-nocudalib",
			"-std=c++17", "-O2", "-Wall", "-include", shim, "-S", "-o", ptx, src}
		out, err := exec.Command(cxx, args...).CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "unsupported CUDA gpu architecture") || strings.Contains(string(out), "Unknown target CPU") {
				t.Logf("%s: this clang does not know it: %s", arch, out)
				continue
			}
			t.Fatalf("clang++ %s: %v\n%s", arch, err, out)
		}
		if len(out) > 0 {
			t.Logf("clang++ %s warnings:\n%s", arch, out)
		}
		text, err := os.ReadFile(ptx)
		if err != nil {
			t.Fatal(err)
		}
		entries := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`).FindAllStringSubmatchIndex(string(text), -1)
		found := map[string]bool{}
		for i, e := range entries {
			name := string(text[e[2]:e[3]])
			end := len(text)
			if i+1 < len(entries) {
				end = entries[i+1][0]
			}
			body := string(text[e[0]:end])
			found[name] = true
			if !strings.HasPrefix(name, "gemm_") || name == "gemm_fma" {
				continue
			}
			if strings.Contains(body, ".local") {
				t.Errorf("%s %s: uses local memory", arch, name)
			}
			want := "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
			if strings.HasSuffix(name, "_h") || name == "gemm_base" {
				want = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
			}
			// 2 k-steps x 4 x 4 tiles per step, unrolled once.
			if got := strings.Count(body, want); got != 32 {
				t.Errorf("%s %s: %d x %s, want 32", arch, name, got, want)
			}
		}
		for _, k := range kernelNames {
			if !found[k] {
				t.Errorf("%s: kernel %s not in the PTX", arch, k)
			}
		}
		t.Logf("%s: %d kernels compiled, %d bytes of PTX", arch, len(entries), len(text))
	}
}
