// Command runner measures the runner (package runtime/runner with its expert
// cache) on a synthetic .qpack container at the real per-layer dimensions of
// Qwen3.5/3.6-35B-A3B (hidden 2048, 256 experts top-8 of 512, shared expert
// 512, MLX 4-bit group 64: 1,769,472-byte expert blobs) with fewer layers,
// written to disk and deleted at the end.
//
// Decode: tok/s at three expert cache sizes (and with every expert cached,
// the compute ceiling), each in a fresh process, against the I/O limit
// computed from the bytes the run read per token and the disk's pread
// bandwidth measured in the same run (parallel positional reads of whole
// expert blobs at random offsets, in the same I/O mode and with the same
// number of reads in flight, taken right before and after each run): the
// ratio decode tok/s ÷ (bandwidth ÷ bytes per token) is the figure, goal
// ≥ 0.7. Also the hit rate, and the peak RSS against the dense weights plus
// the cache budget. Each budget runs twice, back to back: without
// speculative reads and with the runner's default (each sparse layer's
// top-k guessed from the residual entering it, read during its mixer); the
// ratio of the two rates within each round is reported with the share of
// the real experts guessed and the bytes read for wrong guesses (which
// count in the bytes per token, so in the I/O limit).
//
// Prefill: tok/s of a 512-token prompt in chunks (the default 128) against
// token by token, each in a fresh process with the same cache: goal ≥ 4×;
// and the expert reads of the chunked prefill with the cache's scan policy
// (the default) against the recency policy throughout.
//
// Each figure is the best of -rounds runs, alternating configurations.
//
// -dims 397b measures the same at Qwen3.5-397B-A17B's per-layer dims
// (hidden 4096, 512 experts top-10 of 1024: 7,077,888-byte blobs);
// -dims gemma26b at Gemma 4 26B-A4B's (hidden 2816, 128 experts top-8 of
// 704 beside a dense GeGLU MLP of 2112, sliding layers of 8 KV heads of
// 256 and full layers of 2 KV heads of 512 with k_eq_v, 8-bit router:
// 3,345,408-byte blobs; -layers 3 is sliding, sliding, full). The
// container is streamed to disk one layer's experts at a time (32 distinct
// experts per layer, repeated so every expert has its own bytes), after a
// check that the file system has room for it. -fracs picks the cache sizes
// (percent of all experts); -prompt 0 skips the prefill measurements. The
// compute-only run (every expert cached) is skipped when the experts would
// take more than half the memory available.
//
//	go run ./bench/runner [-dims 35b|397b|gemma26b] [-layers 4] [-vocab 32768] [-tokens 24] [-prompt 512] [-fracs 5,15,40] [-rounds 2] [-io direct] [-dir /tmp] [-keep] [-json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qpack-go/qpack/bench/internal/benchpack"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/runner"
	"github.com/qpack-go/qpack/runtime/sample"
	"github.com/qpack-go/qpack/runtime/synthetic"
)

type childResult struct {
	Mode          string  `json:"mode"`
	Budget        int64   `json:"budget"`
	Chunk         int     `json:"chunk"`
	TokPerSec     float64 `json:"tok_per_sec"`
	Tokens        int     `json:"tokens"`
	Seconds       float64 `json:"seconds"`
	HitRate       float64 `json:"hit_rate"`
	BytesRead     int64   `json:"bytes_read"`
	BytesPerToken float64 `json:"bytes_per_token"`
	Loads         int64   `json:"loads"`
	ReadP50Ms     float64 `json:"read_p50_ms"`
	ReadP99Ms     float64 `json:"read_p99_ms"`
	DirectReads   int64   `json:"direct_reads"`
	Reads         int64   `json:"reads"`
	StallSeconds  float64 `json:"stall_seconds"`
	PeakRSS       int64   `json:"peak_rss"`
	Dense         int64   `json:"dense"`
	PeakAllocated int64   `json:"peak_allocated"`
	// Speculation (decode): experts guessed per token, the share of the
	// real batches guessed, the reads it queued, started, found useful,
	// and the bytes per token read for wrong guesses.
	Speculate          int     `json:"speculate"`
	SpecRecall         float64 `json:"spec_recall"`
	SpecReads          int64   `json:"spec_reads"`
	SpecUseful         int64   `json:"spec_useful"`
	SpecCancelled      int64   `json:"spec_cancelled"`
	SpecWastedPerToken float64 `json:"spec_wasted_bytes_per_token"`
	NoScan             bool    `json:"noscan"`
}

