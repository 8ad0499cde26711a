// Command repack measures `qpack repack` against baselines measured in the
// same run:
//
//   - local: a repack of a synthetic MLX checkpoint with real per-expert
//     dims (hidden 2048, moe_intermediate 512, 4-bit g64: 1,769,472 B per
//     expert) against `cp` of the same shards to the same disk (and cp
//     followed by sync, since the repack fsyncs what it writes). Goal: at
//     least 0.9x cp's throughput.
//   - memory: the peak RSS (VmHWM) of the repack process at two model
//     sizes. Goal: at most 128 MiB, and the same at both sizes.
//   - hub: a streaming repack from the fake Hub (hfhub/hubtest) with a cap
//     per connection, against a plain parallel download of the same bytes
//     with the same connections and cap (range reads to io.Discard). Goal:
//     at most 1.1x its wall time.
//
// Each contender runs in a child process (this binary re-executed), so its
// peak RSS is its own. Runs alternate, and the best of -rounds is kept.
// With -cold (root only) the page cache is dropped before each run;
// otherwise the source is read once first and every run sees it cached.
// The synthetic checkpoints are random bytes with valid headers; they and
// every output are deleted at the end.
//
//	go run ./bench/repack [-dir /tmp] [-layers 10] [-small-layers 4] [-rounds 2] [-cold] [-json]
//	    [-only-local] [-reuse] [-profile cpu.pprof] [-dir-connections N]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/safetensors"
)

const (
	hidden   = 2048
	inter    = 512
	bits     = 4
	group    = 64
	maxShard = 2 << 30
)

type childReport struct {
	Seconds  float64 `json:"seconds"`
	VmHWMKiB int64   `json:"vmhwm_kib"`
	Bytes    int64   `json:"bytes"` // source bytes read
	Error    string  `json:"error,omitempty"`
	CPU      float64 `json:"-"` // user + system seconds of the child (filled in by the parent)
}

func main() {
	child := flag.String("child", "", "internal: run one contender (repack, download)")
	dir := flag.String("dir", os.TempDir(), "work directory (source and outputs are created and deleted here)")
	layers := flag.Int("layers", 10, "layers of the large synthetic model (256 experts x 1,769,472 B each)")
	small := flag.Int("small-layers", 4, "layers of the small model (RSS comparison, Hub streaming)")
	experts := flag.Int("experts", 256, "experts per layer")
	rounds := flag.Int("rounds", 2, "rounds per contender (the fastest is kept)")
	cold := flag.Bool("cold", false, "drop the page cache before each run (needs root)")
	hubCaps := flag.String("hub-caps", "48000000,12000000", "per-connection bandwidth caps of the fake Hub to measure, bytes/s, comma separated")
	conns := flag.Int("connections", 8, "connections for the Hub benchmark")
	dirConns := flag.Int("dir-connections", 0, "concurrent range copies of the local repack (0: its default)")
	skipHub := flag.Bool("skip-hub", false, "skip the Hub benchmark")
	asJSON := flag.Bool("json", false, "print the results as JSON")
	reuse := flag.Bool("reuse", false, "keep the generated large checkpoint in -dir (qpack-bench-src-LxE) and reuse it on later runs")
	onlyLocal := flag.Bool("only-local", false, "measure only repack --from-dir against cp (no memory or Hub runs)")
	profile := flag.String("profile", "", "write a CPU profile of the last local repack to this file")
	// child arguments
	src := flag.String("src", "", "internal")
	out := flag.String("out", "", "internal")
	hubURL := flag.String("hub", "", "internal")
	repo := flag.String("repo", "", "internal")
	cpuprofile := flag.String("cpuprofile", "", "internal: write a CPU profile of a child")
	traceOut := flag.String("trace", "", "internal: write an execution trace of a child")
	flag.Parse()

	if *child == "gen" {
		n, err := generate(*out, *layers, *experts)
		fmt.Println(n, err)
		return
	}
	if *child != "" {
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err == nil {
				pprof.StartCPUProfile(f)
				defer pprof.StopCPUProfile()
			}
		}
		if *traceOut != "" {
			f, err := os.Create(*traceOut)
			if err == nil {
				trace.Start(f)
				defer trace.Stop()
			}
		}
		if *hubURL == "" {
			*conns = *dirConns
		}
		runChild(*child, *src, *out, *hubURL, *repo, *conns)
		return
	}
	var caps []int64
	for _, c := range strings.Split(*hubCaps, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(c), 10, 64)
		if err != nil || n <= 0 {
			fmt.Fprintln(os.Stderr, "bench/repack: bad -hub-caps entry", c)
			os.Exit(2)
		}
		caps = append(caps, n)
	}
	cfg := config{dir: *dir, layers: *layers, small: *small, experts: *experts, rounds: *rounds, cold: *cold, hubCaps: caps, conns: *conns,
		skipHub: *skipHub || *onlyLocal, onlyLocal: *onlyLocal, reuse: *reuse, profile: *profile, asJSON: *asJSON}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench/repack:", err)
		os.Exit(1)
	}
}

