package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

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
	for _, name := range models {
		t.Run("chat/"+name, func(t *testing.T) { deviceChat(t, be, filepath.Join(tiny, name), name) })
	}
	for _, name := range models {
		t.Run("serve/"+name, func(t *testing.T) { deviceServe(t, be, filepath.Join(tiny, name), name) })
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
	if want == "cuda" && (got.Launches == 0 || got.Fallbacks != 0 || !got.Layers || got.HostLayerOps != 0) {
		t.Fatalf("cuda: %d kernel launches, %d CPU fallbacks, whole layers %v, %d layer ops on the host", got.Launches, got.Fallbacks, got.Layers, got.HostLayerOps)
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
	fmt.Printf("RESULT logits model=%s backend=%s device=%q logits=%d max_abs_diff=%.3e bound=%.0e greedy=%s launches=%d fallbacks=%d whole_layers=%v host_layer_ops=%d %s\n",
		name, be, got.Backend.Device, len(a), worst, bound, greedy, got.Backend.Launches, got.Backend.Fallbacks,
		got.Backend.Layers, got.Backend.HostLayerOps, verdict)
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
	gen := func(budget, deviceCache string) generateRun {
		// The GPU keeps its own expert cache (cuda's device cache, half
		// the free device memory by default), which would serve every
		// expert after its first read and hide the host cache: the two
		// runs compared for streaming turn it off ("0"), a third keeps
		// the default and must give the same tokens.
		t.Setenv("QPACK_CUDA_EXPERT_CACHE", deviceCache)
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
	small, resident, onDevice := gen(smallExpertCache, "0"), gen(residentCache, "0"), gen(smallExpertCache, "")
	same := "identical"
	verdict := "PASS"
	if !slices.Equal(small.Tokens, resident.Tokens) || !slices.Equal(small.Tokens, onDevice.Tokens) || len(small.Tokens) == 0 {
		same, verdict = "different", "FAIL"
		t.Errorf("%s: %v with a %s expert cache, %v with every expert resident, %v with the device's expert cache", name,
			small.Tokens, smallExpertCache, resident.Tokens, onDevice.Tokens)
	}
	if small.HitRate >= resident.HitRate {
		verdict = "FAIL"
		t.Errorf("%s: hit rate %.3f with %s, %.3f resident: the small cache did not stream", name, small.HitRate, smallExpertCache, resident.HitRate)
	}
	fmt.Printf("RESULT generate model=%s backend=%s tokens=%d small_cache=%s small_hit_rate=%.3f small_decode_misses=%d resident_hit_rate=%.3f resident_decode_misses=%d output=%s %s\n",
		name, be, len(small.Tokens), smallExpertCache, small.HitRate, small.Decode.Misses, resident.HitRate, resident.Decode.Misses, same, verdict)
}

// deviceChat: two greedy chat turns on backend be give the tokens they give
// on cpu.
func deviceChat(t *testing.T, be, dir, name string) {
	chat := func(backend string) ([][]int, *backendInfo) {
		stdout, stderr, code := runMain(t, "chat", dir, "hello", "tell me more", "--max-new", "8", "--temperature", "0", "--json", "--backend", backend)
		if code != 0 {
			t.Fatalf("chat --backend %s: exit %d\n%s", backend, code, stderr)
		}
		var r struct {
			Turns []struct {
				Tokens  []int        `json:"tokens"`
				Backend *backendInfo `json:"backend"`
			} `json:"turns"`
		}
		if err := json.Unmarshal([]byte(stdout), &r); err != nil || len(r.Turns) != 2 {
			t.Fatalf("chat --backend %s: %v, %d turns\n%s", backend, err, len(r.Turns), stdout)
		}
		last := r.Turns[1].Backend
		checkBackend(t, last, backend)
		return [][]int{r.Turns[0].Tokens, r.Turns[1].Tokens}, last
	}
	ref, _ := chat("cpu")
	got, info := chat(be)
	verdict, same := "PASS", "identical"
	if !slices.EqualFunc(ref, got, slices.Equal[[]int]) {
		verdict, same = "FAIL", "different"
		t.Errorf("%s: chat turns %v on %s, %v on cpu", name, got, be, ref)
	}
	fmt.Printf("RESULT chat model=%s backend=%s turns=2 tokens=%d,%d launches=%d fallbacks=%d output=%s %s\n",
		name, be, len(got[0]), len(got[1]), info.Launches, info.Fallbacks, same, verdict)
}

// deviceServe: qpack serve --backend be answers a greedy completion with
// the text serve --backend cpu gives, and its start line names the backend.
func deviceServe(t *testing.T, be, dir, name string) {
	ref, _ := serveCompletion(t, dir, "cpu")
	got, start := serveCompletion(t, dir, be)
	verdict, same := "PASS", "identical"
	if got != ref || got == "" {
		verdict, same = "FAIL", "different"
		t.Errorf("%s: completion %q on %s, %q on cpu", name, got, be, ref)
	}
	if !strings.Contains(start, "backend "+be) {
		verdict = "FAIL"
		t.Errorf("%s: the start line does not name %s: %q", name, be, start)
	}
	_, named, _ := strings.Cut(start, ", backend ")
	fmt.Printf("RESULT serve model=%s backend=%s text_bytes=%d output=%s start_line_backend=%q %s\n", name, be, len(got), same, named, verdict)
}

// serveCompletion runs qpack serve on a free port with backend, asks for
// one greedy completion and stops it; every wait is bounded.
func serveCompletion(t *testing.T, dir, backend string) (text, start string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	app := newApp()
	var errw syncBuffer
	app.Writer, app.ErrWriter = io.Discard, &errw
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, []string{"qpack", "serve", dir, "--port", "0", "--model-id", "tiny", "--expert-cache", "1MiB", "--backend", backend})
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop after the signal")
		}
	}()
	addr := regexp.MustCompile(`qpack serve: http://(127\.0\.0\.1:\d+)/v1.*`)
	deadline := time.Now().Add(60 * time.Second)
	var base string
	for base == "" {
		if m := addr.FindStringSubmatch(errw.String()); m != nil {
			base, start = "http://"+m[1], m[0]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v\n%s", err, errw.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address printed: %s", errw.String())
		}
	}
	client := &http.Client{Timeout: 60 * time.Second}
	for {
		res, err := client.Get(base + "/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the model did not load in time: %s", errw.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err := client.Post(base+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tiny","prompt":"`+devicePrompt+`","max_tokens":8,"temperature":0}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != http.StatusOK || len(body.Choices) != 1 {
		t.Fatalf("/v1/completions on %s: %d %+v %v", backend, res.StatusCode, body, err)
	}
	return body.Choices[0].Text, start
}