func main() {
	child := flag.String("child", "", "internal: run one step (write|decode|warm|prefill) in this process")
	model := flag.String("model", "", "internal: the container")
	budget := flag.Int64("budget", 0, "internal: cache budget in bytes")
	chunk := flag.Int("chunk", runner.DefaultPrefillChunk, "internal: prefill chunk")
	layers := flag.Int("layers", 4, "decoder layers (every 4th is full attention)")
	dimsFlag := flag.String("dims", "35b", "per-layer dims: 35b (Qwen3.5/3.6-35B-A3B), 397b (Qwen3.5-397B-A17B: 512 experts of 7,077,888 B, 3.6 GB of experts per layer) or gemma26b (Gemma 4 26B-A4B: 128 experts of 3,345,408 B, 428 MB per layer)")
	fracsFlag := flag.String("fracs", "5,15,40", "expert cache sizes measured, in percent of all the experts")
	vocab := flag.Int("vocab", 32768, "vocabulary size (the real one is 248320; a smaller one keeps lm_head, which a 4-layer model does not amortize, from dominating)")
	tokens := flag.Int("tokens", 24, "decode tokens measured (after 8 warm-up tokens)")
	prompt := flag.Int("prompt", 512, "prefill prompt tokens")
	ioMode := flag.String("io", "direct", "expert reads: direct or buffered")
	dir := flag.String("dir", os.TempDir(), "where to write the container")
	keep := flag.Bool("keep", false, "keep the container (and reuse one left by an earlier -keep run)")
	asJSON := flag.Bool("json", false, "print the results as JSON")
	rounds := flag.Int("rounds", 2, "runs of each measurement (the best is reported)")
	cpuProfile := flag.String("cpuprofile", "", "internal: write a CPU profile of the child's measurement")
	speculate := flag.Int("speculate", runner.DefaultSpeculate, "internal: runner.Options.Speculate (-1: off)")
	noScan := flag.Bool("noscan", false, "internal: runner.Options.NoScan")
	specReads := flag.Int("specreads", 0, "internal: runner.Options.SpecReads")
	flag.Parse()
	if _, ok := benchDimsOf[*dimsFlag]; !ok {
		fail(fmt.Errorf("-dims %q: want 35b, 397b or gemma26b", *dimsFlag))
	}
	fracs, err := parseFracs(*fracsFlag)
	if err != nil {
		fail(err)
	}
	benchDims = *dimsFlag
	mode, err := expertcache.ParseIOMode(*ioMode)
	if err != nil {
		fail(err)
	}
	if *child == "write" {
		// A separate process, so that the generator's memory does not
		// count in the measuring processes' peak RSS (Linux carries
		// ru_maxrss across fork and exec).
		if err := writeModel(*model, *layers, *vocab); err != nil {
			fail(err)
		}
		return
	}
	if *child != "" && *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fail(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *child != "" {
		res, err := runChild(*child, *model, *budget, *chunk, *tokens, *prompt, mode, *speculate, *specReads, *noScan)
		if err != nil {
			fail(err)
		}
		json.NewEncoder(os.Stdout).Encode(res)
		pprof.StopCPUProfile()
		return
	}
	if err := run(*layers, *vocab, *tokens, *prompt, max(*rounds, 1), fracs, *ioMode, mode, *dir, *keep, *asJSON); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/runner:", err)
	os.Exit(1)
}

func runChild(kind, model string, budget int64, chunk, tokens, prompt int, mode expertcache.IOMode, spec, specReads int, noScan bool) (*childResult, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := runner.Open(model, runner.Options{ExpertCache: budget, IO: mode, PrefillChunk: chunk, Logger: quiet, Speculate: spec, SpecReads: specReads, NoScan: noScan})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	r.LimitHeap(256 << 20)
	r.EOS = nil
	V := r.Model.Config.Vocab
	s := r.NewSession()
	ctx := context.Background()
	out := &childResult{Mode: kind, Budget: r.Cache.Budget(), Chunk: chunk, Dense: r.DenseBytes(), Speculate: r.Speculate(), NoScan: noScan}
	// Sampling at temperature 1 from the random model's logits gives varied
	// tokens, so routing does not settle into a loop.
	gen := runner.GenOptions{Sample: sampleParams()}
	switch kind {
	case "decode", "warm":
		if kind == "warm" {
			// Every expert read once up front: decode then never misses,
			// which gives the compute-only figure.
			if err := benchpack.Preload(r); err != nil {
				return nil, err
			}
		}
		gen.MaxNew = 8
		if _, err := s.Generate(ctx, benchpack.RandomTokens(16, V, 3), gen); err != nil {
			return nil, err
		}
		gen.MaxNew = tokens + 1
		res, err := s.Generate(ctx, nil, gen)
		if err != nil {
			return nil, err
		}
		st := res.DecodeCache
		out.Tokens, out.Seconds, out.TokPerSec = res.DecodeTokens, res.Decode.Seconds(), res.DecodeTokPerSec()
		out.HitRate, out.BytesRead, out.BytesPerToken, out.Loads = st.HitRate(), st.BytesRead, res.BytesReadPerToken(), st.Loads
		out.ReadP50Ms, out.ReadP99Ms, out.Reads, out.DirectReads = ms(st.ReadP50), ms(st.ReadP99), st.Reads, st.DirectReads
		out.PeakRSS = res.PeakRSS
		out.StallSeconds = st.Stall.Seconds()
		if st.SpecTargets > 0 {
			out.SpecRecall = float64(st.SpecCorrect) / float64(st.SpecTargets)
		}
		out.SpecReads, out.SpecUseful, out.SpecCancelled = st.SpecReads, st.SpecUseful, st.SpecCancelled
		if res.DecodeTokens > 0 {
			out.SpecWastedPerToken = float64(st.SpecWastedBytes) / float64(res.DecodeTokens)
		}
	case "prefill":
		t0 := time.Now()
		if _, _, err := s.Feed(ctx, benchpack.RandomTokens(prompt, V, 5)); err != nil {
			return nil, err
		}
		el := time.Since(t0)
		st := r.Cache.Stats()
		out.Tokens, out.Seconds, out.TokPerSec = prompt, el.Seconds(), float64(prompt)/el.Seconds()
		out.HitRate, out.BytesRead, out.Loads = st.HitRate(), st.BytesRead, st.Loads
		out.ReadP50Ms, out.ReadP99Ms, out.Reads, out.DirectReads = ms(st.ReadP50), ms(st.ReadP99), st.Reads, st.DirectReads
		out.PeakRSS = runner.PeakRSS()
		out.StallSeconds = st.Stall.Seconds()
	default:
		return nil, fmt.Errorf("unknown child mode %q", kind)
	}
	out.PeakAllocated = r.Cache.Stats().PeakAllocated
	return out, nil
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

// spawn runs one measurement in a fresh process.
func spawn(args ...string) (*childResult, error) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("child %v: %w", args, err)
	}
	var res childResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("child %v: %w (%q)", args, err, out)
	}
	return &res, nil
}