// ---- synthetic checkpoint ----

type spec struct {
	name  string
	dtype safetensors.DType
	shape []int64
}

func (s spec) size() int64 {
	n := int64(s.dtype.Size())
	for _, d := range s.shape {
		n *= d
	}
	return n
}

// q returns a 4-bit g64 quantized linear [out, in] (weight, scales, biases).
func q(name string, out, in int64, b int64) []spec {
	return []spec{
		{name + ".weight", safetensors.U32, []int64{out, in * b / 32}},
		{name + ".scales", safetensors.BF16, []int64{out, in / group}},
		{name + ".biases", safetensors.BF16, []int64{out, in / group}},
	}
}

func qe(name string, E, out, in int64) []spec {
	return []spec{
		{name + ".weight", safetensors.U32, []int64{E, out, in * bits / 32}},
		{name + ".scales", safetensors.BF16, []int64{E, out, in / group}},
		{name + ".biases", safetensors.BF16, []int64{E, out, in / group}},
	}
}

func layerSpecs(l int, E int64) []spec {
	p := fmt.Sprintf("model.layers.%d.", l)
	var s []spec
	s = append(s, spec{p + "input_layernorm.weight", safetensors.BF16, []int64{hidden}})
	s = append(s, spec{p + "post_attention_layernorm.weight", safetensors.BF16, []int64{hidden}})
	s = append(s, q(p+"linear_attn.in_proj_qkvz", 12288, hidden, bits)...)
	s = append(s, q(p+"linear_attn.out_proj", hidden, 4096, bits)...)
	s = append(s, q(p+"mlp.gate", E, hidden, 8)...)
	s = append(s, q(p+"mlp.shared_expert.gate_proj", inter, hidden, bits)...)
	s = append(s, q(p+"mlp.shared_expert.up_proj", inter, hidden, bits)...)
	s = append(s, q(p+"mlp.shared_expert.down_proj", hidden, inter, bits)...)
	s = append(s, qe(p+"mlp.switch_mlp.gate_proj", E, inter, hidden)...)
	s = append(s, qe(p+"mlp.switch_mlp.up_proj", E, inter, hidden)...)
	s = append(s, qe(p+"mlp.switch_mlp.down_proj", E, hidden, inter)...)
	return s
}

