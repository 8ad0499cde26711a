package main

import (
	"fmt"
	"io"
	"strings"
)

func mib(n float64) string { return fmt.Sprintf("%.1f MiB", n/(1<<20)) }
func gib(n float64) string { return fmt.Sprintf("%.1f GiB", n/(1<<30)) }

// status is a step's outcome when it has no figure.
func status(r *stepResult) string {
	switch {
	case r == nil:
		return "not run"
	case r.Skipped != "":
		// The first clause (the machine line has the whole reason).
		why, _, _ := strings.Cut(r.Skipped, ": ")
		return "skipped: " + why
	case r.Error != "":
		return "FAILED: " + r.Error
	}
	return ""
}

// print writes the report as text.
func (rep *report) print(w io.Writer) error {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	f := rep.Facts
	c := rep.Config
	gpu := rep.GPU
	if gpu == "" {
		gpu = "none"
		if g := rep.GPUInfo; g != nil && g.Skipped != "" {
			gpu += " (" + g.Skipped + ")"
		} else if g != nil && g.Error != "" {
			gpu += " (FAILED: " + g.Error + ")"
		}
	}
	p("bench/gpu: %s per-layer dims, %d layers (%d sparse; %d DeltaNet, %d full attention), vocab %d, %d experts of %d B per layer (%s of experts, %s dense)\n",
		rep.Model, f.Layers, f.SparseLayers, f.LinearLayers, f.FullLayers, c.Vocab, f.Experts, f.ExpertStride, gib(float64(f.AllExperts)), mib(float64(f.DenseBytes)))
	p("machine: GPU %s; CPU %s, %d cores (GOMAXPROCS %d); %s memory available; %s disk free; load average %s before, %s after\n",
		gpu, orUnknown(rep.CPU), rep.CPUCores, rep.GOMAXPROCS, gib(float64(rep.MemAvail)), gib(float64(rep.DiskFree)), rep.LoadBefore, rep.LoadAfter)
	for _, n := range rep.Notes {
		p("note: %s\n", n)
	}
	if g := rep.GPUInfo; g != nil && g.CopyBps > 0 {
		mm := g.MatMulNote
		if g.MatMulFlops > 0 {
			mm = fmt.Sprintf("%.1f TFLOP/s", g.MatMulFlops/1e12)
		}
		p("device: copy bandwidth %.0f GB/s (cuMemcpyDtoD of %s x 10, read+write); matmul rate %s\n", g.CopyBps/1e9, mib(float64(c.CopyBytes)), mm)
	}
	bws := make([]string, len(rep.PreadBW))
	for i, b := range rep.PreadBW {
		bws[i] = fmt.Sprintf("%.0f", b/1e6)
	}
	p("disk: pread bandwidth of whole expert blobs at random offsets (%s, %d reads in flight), before / between / after the streamed runs: %s MB/s\n",
		rep.IOMode, rep.Readers, strings.Join(bws, " / "))

	ctxNote := ""
	if c.Context != 16 {
		ctxNote = fmt.Sprintf("; the resident one after a %d-token prompt", c.Context)
	}
	p("\ndecode (%d tokens after a 16-token prompt and 8 warm-up tokens%s, temperature 1, top-k 64, top-p 0.95):\n", c.Tokens, ctxNote)
	p("  %-34s %-5s %11s %12s %11s %8s %10s %12s %8s %6s\n", "run", "", "host cache", "device cache", "read/token", "hit rate", "decode", "limit", "vs limit", "goal")
	row := func(label string, fg *figure) {
		r := fg.Res
		if s := status(r); s != "" {
			p("  %-34s %-5s %s\n", label, r.Backend, s)
			return
		}
		dev := "-"
		switch {
		case r.DeviceCache == "":
			dev = mib(float64(r.DeviceBudget))
		case strings.HasPrefix(r.DeviceCache, "none in this build"):
			dev = "none*"
		}
		limit, ratio, goal := "-", "-", ""
		if fg.Limit > 0 {
			limit, ratio = fmt.Sprintf("%s %.1f tok/s", fg.LimitName, fg.Limit), fmt.Sprintf("%.2fx", fg.Ratio)
		}
		if fg.Goal > 0 && r.Backend == "cuda" {
			goal = fmt.Sprintf(">= %.1fx", fg.Goal)
		}
		p("  %-34s %-5s %11s %12s %11s %7.1f%% %6.2f tok/s %12s %8s %6s\n", label, r.Backend, mib(float64(r.HostBudget)), dev,
			mib(r.BytesPerToken), 100*r.HitRate, r.TokPerSec, limit, ratio, goal)
	}
	row(fmt.Sprintf("streamed (%.0f%% host, %.0f%% device)", c.HostCache, c.DeviceCache), rep.StreamedCUDA)
	row(fmt.Sprintf("streamed (%.0f%% host), for comparison", c.HostCache), rep.StreamedCPU)
	row("resident (every expert, warmed)", rep.ResidentCUDA)
	if r := rep.ResidentCUDA.Res; ok(r) {
		p("  resident: %.2f host-cache requests per token (0: the device cache served every expert), warm-up %.1fs\n", r.RequestsPerToken, r.WarmSeconds)
	}
	for _, x := range []struct {
		label string
		fg    *figure
	}{{"streamed", rep.StreamedCUDA}, {"resident", rep.ResidentCUDA}} {
		if r := x.fg.Res; ok(r) {
			p("  cuda %s: %s\n", x.label, cudaLine(r))
		}
	}
	for _, fg := range []*figure{rep.StreamedCUDA, rep.ResidentCUDA} {
		if r := fg.Res; r != nil && strings.HasPrefix(r.DeviceCache, "none in this build") {
			p("  * %s\n", r.DeviceCache)
			break
		}
	}
	p("  (I/O limit: pread bandwidth (mean of the measurements before and after the run) / bytes read per token;\n")
	p("   HBM limit: device copy bandwidth / bytes touched per token = dense %s + experts %s (top-%d of %d sparse layers) + state %s (float32 KV read at context %.0f, DeltaNet state read and written) = %s)\n",
		mib(float64(f.DenseTouched)), mib(float64(f.ExpertTouched)), f.TopK, f.SparseLayers, mib(f.StateTouched), f.MeanContext, mib(f.TouchedPerToken()))

	if c.Prompt <= 0 {
		return nil
	}
	p("\nprefill of %d tokens (chunks of %d, every expert in memory, the device cache warmed where there is one):\n", c.Prompt, c.Chunk)
	pre := func(fg *figure, layers int, fl *facts) {
		if fg == nil {
			return
		}
		r := fg.Res
		if s := status(r); s != "" {
			p("  %-5s %s\n", r.Backend, s)
			return
		}
		p("  %-5s %2d layers: %8.1f tok/s (%6.1fs); products %.1f GFLOP per token, %.2f TFLOP/s over the whole prefill", r.Backend, layers, r.TokPerSec, r.Seconds,
			fl.ProductFlopsPerToken/1e9, fg.ProductFlops/1e12)
		if fg.Limit > 0 {
			p(" = %.2fx the matmul rate (goal >= %.2fx)", fg.Ratio, fg.Goal)
		}
		p("\n")
		if r.Backend == "cuda" {
			p("        %s\n", cudaLine(r))
		}
	}
	pre(rep.PrefillCUDA, f.Layers, f)
	if rep.PrefillCPU != nil {
		cl := min(c.CPULayers, c.Layers)
		fl := rep.CPUFacts
		if fl == nil {
			fl = f
		}
		pre(rep.PrefillCPU, cl, fl)
		if pp := rep.PrefillCPU; ok(pp.Res) && cl != c.Layers {
			p("        scaled to %d layers: %.1f tok/s (x %d / %d)\n", c.Layers, pp.ScaledTokS, cl, c.Layers)
		}
	}
	if pc := rep.PrefillCUDA; pc != nil && pc.VsCPU > 0 {
		p("  cuda / cpu (all %d cores): %.2fx\n", rep.CPUCores, pc.VsCPU)
	}
	if g := rep.GPUInfo; g != nil && g.MatMulFlops == 0 && g.MatMulNote != "" {
		p("  (matmul rate %s)\n", g.MatMulNote)
	}
	p("  (products: 2 rows cols per token of every quantized dense matrix but the embedding and lm_head, plus the top-k experts' three matrices per sparse layer; lm_head once; over the whole prefill time, attention and DeltaNet included: a lower bound on the products' own rate)\n")
	return nil
}

// cudaLine describes what the CUDA backend did per token.
func cudaLine(r *stepResult) string {
	hit := fmt.Sprintf("%.1f%%", 100*r.DevExpertHitRate)
	if r.DevExpertLookupsPerToken == 0 {
		hit = "- (no lookups)"
	}
	return fmt.Sprintf("layered %v; device expert cache hit rate %s, %s copied in per token; %.1f kernel launches, %.1f layer ops on the host and %.1f sparse layers routed on the device per token",
		r.Layered, hit, mib(r.DevExpertBytesPerToken), r.LaunchesPerToken, r.HostOpsPerToken, r.RoutedPerToken)
}

func orUnknown(s string) string {
	if s == "" {
		return "(model unknown)"
	}
	return s
}
