package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/qpack-go/qpack/bench/internal/benchpack"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/runtime/expertcache"
)

// report is everything a run measured (-json prints it as is).
type report struct {
	Config config   `json:"config"`
	Model  string   `json:"model"`
	Notes  []string `json:"notes,omitempty"`

	// The machine.
	GPU        string  `json:"gpu,omitempty"`
	CPU        string  `json:"cpu,omitempty"`
	CPUCores   int     `json:"cpu_cores"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	MemAvail   int64   `json:"mem_available_bytes"`
	DiskFree   int64   `json:"disk_free_bytes"`
	LoadBefore string  `json:"loadavg_before"`
	LoadAfter  string  `json:"loadavg_after"`
	Facts      *facts  `json:"facts"`
	CPUFacts   *facts  `json:"cpu_prefill_facts,omitempty"`
	WriteSecs  float64 `json:"write_seconds"`

	IOMode  string    `json:"io"`
	Readers int       `json:"reads_in_flight"`
	PreadBW []float64 `json:"pread_bytes_per_sec"` // before, between and after the streamed runs

	GPUInfo *stepResult `json:"gpuinfo"`

	// Decode.
	StreamedCUDA *figure `json:"decode_streamed_cuda"`
	StreamedCPU  *figure `json:"decode_streamed_cpu"`
	ResidentCUDA *figure `json:"decode_resident_cuda"`
	// Prefill.
	PrefillCUDA *figure `json:"prefill_cuda,omitempty"`
	PrefillCPU  *figure `json:"prefill_cpu,omitempty"`

	// Failed counts steps that failed or timed out.
	Failed int `json:"failed_steps"`
}

// figure is a step's result against its limit.
type figure struct {
	Res *stepResult `json:"result"`
	// Limit is the rate (tok/s, or FLOP/s for prefill's products) the
	// figure is judged against; Ratio the step's over it; Goal the
	// issue's.
	LimitName string  `json:"limit_name,omitempty"`
	Limit     float64 `json:"limit,omitempty"`
	Ratio     float64 `json:"ratio,omitempty"`
	Goal      float64 `json:"goal,omitempty"`
	// Prefill: the products' achieved FLOP/s over the whole prefill time;
	// for the CPU run on fewer layers, the rate scaled to the CUDA run's
	// layers, and CUDA's rate over it.
	ProductFlops float64 `json:"product_flop_per_sec,omitempty"`
	ScaledTokS   float64 `json:"scaled_tok_per_sec,omitempty"`
	VsCPU        float64 `json:"cuda_over_cpu,omitempty"`
}

func run(c config, mode expertcache.IOMode) (*report, error) {
	m := models[c.Dims]
	rep := &report{Config: c, Model: m.label, CPU: benchpack.CPUModel(), CPUCores: goruntime.NumCPU(),
		GOMAXPROCS: goruntime.GOMAXPROCS(0), MemAvail: benchpack.MemAvailable(), LoadBefore: benchpack.LoadAvg()}
	work := filepath.Join(c.Dir, "qpack-bench-gpu")
	if !c.Keep {
		defer os.RemoveAll(work)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	free, err := benchpack.FreeBytes(work)
	if err != nil {
		return nil, err
	}
	rep.DiskFree = free
	perLayer := m.experts(1)
	if c.Layers == 0 {
		// All the real layers if they fit, else as many whole groups of
		// four (three DeltaNet, one full attention) as do.
		n := m.realLayers
		for n > 4 && benchpack.RoomNeeded(perLayer*int64(n)) > free {
			n -= 4
		}
		c.Layers, rep.Config.Layers = n, n
	}
	if c.Layers < m.realLayers {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d of the real model's %d layers (all would need about %.1f GiB of disk, %.1f GiB free)",
			c.Layers, m.realLayers, float64(benchpack.RoomNeeded(perLayer*int64(m.realLayers)))/(1<<30), float64(free)/(1<<30)))
	}
	pack, err := writeContainer(c, work, c.Layers, rep)
	if err != nil {
		return nil, err
	}
	if rep.Facts, err = readFacts(pack, c.Tokens, c.Context); err != nil {
		return nil, err
	}
	ioName := c.IO
	if mode == expertcache.Direct && !expertcache.DirectAvailable(filepath.Join(pack, qpack.LayerFile(0))) {
		rep.Notes = append(rep.Notes, "direct I/O is refused on this file system: expert reads and the pread bandwidth are buffered, "+
			"so both may come from the page cache (the container was just written): the I/O limit is then the page cache's, not the disk's")
		mode, ioName = expertcache.Buffered, "buffered"
		c.IO = ioName
	}
	rep.IOMode, rep.Readers = ioName, expertcache.DefaultReaders
	bw := func(seed uint64) float64 {
		b, err := benchpack.PreadBandwidth(pack, mode, rep.Readers, c.BWTime, seed)
		if err != nil {
			rep.Notes = append(rep.Notes, "pread bandwidth: "+err.Error())
			rep.Failed++
			b = 0
		}
		rep.PreadBW = append(rep.PreadBW, b)
		return b
	}

	step := func(name, backend, model string, timeout time.Duration) *stepResult {
		res, err := spawn(timeout, "-child", name, "-backend", backend, "-model", model, "-io", c.IO,
			"-dims", c.Dims, "-tokens", fmt.Sprint(c.Tokens), "-prompt", fmt.Sprint(c.Prompt), "-chunk", fmt.Sprint(c.Chunk), "-resident-context", fmt.Sprint(c.Context),
			"-host-cache", fmt.Sprint(c.HostCache), "-device-cache", fmt.Sprint(c.DeviceCache), "-copy-bytes", fmt.Sprint(c.CopyBytes))
		if err != nil {
			rep.Failed++
			fmt.Fprintf(os.Stderr, "bench/gpu: %s on %s: FAILED: %v\n", name, backend, err)
			return &stepResult{Step: name, Backend: backend, Error: err.Error()}
		}
		if res.CUDAErr != "" {
			// Calls fell back to the CPU: the rate is not the GPU's.
			rep.Failed++
			res.Error = "device error, calls computed on the CPU (figure not valid): " + res.CUDAErr
		}
		// Progress, so that a run killed from outside leaves its figures.
		switch {
		case res.Skipped != "" || res.Error != "":
			fmt.Fprintf(os.Stderr, "bench/gpu: %s on %s: %s\n", name, backend, status(res))
		case name == "gpuinfo":
			fmt.Fprintf(os.Stderr, "bench/gpu: %s: copy bandwidth %.0f GB/s, matmul rate %.3g FLOP/s %s\n", res.Device, res.CopyBps/1e9, res.MatMulFlops, res.MatMulNote)
		default:
			fmt.Fprintf(os.Stderr, "bench/gpu: %s on %s: %.2f tok/s (%d tokens, %.1fs), %.0f bytes read per token\n", name, backend, res.TokPerSec, res.Tokens, res.Seconds, res.BytesPerToken)
		}
		return res
	}

	rep.GPUInfo = step("gpuinfo", "cuda", pack, c.Timeout)
	if rep.GPUInfo.Skipped == "" && rep.GPUInfo.Error == "" {
		rep.GPU = rep.GPUInfo.Device
	}
	// Each streamed run against the mean of the bandwidths measured right
	// before and right after it.
	bw0 := bw(1)
	cpuRes := step("decode", "cpu", pack, c.Timeout)
	bw1 := bw(2)
	rep.StreamedCPU = ioFigure(cpuRes, bw0, bw1)
	cudaRes := step("decode", "cuda", pack, c.Timeout)
	rep.StreamedCUDA = ioFigure(cudaRes, bw1, bw(3))
	rep.ResidentCUDA = &figure{Res: step("resident", "cuda", pack, c.Timeout), LimitName: "HBM", Goal: 0.5}
	if g := rep.GPUInfo; g.CopyBps > 0 {
		rep.ResidentCUDA.Limit = g.CopyBps / rep.Facts.TouchedPerToken()
		if r := rep.ResidentCUDA.Res; ok(r) {
			rep.ResidentCUDA.Ratio = r.TokPerSec / rep.ResidentCUDA.Limit
		}
	}

	if c.Prompt > 0 {
		pc := &figure{Res: step("prefill", "cuda", pack, c.Timeout), LimitName: "matmul rate", Goal: 0.25}
		rep.PrefillCUDA = pc
		if ok(pc.Res) {
			pc.ProductFlops = rep.Facts.PrefillFlops(c.Prompt) / pc.Res.Seconds
			if g := rep.GPUInfo; g.MatMulFlops > 0 {
				pc.Limit, pc.Ratio = g.MatMulFlops, pc.ProductFlops/g.MatMulFlops
			}
		}
		if c.CPULayers > 0 {
			cpuPack := pack
			if c.CPULayers < c.Layers {
				rep.Notes = append(rep.Notes, fmt.Sprintf("the CPU prefill runs %d layers; its rate is scaled per layer to %d (tok/s x %d / %d)", c.CPULayers, c.Layers, c.CPULayers, c.Layers))
				if cpuPack, err = writeContainer(c, work, c.CPULayers, rep); err != nil {
					return nil, err
				}
			}
			if rep.CPUFacts, err = readFacts(cpuPack, c.Tokens, c.Context); err != nil {
				return nil, err
			}
			pp := &figure{Res: step("prefill", "cpu", cpuPack, c.Timeout)}
			rep.PrefillCPU = pp
			if ok(pp.Res) {
				layers := min(c.CPULayers, c.Layers)
				pp.ProductFlops = rep.CPUFacts.PrefillFlops(c.Prompt) / pp.Res.Seconds
				pp.ScaledTokS = pp.Res.TokPerSec * float64(layers) / float64(c.Layers)
				if ok(pc.Res) {
					pc.VsCPU = pc.Res.TokPerSec / pp.ScaledTokS
				}
			}
		}
	}
	rep.LoadAfter = benchpack.LoadAvg()
	return rep, nil
}

// ok says whether a step ran and measured something valid.
func ok(r *stepResult) bool { return r != nil && r.Skipped == "" && r.Error == "" && r.TokPerSec > 0 }

// ioFigure judges a streamed decode against the I/O limit: the mean of
// the pread bandwidths measured before and after it ÷ the bytes it read per
// token.
func ioFigure(r *stepResult, before, after float64) *figure {
	f := &figure{Res: r, LimitName: "I/O", Goal: 0.8}
	var bw float64
	switch {
	case before > 0 && after > 0:
		bw = (before + after) / 2
	default:
		bw = max(before, after)
	}
	if !ok(r) || r.BytesPerToken <= 0 || bw <= 0 {
		return f
	}
	f.Limit = bw / r.BytesPerToken
	f.Ratio = r.TokPerSec / f.Limit
	return f
}

// writeContainer writes (or, with -keep, reuses) the container of layers.
func writeContainer(c config, work string, layers int, rep *report) (string, error) {
	pack := filepath.Join(work, fmt.Sprintf("%s-%dl-v%d.qpack", c.Dims, layers, c.Vocab))
	if _, err := os.Stat(filepath.Join(pack, qpack.ManifestName)); err == nil && c.Keep {
		return pack, nil
	}
	os.RemoveAll(pack)
	if err := benchpack.CheckRoom(work, models[c.Dims].experts(layers)); err != nil {
		return "", err
	}
	t0 := time.Now()
	if _, err := spawn(c.WriteTime, "-child", "write", "-model", pack, "-dims", c.Dims,
		"-layers", fmt.Sprint(layers), "-vocab", fmt.Sprint(c.Vocab)); err != nil {
		return "", fmt.Errorf("writing the container: %w", err)
	}
	rep.WriteSecs += time.Since(t0).Seconds()
	fmt.Fprintf(os.Stderr, "bench/gpu: wrote %s in %.1fs\n", pack, time.Since(t0).Seconds())
	return pack, nil
}

// spawn runs one step in a fresh process, killed after timeout.
func spawn(timeout time.Duration, args ...string) (*stepResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	os.Stderr.Write(stderr.Bytes())
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%v: timed out after %v", args[:2], timeout)
	}
	if err != nil {
		msg := bytes.TrimSpace(stderr.Bytes())
		if i := bytes.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		return nil, fmt.Errorf("%v: %w: %s", args[:2], err, msg)
	}
	var res stepResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("%v: %w (%q)", args[:2], err, out)
	}
	return &res, nil
}