// generate writes a synthetic MLX checkpoint of the given layers into dir:
// config.json, shards of at most maxShard bytes and their index.
func generate(dir string, layers, experts int) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	E := int64(experts)
	var all []spec
	all = append(all, q("model.embed_tokens", 151936, hidden, bits)...)
	for l := 0; l < layers; l++ {
		all = append(all, layerSpecs(l, E)...)
	}
	all = append(all, spec{"model.norm.weight", safetensors.BF16, []int64{hidden}})
	all = append(all, q("lm_head", 151936, hidden, bits)...)
	// Split into shards.
	var shards [][]spec
	var cur []spec
	var curSize int64
	for _, s := range all {
		if curSize+s.size() > maxShard && len(cur) > 0 {
			shards = append(shards, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, s)
		curSize += s.size()
	}
	shards = append(shards, cur)
	weightMap := map[string]string{}
	var total int64
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		specs := make([]safetensors.Spec, len(sh))
		for k, s := range sh {
			specs[k] = safetensors.Spec{Name: s.name, DType: s.dtype, Shape: s.shape}
			weightMap[s.name] = name
			total += s.size()
		}
		err := safetensors.WriteFile(filepath.Join(dir, name), specs, map[string]string{"format": "mlx"}, func(k int, s safetensors.Spec) (io.Reader, error) {
			return io.LimitReader(rng, sh[k].size()), nil
		})
		if err != nil {
			return 0, err
		}
	}
	idx, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644); err != nil {
		return 0, err
	}
	quant := map[string]any{"group_size": group, "bits": bits, "mode": "affine"}
	for l := 0; l < layers; l++ {
		quant[fmt.Sprintf("model.layers.%d.mlp.gate", l)] = map[string]any{"group_size": group, "bits": 8}
	}
	cfg := map[string]any{
		"model_type": "qwen3_next", "architectures": []string{"Qwen3NextForCausalLM"},
		"num_hidden_layers": layers, "num_experts": experts, "num_experts_per_tok": 8,
		"hidden_size": hidden, "moe_intermediate_size": inter, "full_attention_interval": 4,
		"quantization": quant, "quantization_config": quant,
	}
	cb, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cb, 0o644); err != nil {
		return 0, err
	}
	return shardBytes(dir)
}

func shardBytes(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			st, err := os.Stat(filepath.Join(dir, e.Name()))
			if err != nil {
				return 0, err
			}
			n += st.Size()
		}
	}
	return n, nil
}

func shardPaths(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// ---- children ----

func vmHWM() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return -1
}

