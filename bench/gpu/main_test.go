package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/bench/internal/benchpack"
	"github.com/qpack-go/qpack/cuda"
)

// The optional methods this command finds at run time are the CUDA
// backend's, signatures included (a drifted signature would make the
// command report "none in this build" silently).
var (
	_ copyBandwidther   = (*cuda.Backend)(nil)
	_ expertCacheSetter = (*cuda.Backend)(nil)
)

// The test binary runs as the command (and its child steps) when this is
// set: the whole command is tested as it runs, processes and all.
const asMain = "QPACK_BENCH_GPU_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func command(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("%v: still running after 2 minutes", args)
	}
	return o.String(), e.String(), err
}

// The whole command at toy size: the container written and deleted, the
// CPU decode against an I/O limit from the same run, the CPU prefill on
// fewer layers scaled per layer, and the CUDA steps either skipped with the
// reason (no GPU here) or measured against their limits.
func TestWholeCommandToy(t *testing.T) {
	dir := t.TempDir()
	out, stderr, err := command(t, "-dims", "toy", "-layers", "4", "-cpu-layers", "2", "-tokens", "4", "-prompt", "48", "-chunk", "16",
		"-bw-time", "200ms", "-copy-bytes", "1048576", "-dir", dir, "-json", "-json-out", filepath.Join(t.TempDir(), "r.json"))
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stderr, out)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if rep.Failed != 0 {
		t.Errorf("%d steps failed: %s", rep.Failed, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the containers were not deleted: %v", ents)
	}
	f := rep.Facts
	if f == nil || f.Layers != 4 || f.SparseLayers != 4 || f.FullLayers != 1 || f.TopK != 2 || f.Experts != 8 {
		t.Fatalf("facts %+v", f)
	}
	if len(rep.PreadBW) != 3 || rep.PreadBW[0] <= 0 || rep.CPUCores <= 0 {
		t.Errorf("pread bandwidths %v, %d cores", rep.PreadBW, rep.CPUCores)
	}
	cpu := rep.StreamedCPU
	if !ok(cpu.Res) || cpu.Res.Backend != "cpu" || cpu.Res.BytesPerToken <= 0 || cpu.Limit <= 0 ||
		math.Abs(cpu.Ratio-cpu.Res.TokPerSec/cpu.Limit) > 1e-9*cpu.Ratio {
		t.Errorf("cpu decode %+v %+v", cpu, cpu.Res)
	}
	// The bytes read per token are bounded by what a token can need: top-k
	// experts of every sparse layer, plus guesses read ahead.
	if max := float64(2*f.TopK*f.SparseLayers) * float64(f.ExpertStride); cpu.Res.BytesPerToken > max {
		t.Errorf("%g bytes read per token, more than %g", cpu.Res.BytesPerToken, max)
	}
	pp := rep.PrefillCPU
	if pp == nil || !ok(pp.Res) || pp.Res.Tokens != 48 || rep.CPUFacts == nil || rep.CPUFacts.Layers != 2 ||
		math.Abs(pp.ScaledTokS-pp.Res.TokPerSec*2/4) > 1e-9*pp.ScaledTokS || pp.ProductFlops <= 0 {
		t.Errorf("cpu prefill %+v (facts %+v)", pp, rep.CPUFacts)
	}
	if pp != nil && pp.Res != nil && pp.Res.BytesPerToken != 0 {
		t.Errorf("the prefill read %g bytes per token from disk: every expert should be in memory", pp.Res.BytesPerToken)
	}
	for _, r := range []*stepResult{rep.GPUInfo, rep.StreamedCUDA.Res, rep.ResidentCUDA.Res, rep.PrefillCUDA.Res} {
		if r.Skipped != "" {
			if !strings.Contains(r.Skipped, "no CUDA device") {
				t.Errorf("%s skipped for %q", r.Step, r.Skipped)
			}
			continue
		}
		// A GPU is here: the step measured something.
		if r.Step == "gpuinfo" && r.CopyBps <= 0 || r.Step != "gpuinfo" && !ok(r) {
			t.Errorf("%s on cuda: %+v", r.Step, r)
		}
	}
	if rep.GPUInfo.Skipped != "" {
		t.Logf("cuda steps skipped: %s", rep.GPUInfo.Skipped)
	}

	// The text form says the same, with the machine beside it; -json-out
	// writes the JSON beside it; -resident-context sets the resident
	// decode's context (and so the KV bytes its HBM limit counts).
	js := filepath.Join(t.TempDir(), "r.json")
	out, stderr, err = command(t, "-dims", "toy", "-layers", "4", "-tokens", "2", "-prompt", "0", "-resident-context", "40", "-bw-time", "100ms", "-copy-bytes", "1048576", "-dir", dir, "-json-out", js)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stderr, out)
	}
	var rep2 report
	if data, err := os.ReadFile(js); err != nil || json.Unmarshal(data, &rep2) != nil || rep2.Facts == nil || rep2.PrefillCPU != nil {
		t.Errorf("-json-out: %v %+v", err, rep2)
	}
	if rep2.Facts != nil && (rep2.Facts.MeanContext != 40+8+1 || rep2.Config.Context != 40) {
		t.Errorf("-resident-context 40: mean context %g, config %+v", rep2.Facts.MeanContext, rep2.Config)
	}
	for _, want := range []string{"machine: GPU ", "cores", "pread bandwidth", "streamed (5% host), for comparison cpu", "I/O ", "HBM limit",
		"the resident one after a 40-token prompt", "at context 49"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "prefill of") {
		t.Errorf("-prompt 0 ran a prefill:\n%s", out)
	}
}

// A step that overruns -timeout is killed and reported; the others still
// run, the report is printed, and the command exits 1.
func TestStepTimeout(t *testing.T) {
	dir := t.TempDir()
	out, stderr, err := command(t, "-dims", "toy", "-layers", "4", "-tokens", "2", "-prompt", "16", "-bw-time", "50ms", "-copy-bytes", "1048576",
		"-timeout", "1ms", "-write-timeout", "1m", "-dir", dir, "-json")
	if ee, isExit := err.(*exec.ExitError); !isExit || ee.ExitCode() != 1 {
		t.Fatalf("exit %v with every step timed out\n%s", err, stderr)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	steps := []*stepResult{rep.GPUInfo, rep.StreamedCPU.Res, rep.StreamedCUDA.Res, rep.ResidentCUDA.Res, rep.PrefillCUDA.Res, rep.PrefillCPU.Res}
	for _, r := range steps {
		if !strings.Contains(r.Error, "timed out after 1ms") {
			t.Errorf("%s on %s: %+v", r.Step, r.Backend, r)
		}
	}
	if rep.Failed != len(steps) {
		t.Errorf("%d failed steps counted, want %d", rep.Failed, len(steps))
	}
}

// The free-space check refuses a container the file system cannot hold,
// and the layer count -layers 0 picks fits in what is free.
func TestRoom(t *testing.T) {
	if err := benchpack.CheckRoom(t.TempDir(), 1<<62); err == nil {
		t.Error("4 EiB of experts accepted")
	}
	if n := models["80b"].experts(48); n != 48*512*1769472 {
		t.Errorf("80b experts: %d bytes for 48 layers", n)
	}
	if n := models["35b"].experts(40); n != 40*256*1769472 {
		t.Errorf("35b experts: %d bytes for 40 layers", n)
	}
}