type decodeRow struct {
	Label         string       `json:"label"`
	Load          string       `json:"loadavg_after_run"` // 1-minute load average right after the run
	Res           *childResult `json:"result"`
	BandwidthBps  float64      `json:"pread_bandwidth_bytes_per_sec"`
	IOLimitTokS   float64      `json:"io_limit_tok_per_sec"`
	RatioToLimit  float64      `json:"ratio_to_io_limit"`
	RSSOverBudget int64        `json:"rss_minus_dense_minus_budget"`
	RSSOverAlloc  int64        `json:"rss_minus_dense_minus_slots"`
	IOMs          float64      `json:"io_ms_per_token"`
	ComputeMs     float64      `json:"compute_ms_per_token"`
	TokenMs       float64      `json:"ms_per_token"`
	Overlap       float64      `json:"overlap"`
	// RatioToBound is decode tok/s over the better of the I/O limit and
	// the compute-only rate: what perfect overlap would reach.
	RatioToBound float64 `json:"ratio_to_min_io_compute"`
	// RatioToNeeded is decode tok/s over the I/O limit of the bytes read
	// less those read for wrong guesses: speculation judged by the reads
	// it needed, not by the ones it added.
	RatioToNeeded float64 `json:"ratio_to_io_limit_of_needed_bytes"`
}

