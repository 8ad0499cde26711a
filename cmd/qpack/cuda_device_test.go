package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/safetensors"
)

// The device run of --backend cuda (testdata/cuda/cli/device.sh) sets
// QPACK_CUDA_CLI to the backend under test (cuda there; cpu checks the
// harness itself on any machine). It prints one RESULT line per check,
// which TestCUDACLIRecording reads back from the committed log.
const (
	deviceTokens = "1,5,9,14,2,7,3,11,42,99,250,17"
	devicePrompt = "the quick brown fox jumps over"
	// smallExpertCache holds a few experts of a tiny model; residentCache
	// holds all of them.
	smallExpertCache = "16KiB"
	residentCache    = "1GiB"
)

// logitBound is the largest |logit difference| allowed against the CPU
// backend: float32 accumulation in another order, and for quantized weights
// the dequantization's rounding on top.
func logitBound(model string) float64 {
	if strings.HasSuffix(model, "-f32") {
		return 1e-4
	}
	return 1e-3
}

func TestCUDADevice(t *testing.T) {
	be := os.Getenv("QPACK_CUDA_CLI")
	if be == "" {
		t.Skip("the device run (testdata/cuda/cli/device.sh) sets QPACK_CUDA_CLI")
	}
	tiny := os.Getenv("QPACK_TINY")
	if tiny == "" {
		tiny = filepath.Join("..", "..", "testdata", "tiny")
	}
	models := tinyModels(t, tiny)
	for _, name := range models {
		t.Run("logits/"+name, func(t *testing.T) { deviceLogits(t, be, filepath.Join(tiny, name), name) })
	}
	for _, name := range models {
		t.Run("generate/"+name, func(t *testing.T) { deviceGenerate(t, be, filepath.Join(tiny, name), name) })
	}
}

// tinyModels lists the model directories (those with a config.json) in dir.
func tinyModels(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "config.json")); e.IsDir() && err == nil {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatalf("no models in %s", dir)
	}
	return out
}

// logitsRun is the part of logits --json this check reads.
type logitsRun struct {
	Greedy  []int        `json:"greedy"`
	Backend *backendInfo `json:"backend"`
}

func runLogitsTo(t *testing.T, model, backend, out string) logitsRun {
	t.Helper()
	stdout, stderr, code := runMain(t, "logits", model, "--tokens", deviceTokens, "--output", out, "--json", "--backend", backend)
	if code != 0 {
		t.Fatalf("logits --backend %s: exit %d\n%s", backend, code, stderr)
	}
	var r logitsRun
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("logits --backend %s: %v\n%s", backend, err, stdout)
	}
	checkBackend(t, r.Backend, backend)
	return r
}

// checkBackend fails unless the command ran on the backend asked for, and
// for cuda launched kernels with no call falling back to the CPU (which
// would make the comparison vacuous).
func checkBackend(t *testing.T, got *backendInfo, want string) {
	t.Helper()
	if got == nil || got.Name != want {
		t.Fatalf("ran on %+v, want %s", got, want)
	}
	if want == "cuda" && (got.Launches == 0 || got.Fallbacks != 0) {
		t.Fatalf("cuda: %d kernel launches, %d CPU fallbacks", got.Launches, got.Fallbacks)
	}
}

// readLogits reads the float32 "logits" tensor logits --output wrote.
func readLogits(t *testing.T, path string) []float32 {
	t.Helper()
	h, err := safetensors.ReadFileHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	ti, ok := h.Tensor("logits")
	if !ok || ti.DType != safetensors.F32 {
		t.Fatalf("%s: no F32 logits tensor", path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b := raw[ti.Offset : ti.Offset+ti.Size]
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func deviceLogits(t *testing.T, be, dir, name string) {
	tmp := t.TempDir()
	ref := runLogitsTo(t, dir, "cpu", filepath.Join(tmp, "cpu.safetensors"))
	got := runLogitsTo(t, dir, be, filepath.Join(tmp, be+".safetensors"))
	a, b := readLogits(t, filepath.Join(tmp, "cpu.safetensors")), readLogits(t, filepath.Join(tmp, be+".safetensors"))
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%d logits on cpu, %d on %s", len(a), len(b), be)
	}
	worst := 0.0
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		worst = max(worst, d)
	}
	greedy := "identical"
	if !slices.Equal(ref.Greedy, got.Greedy) {
		greedy = "different"
	}
	bound := logitBound(name)
	verdict := "PASS"
	if worst > bound || greedy != "identical" {
		verdict = "FAIL"
		t.Errorf("%s: max |logit difference| %.3g (bound %.0e), greedy %s: %v against %v", name, worst, bound, greedy, got.Greedy, ref.Greedy)
	}
	fmt.Printf("RESULT logits model=%s backend=%s device=%q logits=%d max_abs_diff=%.3e bound=%.0e greedy=%s launches=%d fallbacks=%d %s\n",
		name, be, got.Backend.Device, len(a), worst, bound, greedy, got.Backend.Launches, got.Backend.Fallbacks, verdict)
}

// generateRun is the part of generate --json this check reads.
type generateRun struct {
	Tokens  []int        `json:"tokens"`
	HitRate float64      `json:"expert_cache_hit_rate"`
	Backend *backendInfo `json:"backend"`
	Decode  struct {
		Misses int64 `json:"misses"`
	} `json:"decode_cache"`
}

func deviceGenerate(t *testing.T, be, dir, name string) {
	container := filepath.Join(t.TempDir(), name+".qpack")
	if _, stderr, code := runMain(t, "repack", "--from-dir", dir, "--output", container, "--reserve", "-1"); code != 0 {
		t.Fatalf("repack: exit %d\n%s", code, stderr)
	}
	gen := func(budget string) generateRun {
		stdout, stderr, code := runMain(t, "generate", container, "--prompt", devicePrompt, "--no-chat-template",
			"--max-new", "16", "--temperature", "0", "--expert-cache", budget, "--json", "--backend", be)
		if code != 0 {
			t.Fatalf("generate --expert-cache %s: exit %d\n%s", budget, code, stderr)
		}
		var r generateRun
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("generate --expert-cache %s: %v\n%s", budget, err, stdout)
		}
		checkBackend(t, r.Backend, be)
		return r
	}
	small, resident := gen(smallExpertCache), gen(residentCache)
	same := "identical"
	verdict := "PASS"
	if !slices.Equal(small.Tokens, resident.Tokens) || len(small.Tokens) == 0 {
		same, verdict = "different", "FAIL"
		t.Errorf("%s: %v with a %s expert cache, %v with every expert resident", name, small.Tokens, smallExpertCache, resident.Tokens)
	}
	if small.HitRate >= resident.HitRate {
		verdict = "FAIL"
		t.Errorf("%s: hit rate %.3f with %s, %.3f resident: the small cache did not stream", name, small.HitRate, smallExpertCache, resident.HitRate)
	}
	fmt.Printf("RESULT generate model=%s backend=%s tokens=%d small_cache=%s small_hit_rate=%.3f small_decode_misses=%d resident_hit_rate=%.3f resident_decode_misses=%d output=%s %s\n",
		name, be, len(small.Tokens), smallExpertCache, small.HitRate, small.Decode.Misses, resident.HitRate, resident.Decode.Misses, same, verdict)
}