func runChild(kind, src, out, hub, repo string, conns int) {
	if os.Getenv("QPACK_BENCH_DEBUG") != "" {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	} else {
		slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	}
	ctx := context.Background()
	start := time.Now()
	var rep childReport
	var err error
	switch kind {
	case "repack":
		o := repack.Options{Output: out, Reserve: -1, ToolVersion: "bench"}
		if hub != "" {
			o.FromHF, o.Endpoint, o.Connections = repo, hub, conns
			o.Hub = hfhub.Options{Anonymous: true}
		} else {
			o.FromDir, o.Connections = src, conns
		}
		var res *repack.Result
		res, err = repack.Run(ctx, o)
		if res != nil {
			rep.Bytes = res.FetchedBytes
		}
	case "download":
		rep.Bytes, err = plainDownload(ctx, hub, repo, conns)
	default:
		err = fmt.Errorf("unknown child %q", kind)
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.VmHWMKiB = vmHWM()
	if err != nil {
		rep.Error = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(rep)
}

// plainDownload reads every safetensors file of repo with conns concurrent
// 32 MiB range requests and throws the bytes away: the network-bound
// floor of any streaming repack.
func plainDownload(ctx context.Context, hub, repo string, conns int) (int64, error) {
	c, err := hfhub.NewClient(hfhub.Options{Endpoint: hub, Anonymous: true})
	if err != nil {
		return 0, err
	}
	commit, err := c.Resolve(ctx, repo, "main")
	if err != nil {
		return 0, err
	}
	files, err := c.ListFiles(ctx, repo, commit)
	if err != nil {
		return 0, err
	}
	type job struct {
		f   *hfhub.RemoteFile
		off int64
		n   int64
	}
	var jobs []job
	for _, fi := range files {
		if !strings.HasSuffix(fi.Path, ".safetensors") {
			continue
		}
		f, err := c.OpenFile(ctx, repo, commit, fi.Path, hfhub.ReaderOptions{})
		if err != nil {
			return 0, err
		}
		for off := int64(0); off < f.Size(); off += repack.DefaultRangeSize {
			jobs = append(jobs, job{f, off, min(int64(repack.DefaultRangeSize), f.Size()-off)})
		}
	}
	var next atomic.Int64
	var total atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= len(jobs) {
					return
				}
				j := jobs[k]
				err := j.f.ReadRanges(ctx, []hfhub.Range{{Off: j.off, Len: j.n}}, 1, func(_ hfhub.Range, body io.Reader) error {
					n, err := io.Copy(io.Discard, body)
					total.Add(n)
					return err
				})
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return total.Load(), first
}

// ---- parent ----

type figure struct {
	Name     string  `json:"name"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	MBps     float64 `json:"mb_per_s"`
	VmHWMMiB float64 `json:"vmhwm_mib,omitempty"`
	CPU      float64 `json:"cpu_s,omitempty"` // user + system seconds of the fastest round's process
	Ratio    float64 `json:"ratio,omitempty"` // throughput vs baseline (local), wall vs baseline (hub)
	Note     string  `json:"note,omitempty"`
}

func child(args ...string) (childReport, error) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	var rep childReport
	if cmd.ProcessState != nil {
		rep.CPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		return rep, fmt.Errorf("child %v: %v (output %q)", args, err, out)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("child %v: %s", args, rep.Error)
	}
	return rep, err
}

func dropCaches() error {
	exec.Command("sync").Run()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200)
}

func warm(paths []string) {
	for _, p := range paths {
		f, err := os.Open(p)
		if err == nil {
			io.Copy(io.Discard, f)
			f.Close()
		}
	}
}

// timeCmd runs a command and returns its wall and CPU (user + system)
// seconds.
func timeCmd(name string, args ...string) (wall, cpu float64, err error) {
	start := time.Now()
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	err = cmd.Run()
	wall = time.Since(start).Seconds()
	if cmd.ProcessState != nil {
		cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	return wall, cpu, err
}

type config struct {
	dir                    string
	layers, small, experts int
	rounds                 int
	cold                   bool
	hubCaps                []int64
	conns                  int
	skipHub, onlyLocal     bool
	reuse                  bool
	profile                string
	asJSON                 bool
}

func run(c config) error {
	dir, layers, small, experts, rounds, cold := c.dir, c.layers, c.small, c.experts, c.rounds, c.cold
	work, err := os.MkdirTemp(dir, "qpack-bench-repack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	var figs []figure
	prep := func(paths []string) string {
		if cold {
			if err := dropCaches(); err != nil {
				logf("cannot drop caches (%v): warm cache instead", err)
				cold = false
			} else {
				return "cold cache"
			}
		}
		warm(paths)
		return "warm cache"
	}

	// 1. Local: repack vs cp on the large model.
	big := filepath.Join(work, "big")
	var bigBytes int64
	if c.reuse {
		big = filepath.Join(dir, fmt.Sprintf("qpack-bench-src-%dx%d", layers, experts))
		if _, err := os.Stat(filepath.Join(big, "config.json")); err == nil {
			bigBytes, err = shardBytes(big)
			if err != nil {
				return err
			}
			logf("reusing %s: %.2f GB of shards", big, float64(bigBytes)/1e9)
		}
	}
	if bigBytes == 0 {
		t0 := time.Now()
		bigBytes, err = generate(big, layers, experts)
		if err != nil {
			return err
		}
		logf("generated %d layers x %d experts: %.2f GB of shards in %.1fs", layers, experts, float64(bigBytes)/1e9, time.Since(t0).Seconds())
	}
	shards := shardPaths(big)
	best := map[string]float64{}
	cpu := map[string]float64{}
	var bigHWM int64
	var cache string
	for r := 0; r < rounds; r++ {
		// cp
		dst := filepath.Join(work, "cp")
		os.MkdirAll(dst, 0o755)
		cache = prep(shards)
		sec, cpSec, err := timeCmd("cp", append(append([]string{}, shards...), dst)...)
		if err != nil {
			return err
		}
		syncStart := time.Now()
		exec.Command("sync").Run()
		syncSec := sec + time.Since(syncStart).Seconds()
		os.RemoveAll(dst)
		exec.Command("sync").Run()
		logf("round %d: cp %.2fs (CPU %.2fs), cp+sync %.2fs", r, sec, cpSec, syncSec)
		if old, ok := best["cp"]; !ok || sec < old {
			cpu["cp"] = cpSec
		}
		upd(best, "cp", sec)
		upd(best, "cp+sync", syncSec)
		// repack
		out := filepath.Join(work, "big.qpack")
		prep(shards)
		start := time.Now()
		args := []string{"-child", "repack", "-src", big, "-out", out}
		if c.profile != "" && r == rounds-1 {
			args = append(args, "-cpuprofile", c.profile)
		}
		rep, err := child(args...)
		if err != nil {
			return err
		}
		wall := time.Since(start).Seconds()
		if _, err := qpack.Open(out); err != nil {
			return fmt.Errorf("the benchmark's container does not open: %w", err)
		}
		os.RemoveAll(out)
		exec.Command("sync").Run()
		logf("round %d: repack %.2fs (in-process %.2fs, CPU %.2fs = %.2f ns/B), VmHWM %d KiB", r, wall, rep.Seconds, rep.CPU, rep.CPU/float64(bigBytes)*1e9, rep.VmHWMKiB)
		if old, ok := best["repack"]; !ok || wall < old {
			cpu["repack"] = rep.CPU
		}
		upd(best, "repack", wall)
		bigHWM = max(bigHWM, rep.VmHWMKiB)
	}
	mbps := func(s float64) float64 { return float64(bigBytes) / s / 1e6 }
	figs = append(figs,
		figure{Name: "cp (baseline)", Bytes: bigBytes, Seconds: best["cp"], MBps: mbps(best["cp"]), CPU: cpu["cp"], Note: cache},
		figure{Name: "cp + sync (baseline)", Bytes: bigBytes, Seconds: best["cp+sync"], MBps: mbps(best["cp+sync"]), Note: cache},
		figure{Name: "repack --from-dir", Bytes: bigBytes, Seconds: best["repack"], MBps: mbps(best["repack"]),
			VmHWMMiB: float64(bigHWM) / 1024, CPU: cpu["repack"], Ratio: best["cp"] / best["repack"],
			Note: fmt.Sprintf("%s; ratio vs cp; vs cp+sync %.2f", cache, best["cp+sync"]/best["repack"])},
	)
	if !c.reuse {
		os.RemoveAll(big)
	}
	if c.onlyLocal {
		return printFigures(figs, c.asJSON)
	}

	// 2. Memory at a second size (and the Hub source).
	sm := filepath.Join(work, "small")
	smallBytes, err := generate(sm, small, experts)
	if err != nil {
		return err
	}
	logf("generated %d layers: %.2f GB", small, float64(smallBytes)/1e9)
	out := filepath.Join(work, "small.qpack")
	prep(shardPaths(sm))
	start := time.Now()
	rep, err := child("-child", "repack", "-src", sm, "-out", out)
	if err != nil {
		return err
	}
	os.RemoveAll(out)
	figs = append(figs, figure{Name: fmt.Sprintf("repack --from-dir, %d layers", small), Bytes: smallBytes, Seconds: time.Since(start).Seconds(),
		MBps: float64(smallBytes) / time.Since(start).Seconds() / 1e6, VmHWMMiB: float64(rep.VmHWMKiB) / 1024,
		Note: fmt.Sprintf("peak RSS vs %d layers: %.2fx", layers, float64(rep.VmHWMKiB)/float64(bigHWM))})

	// 3. Hub streaming vs a plain parallel download, same caps.
	for _, hubCap := range c.hubCaps {
		if c.skipHub {
			break
		}
		if err := hubBench(sm, out, smallBytes, hubCap, c.conns, rounds, &figs, logf); err != nil {
			return err
		}
	}
	return printFigures(figs, c.asJSON)
}

func printFigures(figs []figure, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(figs)
	}
	fmt.Printf("%-40s %10s %9s %9s %9s %10s %7s  %s\n", "run", "GB", "s", "MB/s", "CPU s", "VmHWM MiB", "ratio", "note")
	for _, f := range figs {
		ratio := ""
		if f.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f", f.Ratio)
		}
		hwm := ""
		if f.VmHWMMiB > 0 {
			hwm = fmt.Sprintf("%.1f", f.VmHWMMiB)
		}
		cpu := ""
		if f.CPU > 0 {
			cpu = fmt.Sprintf("%.2f", f.CPU)
		}
		fmt.Printf("%-40s %10.2f %9.2f %9.0f %9s %10s %7s  %s\n", f.Name, float64(f.Bytes)/1e9, f.Seconds, f.MBps, cpu, hwm, ratio, f.Note)
	}
	return nil
}

func hubBench(sm, out string, smallBytes, hubCap int64, conns, rounds int, figs *[]figure, logf func(string, ...any)) error {
	s, err := hubtest.NewServer(hubtest.Config{BandwidthPerConn: hubCap})
	if err != nil {
		return err
	}
	defer s.Close()
	var files []hubtest.File
	ents, _ := os.ReadDir(sm)
	for _, e := range ents {
		p := filepath.Join(sm, e.Name())
		if strings.HasSuffix(e.Name(), ".safetensors") {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			st, _ := f.Stat()
			files = append(files, hubtest.File{Path: e.Name(), Content: fileContent{f, st.Size()}, LFS: true})
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, hubtest.File{Path: e.Name(), Data: data})
	}
	t0 := time.Now()
	s.MustAddRepo("bench/synthetic", files, hubtest.RepoOptions{})
	logf("fake Hub ready in %.1fs (cap %d MB/s per connection, %d connections)", time.Since(t0).Seconds(), hubCap/1e6, conns)
	best := map[string]float64{}
	var hwm int64
	for r := 0; r < rounds; r++ {
		start := time.Now()
		if _, err := child("-child", "download", "-hub", s.URL, "-repo", "bench/synthetic", "-connections", strconv.Itoa(conns)); err != nil {
			return err
		}
		dl := time.Since(start).Seconds()
		start = time.Now()
		rep, err := child("-child", "repack", "-hub", s.URL, "-repo", "bench/synthetic", "-out", out, "-connections", strconv.Itoa(conns))
		if err != nil {
			return err
		}
		rp := time.Since(start).Seconds()
		os.RemoveAll(out)
		logf("round %d: plain download %.2fs, streaming repack %.2fs (VmHWM %d KiB)", r, dl, rp, rep.VmHWMKiB)
		upd(best, "dl", dl)
		upd(best, "rp", rp)
		hwm = max(hwm, rep.VmHWMKiB)
	}
	note := fmt.Sprintf("%d connections capped at %d MB/s each", conns, hubCap/1e6)
	*figs = append(*figs,
		figure{Name: "plain parallel download (baseline)", Bytes: smallBytes, Seconds: best["dl"], MBps: float64(smallBytes) / best["dl"] / 1e6, Note: note},
		figure{Name: "repack --from-hf (fake Hub)", Bytes: smallBytes, Seconds: best["rp"], MBps: float64(smallBytes) / best["rp"] / 1e6,
			VmHWMMiB: float64(hwm) / 1024, Ratio: best["rp"] / best["dl"], Note: note + "; ratio = wall time vs baseline"},
	)
	return nil
}

func upd(m map[string]float64, k string, v float64) {
	if old, ok := m[k]; !ok || v < old {
		m[k] = v
	}
}

type fileContent struct {
	f    *os.File
	size int64
}

func (c fileContent) ReadAt(p []byte, off int64) (int, error) { return c.f.ReadAt(p, off) }
func (c fileContent) Size() int64                             { return c.size }