func run(layers, vocab, tokens, prompt, rounds int, fracs []float64, ioName string, mode expertcache.IOMode, dir string, keep, asJSON bool) error {
	work := filepath.Join(dir, "qpack-bench-runner")
	pack := filepath.Join(work, fmt.Sprintf("%s-%dl-v%d.qpack", benchDims, layers, vocab))
	if !keep {
		defer os.RemoveAll(work)
	}
	if _, err := os.Stat(filepath.Join(pack, qpack.ManifestName)); err != nil || !keep {
		os.RemoveAll(work)
		if err := os.MkdirAll(work, 0o755); err != nil {
			return err
		}
		if err := benchpack.CheckRoom(work, benchDimsOf[benchDims].expertBytes(layers)); err != nil {
			return err
		}
		t0 := time.Now()
		cmd := exec.Command(os.Args[0], "-child", "write", "-model", pack, "-layers", fmt.Sprint(layers), "-vocab", fmt.Sprint(vocab), "-dims", benchDims)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("writing the model: %w", err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s in %.1fs\n", pack, time.Since(t0).Seconds())
	}
	c, err := qpack.Open(pack)
	if err != nil {
		return err
	}
	stride, E := c.Layout.ExpertStride, c.Layout.ExpertCount
	all := stride * int64(E) * int64(c.Layout.LayerCount)
	c.Close()
	if mode == expertcache.Direct && !expertcache.DirectAvailable(filepath.Join(pack, qpack.LayerFile(0))) {
		fmt.Fprintln(os.Stderr, "direct I/O is refused on this file system: measuring buffered reads")
		mode, ioName = expertcache.Buffered, "buffered"
	}
	readers := expertcache.DefaultReaders
	loadBefore := benchpack.LoadAvg()
	bw := func(seed uint64) (float64, error) {
		return benchpack.PreadBandwidth(pack, mode, readers, 3*time.Second, seed)
	}
	base := []string{"-model", pack, "-io", ioName, "-tokens", fmt.Sprint(tokens), "-prompt", fmt.Sprint(prompt)}

	// Every figure is the best of `rounds` runs, the configurations
	// alternating: on a shared machine the best run is the one least
	// disturbed by other work.
	var warm *childResult
	// The compute-only run holds every expert in memory: skipped where that
	// would take more than half of what is available.
	doWarm := all <= benchpack.MemAvailable()/2
	if !doWarm {
		fmt.Fprintf(os.Stderr, "skipping the compute-only run: %d MiB of experts, %d MiB of memory available\n", all>>20, benchpack.MemAvailable()>>20)
	}
	// Each budget runs without speculation and with the default (the
	// model's top-k guessed before each layer's mixer), back to back, the
	// bandwidth measured before, between and after.
	specs := []struct {
		label string
		arg   int
	}{{"no speculation", -1}, {"speculating", runner.DefaultSpeculate}}
	rows := make([]decodeRow, len(fracs)*len(specs))
	gains := make([][]float64, len(fracs)) // with ÷ without speculation, per round
	for round := range rounds {
		if doWarm {
			w, err := spawn(append([]string{"-child", "warm", "-budget", fmt.Sprint(all)}, base...)...)
			if err != nil {
				return err
			}
			if warm == nil || w.TokPerSec > warm.TokPerSec {
				warm = w
			}
		}
		for i, frac := range fracs {
			b := int64(float64(all) * frac)
			bws := make([]float64, len(specs)+1)
			if bws[0], err = bw(uint64(100*round + 10*i)); err != nil {
				return err
			}
			tps := make([]float64, len(specs))
			for j, sp := range specs {
				res, err := spawn(append([]string{"-child", "decode", "-budget", fmt.Sprint(b), "-speculate", fmt.Sprint(sp.arg)}, base...)...)
				if err != nil {
					return err
				}
				load := benchpack.LoadAvg()
				if bws[j+1], err = bw(uint64(100*round + 10*i + j + 1)); err != nil {
					return err
				}
				k := i*len(specs) + j
				if rows[k].Res == nil || res.TokPerSec > rows[k].Res.TokPerSec {
					rows[k] = decodeRow{Label: fmt.Sprintf("%.0f%%, %s", frac*100, sp.label), Load: load, Res: res, BandwidthBps: (bws[j] + bws[j+1]) / 2}
				}
				tps[j] = res.TokPerSec
				fmt.Fprintf(os.Stderr, "round %d: decode with %.0f%% of experts cached, %s: %.2f tok/s (load %s)\n", round+1, frac*100, sp.label, res.TokPerSec, load)
			}
			gains[i] = append(gains[i], tps[1]/tps[0])
		}
	}
	computeMs := 0.0
	if warm != nil {
		computeMs = 1e3 / warm.TokPerSec
	}
	for i := range rows {
		row, res := &rows[i], rows[i].Res
		if res.BytesPerToken > 0 {
			row.IOLimitTokS = row.BandwidthBps / res.BytesPerToken
			row.RatioToLimit = res.TokPerSec / row.IOLimitTokS
			// How much of the I/O time hid behind compute: serial would be
			// compute + io, perfect overlap max(compute, io).
			io := 1e3 / row.IOLimitTokS
			t := 1e3 / res.TokPerSec
			row.IOMs, row.ComputeMs, row.TokenMs = io, computeMs, t
			if warm != nil {
				row.Overlap = max(0, min(1, (computeMs+io-t)/min(computeMs, io)))
				row.RatioToBound = res.TokPerSec / min(row.IOLimitTokS, warm.TokPerSec)
			}
			row.RatioToNeeded = res.TokPerSec * (res.BytesPerToken - res.SpecWastedPerToken) / row.BandwidthBps
		}
		row.RSSOverBudget = res.PeakRSS - res.Dense - res.Budget
		row.RSSOverAlloc = res.PeakRSS - res.Dense - res.PeakAllocated
	}

	// Prefill: the same budget (15% of the experts) for all: in chunks
	// (the cache in scan mode, the default), in chunks with the recency
	// policy throughout, and token by token.
	pb := int64(float64(all) * 0.15)
	type preCfg struct {
		chunk  int
		noScan bool
	}
	cfgs := []preCfg{{runner.DefaultPrefillChunk, false}, {runner.DefaultPrefillChunk, true}, {1, false}}
	pre := make([]*childResult, len(cfgs))
	var speedups []float64 // chunked over token by token, within each round
	for round := range rounds {
		if prompt <= 0 {
			break
		}
		tps := make([]float64, len(cfgs))
		for i, cf := range cfgs {
			res, err := spawn(append([]string{"-child", "prefill", "-budget", fmt.Sprint(pb), "-chunk", fmt.Sprint(cf.chunk), fmt.Sprintf("-noscan=%v", cf.noScan)}, base...)...)
			if err != nil {
				return err
			}
			if pre[i] == nil || res.TokPerSec > pre[i].TokPerSec {
				pre[i] = res
			}
			tps[i] = res.TokPerSec
			fmt.Fprintf(os.Stderr, "round %d: prefill in chunks of %d (scan %v): %.2f tok/s, %d reads\n", round+1, cf.chunk, !cf.noScan, res.TokPerSec, res.Loads)
		}
		speedups = append(speedups, tps[0]/tps[2])
	}
	median := medianOf(speedups)

	loadAfter := benchpack.LoadAvg()
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		out := map[string]any{"dims": benchDimsOf[benchDims].label, "layers": layers, "vocab": vocab, "expert_stride": stride, "all_experts_bytes": all,
			"io": ioName, "readers": readers, "gomaxprocs": goruntime.GOMAXPROCS(0), "decode": rows, "warm": warm,
			"speculation_gain_rounds": gains, "loadavg_before": loadBefore, "loadavg_after": loadAfter}
		if prompt > 0 {
			out["prefill"], out["prefill_speedup_best"] = pre, pre[0].TokPerSec/pre[2].TokPerSec
			out["prefill_speedup_rounds"], out["prefill_speedup_median"] = speedups, median
		}
		return enc.Encode(out)
	}
	mib := func(n float64) string { return fmt.Sprintf("%.0f MiB", n/(1<<20)) }
	fmt.Printf("model: %d layers at %s per-layer dims, vocab %d, %d experts of %d B per layer (%s of experts), io %s, %d reads in flight, GOMAXPROCS %d\n",
		layers, benchDimsOf[benchDims].label, vocab, E, stride, mib(float64(all)), ioName, readers, goruntime.GOMAXPROCS(0))
	fmt.Printf("load average (1 min) before %s, after %s; best of %d rounds\n", loadBefore, loadAfter, rounds)
	fmt.Printf("\ndecode (%d tokens after 8 warm-up, temperature 1):\n", tokens)
	fmt.Printf("%-22s %5s %9s %8s %11s %8s %10s %11s %11s %8s %9s %8s %8s %11s %9s %10s\n", "cache", "load", "budget", "hit rate", "read/token", "guessed", "pread BW", "I/O limit", "decode", "vs limit", "vs needed", "vs bound", "overlap", "read p50/99", "peak RSS", "RSS-dense-B")
	for _, r := range rows {
		x := r.Res
		limit, ratio, needed := "-", "-", "-"
		if r.IOLimitTokS > 0 {
			limit, ratio, needed = fmt.Sprintf("%.2f tok/s", r.IOLimitTokS), fmt.Sprintf("%.2fx", r.RatioToLimit), fmt.Sprintf("%.2fx", r.RatioToNeeded)
		}
		guessed := "-"
		if x.Speculate > 0 {
			guessed = fmt.Sprintf("%.0f%%", 100*x.SpecRecall)
		}
		bound, overlap := "-", "-"
		if warm != nil {
			bound, overlap = fmt.Sprintf("%.2fx", r.RatioToBound), fmt.Sprintf("%.0f%%", 100*r.Overlap)
		}
		fmt.Printf("%-22s %5s %9s %7.1f%% %11s %8s %7.0f MB/s %11s %5.2f tok/s %8s %9s %8s %8s %5.1f/%-5.1f %9s %10s\n", r.Label, r.Load, mib(float64(x.Budget)), 100*x.HitRate,
			mib(x.BytesPerToken), guessed, r.BandwidthBps/1e6, limit, x.TokPerSec, ratio, needed, bound, overlap, x.ReadP50Ms, x.ReadP99Ms, mib(float64(x.PeakRSS)), mib(float64(r.RSSOverBudget)))
	}
	if warm != nil {
		fmt.Printf("%-22s %5s %9s %7.1f%% %11s %8s %10s %11s %5.2f tok/s (compute only: every expert cached before decoding), peak RSS %s\n", "all, preloaded", "",
			mib(float64(warm.Budget)), 100*warm.HitRate, mib(warm.BytesPerToken), "", "", "", warm.TokPerSec, mib(float64(warm.PeakRSS)))
	} else {
		fmt.Println("all, preloaded         - (skipped: the experts exceed half the memory available)")
	}
	fmt.Println("(I/O limit: pread bandwidth / bytes read per token; vs needed: against the I/O limit of the bytes read less those read for wrong guesses; vs bound: against the lower of the I/O limit and the compute-only rate, what perfect overlap would give; overlap: share of the shorter of compute and I/O time hidden behind the other)")
	fmt.Printf("(dense weights in RAM: %s; RSS-dense-B is peak RSS minus dense weights minus the cache budget)\n", mib(float64(rows[0].Res.Dense)))
	fmt.Println("(speculating: each layer's top-k experts guessed from the residual entering it and read during its attention/DeltaNet; guessed: share of the real experts guessed; hit rate and read/token include the guesses' reads)")
	for i, frac := range fracs {
		on := rows[i*len(specs)+1].Res
		fmt.Printf("speculation at %.0f%%: decode with / without, within each round %s, median %.2fx; %d reads ahead, %d useful, %d cancelled, %s per token read for wrong guesses\n",
			frac*100, fmtRatios(gains[i]), medianOf(gains[i]), on.SpecReads, on.SpecUseful, on.SpecCancelled, mib(on.SpecWastedPerToken))
	}
	if prompt <= 0 {
		return nil
	}
	fmt.Printf("\nprefill of %d tokens, cache %s, cold:\n", prompt, mib(float64(pb)))
	for _, p := range pre {
		label := fmt.Sprintf("chunks of %d", p.Chunk)
		switch {
		case p.Chunk == 1:
			label = "token by token"
		case p.NoScan:
			label += ", recency"
		default:
			label += ", scan"
		}
		fmt.Printf("  %-23s %7.2f tok/s (%6.1fs), %6d expert reads, %s read, hit rate %.1f%%\n", label, p.TokPerSec, p.Seconds, p.Loads, mib(float64(p.BytesRead)), 100*p.HitRate)
	}
	fmt.Printf("  scan policy: %.1f%% fewer expert reads than recency\n", 100*(1-float64(pre[0].Loads)/float64(pre[1].Loads)))
	fmt.Printf("  speedup of chunks (scan) over token by token: best runs %.2fx; within each round %s, median %.2fx (goal >= 4x)\n", pre[0].TokPerSec/pre[2].TokPerSec, fmtRatios(speedups), median)
	return nil
}

