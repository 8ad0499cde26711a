package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Go side writes each parameter struct field by field; the sizes it
// checks against must be the ones the kernel source asserts.
func TestParamStructSizes(t *testing.T) {
	src := Source()
	for name, size := range map[string]int{"QGemv": sizeQGemv, "QGemvSet": sizeQGemvSet, "AddNormRows": sizeAddNormRows, "RowNorm": sizeRowNorm, "Elem": sizeElem,
		"NormRows": sizeNormRows, "RoPEParams": sizeRoPE, "AttnParams": sizeAttn, "AttnMerge": sizeAttnMerge, "DNConv": sizeDNConv,
		"DNNorm": sizeDNNorm, "DNRec": sizeDNRec, "Unary": sizeUnary, "Binary": sizeBinary,
		"SigmoidMulParams": sizeSigmoidMul, "AddGatedParams": sizeAddGated, "CombineParams": sizeCombine,
		"GatherParams": sizeGather, "RowsParams": sizeRows, "RouteParams": sizeRoute, "MoEParams": sizeMoE,
		"SelectChunkParams": sizeSelChunk, "SelectMergeParams": sizeSelMerge, "SelectListParams": sizeSelList, "SelectTopParams": sizeSelTop,
		"QGemm": sizeQGemm, "QGemmGroup": sizeQGemmGroup, "QGemmTile": sizeQGemmTile} {
		re := regexp.MustCompile(`static_assert\(sizeof\(` + name + `\) == (\d+)|QP_STATIC_ASSERT\(sizeof\(` + name + `\) == (\d+)`)
		m := re.FindStringSubmatch(src)
		if m == nil {
			t.Errorf("no size assertion for %s in the kernel source", name)
			continue
		}
		if got := m[1] + m[2]; got != fmt.Sprint(size) {
			t.Errorf("%s: kernel source asserts %s bytes, Go writes %d", name, got, size)
		}
	}
	if !strings.Contains(src, fmt.Sprintf("#define QP_QROWS %d\n", qRows)) || !strings.Contains(src, fmt.Sprintf("#define QP_TG %d\n", tgThreads)) {
		t.Errorf("QP_QROWS or QP_TG in the kernel source differ from qRows=%d, tgThreads=%d", qRows, tgThreads)
	}
	// route_topk keeps round r's choice in lane r % 32 (two rounds a
	// lane): the host's limit on k must not pass 64, and must be the
	// kernel's.
	if !strings.Contains(src, fmt.Sprintf("#define QK_ROUTE_MAXK %d\n", routeMaxK)) ||
		!strings.Contains(src, fmt.Sprintf("#define QK_ROUTE_MAXE %d\n", routeMaxE)) || routeMaxK > 2*simdWidth {
		t.Errorf("QK_ROUTE_MAXK or QK_ROUTE_MAXE in the kernel source differ from routeMaxK=%d, routeMaxE=%d, or k passes two rounds a lane", routeMaxK, routeMaxE)
	}
	if !strings.Contains(src, fmt.Sprintf("#define QP_XS_COLS %d\n", stagedCols)) {
		t.Errorf("QP_XS_COLS in the kernel source differs from stagedCols=%d (matCases' in-place rows)", stagedCols)
	}
	// The staged x is read as float4s: declared as plain floats it can
	// lie at 4 bytes past a 16-byte line (memcheck on the H100, 2026-12-05).
	if m := regexp.MustCompile(`QP_SHARED\s+float\s+xs\s*\[`).FindString(src); m != "" {
		t.Errorf("kernel source declares a staged x as %q: use QP_XS_DECL (16-byte aligned)", m)
	}
	bounded := regexp.MustCompile(`QP_KERNEL_BOUNDS\([A-Z_0-9]+\) (\w+)\(`)
	withBounds := map[string]bool{}
	for _, m := range bounded.FindAllStringSubmatch(src, -1) {
		withBounds[m[1]] = true
	}
	for _, k := range kernelNames {
		if !strings.Contains(src, "QP_KERNEL "+k+"(") && !strings.Contains(src, "QP_ENTRY("+k+",") && !withBounds[k] {
			t.Errorf("kernel %s is not defined in the source", k)
		}
	}
	// The bodies use the prelude's names only: no CUDA built-in outside
	// the prelude, so a Metal prelude can take them later.
	// A file whose first line is "// CUDA only" (tensor-core kernels, no
	// Metal twin) may also use inline PTX.
	body := src[strings.Index(src, "// ---- gpukernels/"):]
	for _, file := range strings.Split(body, "// ---- ")[1:] {
		name, text, _ := strings.Cut(file, "\n")
		for _, cudaOnly := range []string{"threadIdx", "blockIdx", "blockDim", "__syncthreads", "__shfl", "__global__", "__shared__", "__device__", "asm(", "expf", "sqrtf", "tanhf", "cosf", "sinf", "double"} {
			if cudaOnly == "asm(" && strings.HasPrefix(text, "// CUDA only") {
				continue
			}
			if strings.Contains(text, cudaOnly) {
				t.Errorf("%s uses %s directly; use the prelude's macro", name, cudaOnly)
			}
		}
	}
}

