package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The recorded device run (testdata/cuda/device.sh on the H200, logs in
// testdata/cuda/): CI has no GPU, so it checks that the recording is of the
// kernels in this tree, passed, and that compute-sanitizer found nothing.
// Changing a kernel makes this fail until the device run is recorded again.

func readRecording(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "cuda", name))
	if err != nil {
		t.Fatalf("recorded device run: %v", err)
	}
	return string(b)
}

// sanitizedTests run under each compute-sanitizer tool (testdata/cuda/device.sh's
// SAN): every kernel at least once.
var sanitizedTests = []string{"TestMatMulConformance", "TestRMSNormConformance", "TestSwiGLUConformance",
	"TestMatMulManyVectors", "TestAllocFree", "TestNoSuchDevice",
	"TestDeviceConformanceGPU", "TestLayerTinyModelsGPU", "TestGemmEachKernel", "TestGemmBaselineKernel", "TestLayerGroupedExpertsGPU", "TestAttentionTileGPU", "TestNormFuseGPU", "TestPrefetchNextGPU", "TestSelectOneGPU"}

// conformanceTests are the GPU tests of conformance.log: the sanitized ones,
// the conformance suite's model half, and every gemm kernel at every shape.
var conformanceTests = append(append([]string(nil), sanitizedTests...),
	"TestModelsConformanceGPU", "TestGemmConformance", "TestGraphsGPU", "TestGraphsAfterFreeGPU", "TestDeltaNetColsGPU", "TestNormFuseModelsGPU")

// checkPassed checks a go test -v log: every one of tests passed (none
// skipped or failed), on a real device, compiling this tree's kernels.
func checkPassed(t *testing.T, name, log string, tests []string) {
	t.Helper()
	for _, tn := range tests {
		if !strings.Contains(log, "--- PASS: "+tn+" ") {
			t.Errorf("%s: %s did not pass", name, tn)
		}
	}
	for _, bad := range []string{"--- SKIP", "--- FAIL", "\nFAIL", "panic:"} {
		if strings.Contains(log, bad) {
			t.Errorf("%s: contains %q", name, bad)
		}
	}
	if !strings.Contains(log, "\nPASS\n") || !strings.Contains(log, "exit status 0\n") {
		t.Errorf("%s: the run did not end in PASS with exit status 0", name)
	}
	m := regexp.MustCompile(`device (NVIDIA .+), (NVRTC .+), kernel source sha256 ([0-9a-f]{64})\n`).FindAllStringSubmatch(log, -1)
	if len(m) < len(tests) {
		t.Fatalf("%s: %d device lines, want one per conformance test", name, len(m))
	}
	for _, d := range m {
		if d[3] != sourceHash() {
			t.Fatalf("%s: recorded with kernel source %s, this tree's is %s: run testdata/cuda/device.sh again", name, d[3], sourceHash())
		}
	}
}

func TestRecordedConformance(t *testing.T) {
	checkPassed(t, "conformance.log", readRecording(t, "conformance.log"), conformanceTests)
}

func TestRecordedSanitizers(t *testing.T) {
	clean := map[string]string{
		"memcheck.log":  "========= ERROR SUMMARY: 0 errors\n",
		"synccheck.log": "========= ERROR SUMMARY: 0 errors\n",
		"initcheck.log": "========= ERROR SUMMARY: 0 errors\n",
		"racecheck.log": "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n",
	}
	for name, want := range clean {
		log := readRecording(t, name)
		if !strings.HasPrefix(log, "========= COMPUTE-SANITIZER\n") {
			t.Errorf("%s: not a compute-sanitizer log", name)
		}
		if !strings.Contains(log, want) {
			t.Errorf("%s: no %q", name, strings.TrimSpace(want))
		}
		// Any reported problem is a line "========= <something>" other
		// than the banner and the summary.
		for _, line := range strings.Split(log, "\n") {
			if strings.HasPrefix(line, "=========") && line != "========= COMPUTE-SANITIZER" && line+"\n" != want {
				t.Errorf("%s: %s", name, line)
			}
		}
		checkPassed(t, name, log, sanitizedTests)
	}
}

func TestRecordedBandwidth(t *testing.T) {
	log := readRecording(t, "bandwidth.log")
	if !strings.Contains(log, "exit status 0\n") || !regexp.MustCompile(`copy: \d+ GB/s`).MatchString(log) {
		t.Fatal("bandwidth.log: no copy bandwidth or a failed run")
	}
	if n := len(regexp.MustCompile(`gemv_q[48] .* = [0-9.]+x the copy bandwidth`).FindAllString(log, -1)); n != 3 {
		t.Fatalf("bandwidth.log: %d matvec figures, want 3", n)
	}
}

// The gemm rate recording: the baseline measured, every prefill shape's
// ratio to it, and a clean exit.
func TestRecordedGemmRate(t *testing.T) {
	log := readRecording(t, "gemmrate.log")
	if !strings.Contains(log, "exit status 0\n") || !regexp.MustCompile(`[0-9.]+ base-TFLOP/s`).MatchString(log) {
		t.Fatal("gemmrate.log: no baseline rate or a failed run")
	}
	if n := len(regexp.MustCompile(`gemm_q4 n=4096 \[\d+, \d+\]: .* TFLOP/s = [0-9.]+x the baseline`).FindAllString(log, -1)); n != 4 {
		t.Fatalf("gemmrate.log: %d q4 prefill figures, want 4", n)
	}
}