// benchDims names the per-layer dims measured (-dims).
var benchDims = "35b"

var benchDimsOf = map[string]struct {
	label string
	// write streams the container for layers and vocab to pack.
	write func(pack string, layers, vocab int) error
	// expertBytes is the routed experts' size on disk for layers.
	expertBytes func(layers int) int64
	tokenizer   string // the tiny model whose tokenizer.json goes along
}{
	"35b":      {"Qwen3.5/3.6-35B-A3B", benchpack.QwenWriter(synthetic.Real), benchpack.QwenExperts(synthetic.Real), "qwen3_5_moe-q4g32"},
	"397b":     {"Qwen3.5-397B-A17B", benchpack.QwenWriter(synthetic.Qwen397B), benchpack.QwenExperts(synthetic.Qwen397B), "qwen3_5_moe-q4g32"},
	"gemma26b": {"Gemma 4 26B-A4B", benchpack.WriteGemma, benchpack.GemmaExperts, "gemma4-q4g32"},
}

// writeModel generates the synthetic model and writes it as a container
// with a tokenizer (the tiny models'; the benchmark feeds token ids).
func writeModel(pack string, layers, vocab int) error {
	b := benchDimsOf[benchDims]
	return benchpack.WriteModel(b.write, b.tokenizer, pack, layers, vocab)
}

func sampleParams() sample.Params { return sample.Params{Temperature: 1, Seed: 42} }

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func fmtRatios(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2fx", x)
	}
	return strings.Join(parts, " ")
}

// parseFracs reads -fracs: comma-separated percentages in (0, 100].
func parseFracs(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0 && v <= 100) {
			return nil, fmt.Errorf("-fracs %q: %q is no percentage in (0, 100]", s, f)
		}
		out = append(out, v/100)
	}
	return out, nil
}