func TestParamsLayout(t *testing.T) {
	p := params(nil).ptr(0x0102030405060708).u32(9).f32(1)
	want := []byte{8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0, 0, 0, 0x80, 0x3f}
	if string(p) != string(want) {
		t.Fatalf("params bytes % x, want % x", []byte(p), want)
	}
}

func TestNVRTCCandidates(t *testing.T) {
	env := map[string]string{"QPACK_NVRTC": "/opt/x/libnvrtc.so.13", "CUDA_HOME": "/opt/cuda"}
	files := map[string][]string{
		"/usr/local/cuda/lib64/libnvrtc.so.*": {"/usr/local/cuda/lib64/libnvrtc.so.12.4.99", "/usr/local/cuda/lib64/libnvrtc.so.13.0.48", "/usr/local/cuda/lib64/libnvrtc.so.13.alt"},
		"/opt/cuda/lib64/libnvrtc.so.*":       {"/opt/cuda/lib64/libnvrtc.so.13.1"},
	}
	got := nvrtcCandidates(func(k string) string { return env[k] },
		func(p string) ([]string, error) { return files[p], nil })
	want := []string{"/opt/x/libnvrtc.so.13", "libnvrtc.so.13", "libnvrtc.so.12",
		"/opt/cuda/lib64/libnvrtc.so.13.1", "/usr/local/cuda/lib64/libnvrtc.so.13.0.48", "/usr/local/cuda/lib64/libnvrtc.so.12.4.99"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("candidates\n%v\nwant\n%v", got, want)
	}
	// Every pattern must be valid for filepath.Glob.
	for _, d := range nvrtcDirs(func(string) string { return "" }) {
		if _, err := filepath.Glob(filepath.Join(d, "libnvrtc.so.*")); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	if d := driverCandidates(func(k string) string { return map[string]string{"QPACK_CUDA_DRIVER": "/x/libcuda.so.1"}[k] }); d[0] != "/x/libcuda.so.1" || d[1] != "libcuda.so.1" {
		t.Fatalf("driver candidates %v", d)
	}
}

func TestErrorIs(t *testing.T) {
	if !errors.Is(fmt.Errorf("x: %w", &Error{Call: "cuDeviceGetCount", Code: cudaErrorNoDevice, Name: "CUDA_ERROR_NO_DEVICE"}), ErrNoDevice) {
		t.Error("CUDA_ERROR_NO_DEVICE is not ErrNoDevice")
	}
	e := &Error{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	if errors.Is(e, ErrNoDevice) {
		t.Error("out of memory reads as no device")
	}
	if s := e.Error(); !strings.Contains(s, "cuMemAlloc_v2") || !strings.Contains(s, "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Errorf("error text %q does not name the call and result", s)
	}
}

// QPACK_CUDA_DEFINES: each NAME or NAME=VALUE becomes a #define line ahead
// of the source; anything else is refused, never pasted into it.
func TestSourceWithDefines(t *testing.T) {
	src, defs, err := sourceWithDefines(" QP_GEMV_STAGE=0,QP_GEMV_MIN_GROUPS=3  QP_X ")
	if err != nil {
		t.Fatal(err)
	}
	want := "#define QP_GEMV_STAGE 0\n#define QP_GEMV_MIN_GROUPS 3\n#define QP_X \n"
	if !strings.HasPrefix(src, want) || src[len(want):] != Source() {
		t.Errorf("source starts %q, want %q then Source()", src[:min(len(src), 80)], want)
	}
	if defs != "QP_GEMV_STAGE=0 QP_GEMV_MIN_GROUPS=3 QP_X" {
		t.Errorf("defines %q", defs)
	}
	if src, defs, err := sourceWithDefines(""); err != nil || src != Source() || defs != "" {
		t.Errorf("no defines: %v, %q", err, defs)
	}
	for _, bad := range []string{"1X=2", "X=a;b", "X=\"s\"", "=3", "X=1\n#include"} {
		if _, _, err := sourceWithDefines(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
