// Command verify measures `qpack verify-install` (package verify) against
// baselines run in the same process, on a synthetic container of a few GB
// that it generates (a Qwen3-Next-shaped MLX 4-bit checkpoint: 512 experts
// of 1,769,472 B per layer, repacked by package repack) and deletes at the
// end.
//
// Digest check: against `b3sum --num-threads 2` (Debian package b3sum) over
// the same files, with a cold page cache (the files' pages dropped with
// posix_fadvise DONTNEED, or all caches with -drop-all, which needs root)
// and with a warm one (the files read once just before). It reports wall
// time, bytes per second, the ratio b3sum time / verify time, and the hash
// rate per core (bytes / CPU seconds). Both modes are measured: the default
// (layer files checked by their expert digests) and --full (their
// whole-file digests too, in the same read).
//
// Deep check (verify-install --deep), cold, against plain reads of the
// same files with the same parallelism:
//
//   - from a local directory: the whole run, with the digest pass and the
//     deep check together (the default: they share the container reads),
//     against a plain read of the source and against a plain read of the
//     source and the container (the bytes the run must read); then the
//     passes in turn (DeepOptions.Window -1, as before), whole run and
//     deep phase alone. The rounds of these lines alternate.
//   - from the fake Hub over loopback with a per-connection bandwidth cap
//     that stands for a network link: the whole run against a plain read of
//     the source through the same client.
//
// Each figure is the fastest of -rounds rounds: on a shared machine the
// minimum is the figure least disturbed by other work.
//
// -work DIR generates into DIR once and reuses it; -only deep runs the
// local deep lines alone; -cpuprofile writes a CPU profile of them.
//
//	go run ./bench/verify [-gb 3] [-rounds 3] [-dir /tmp] [-keep] [-drop-all] [-json]
//	    [-work DIR] [-only deep] [-cpuprofile FILE] [-no-hub] [-hub-bw B]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/safetensors"
	"github.com/qpack-go/qpack/verify"
)

type figure struct {
	Name      string  `json:"name"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	GBps      float64 `json:"gb_per_s"`
	CPU       float64 `json:"cpu_seconds,omitempty"`
	PerCoreGB float64 `json:"hash_gb_per_cpu_s,omitempty"`
	Ratio     float64 `json:"ratio,omitempty"` // baseline seconds / this seconds
	Baseline  string  `json:"baseline,omitempty"`
}

var (
	gb      = flag.Float64("gb", 3, "approximate container size in GB")
	rounds  = flag.Int("rounds", 3, "rounds per figure (the fastest is kept)")
	dirFlag = flag.String("dir", os.TempDir(), "where to generate the checkpoint and container")
	keep    = flag.Bool("keep", false, "keep the generated files")
	dropAll = flag.Bool("drop-all", false, "drop all caches through /proc/sys/vm/drop_caches (root) instead of the files' pages")
	asJSON  = flag.Bool("json", false, "print JSON")
	hubBW   = flag.Int64("hub-bw", 24<<20, "fake Hub bandwidth per connection, bytes/s (0: unlimited)")
	skipHub = flag.Bool("no-hub", false, "skip the Hub deep figure")
	workDir = flag.String("work", "", "generate into this directory, or reuse what an earlier run generated there (kept)")
	only    = flag.String("only", "", `"deep": only the local deep figures`)
	cpuProf = flag.String("cpuprofile", "", "write a CPU profile of the deep runs (local source) to this file")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/verify:", err)
		os.Exit(1)
	}
}

func run() error {
	work := *workDir
	reuse := false
	if work == "" {
		var err error
		if work, err = os.MkdirTemp(*dirFlag, "qpack-bench-verify-"); err != nil {
			return err
		}
		if !*keep {
			defer os.RemoveAll(work)
		}
	} else {
		_, err := os.Stat(filepath.Join(work, "done"))
		reuse = err == nil
	}
	src, dst := filepath.Join(work, "ckpt"), filepath.Join(work, "bench.qpack")
	t0 := time.Now()
	if !reuse {
		os.RemoveAll(src)
		os.RemoveAll(dst)
		if err := generate(src); err != nil {
			return err
		}
		if _, err := repack.Run(context.Background(), repack.Options{FromDir: src, Output: dst, Reserve: -1, ToolVersion: "bench"}); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(work, "done"), nil, 0o644); err != nil {
			return err
		}
	}
	c, err := qpack.Open(dst)
	if err != nil {
		return err
	}
	var files []string
	var total int64
	for _, p := range c.Manifest.SortedFiles() {
		files = append(files, c.Path(p))
		total += c.Manifest.Files[p]
	}
	c.Close()
	shards, _ := filepath.Glob(filepath.Join(src, "*.safetensors"))
	var srcBytes int64
	for _, s := range shards {
		st, _ := os.Stat(s)
		srcBytes += st.Size()
	}
	syncFiles(append(files, shards...))
	logf("generated %.2f GB container, %.2f GB source in %.0f s; GOMAXPROCS %d", float64(total)/1e9, float64(srcBytes)/1e9, time.Since(t0).Seconds(), runtime.GOMAXPROCS(0))

	var out []figure
	b3, err := exec.LookPath("b3sum")
	if err != nil {
		logf("b3sum is not installed (Debian: apt-get install b3sum): digest figures have no baseline")
	}
	for _, warm := range []bool{false, true} {
		if *only == "deep" {
			break
		}
		label := map[bool]string{false: "cold", true: "warm"}[warm]
		prepare := func() {
			if warm {
				readAll(files)
			} else {
				drop(append(files, shards...))
			}
		}
		var base *figure
		if b3 != "" {
			base = best(func() figure {
				prepare()
				return timeB3sum(b3, files, total)
			})
			base.Name = "b3sum --num-threads 2 (" + label + ")"
			out = append(out, *base)
		}
		for _, full := range []bool{false, true} {
			name := "verify-install (" + label + ")"
			if full {
				name = "verify-install --full (" + label + ")"
			}
			f := best(func() figure {
				prepare()
				return timeVerify(dst, verify.Options{Full: full}, total)
			})
			f.Name = name
			if base != nil {
				f.Ratio, f.Baseline = base.Seconds/f.Seconds, base.Name
			}
			out = append(out, *f)
		}
	}

	// Deep, local source, cold; the rounds of the four lines alternate.
	if *cpuProf != "" {
		pf, err := os.Create(*cpuProf)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(pf)
	}
	openDir := func() (*verify.Source, error) { return verify.OpenDirSource(src) }
	all := append(append([]string(nil), files...), shards...)
	var plain, both, merged, separate, phase figure
	keepMin := func(to *figure, f figure, first bool) {
		if first || f.Seconds < to.Seconds {
			*to = f
		}
	}
	for i := 0; i < *rounds; i++ {
		drop(all)
		keepMin(&plain, timePlainRead(shards, srcBytes), i == 0)
		drop(all)
		keepMin(&both, timePlainRead(all, srcBytes+total), i == 0)
		drop(all)
		w, _ := timeDeep(dst, openDir, 0, srcBytes, total)
		keepMin(&merged, w, i == 0)
		drop(all)
		w, p := timeDeep(dst, openDir, -1, srcBytes, total)
		keepMin(&separate, w, i == 0)
		keepMin(&phase, p, i == 0)
	}
	if *cpuProf != "" {
		pprof.StopCPUProfile()
	}
	plain.Name = "plain read of the source (cold)"
	both.Name = "plain read of the source and the container (cold)"
	merged.Name = "verify-install --deep, whole run (local source, cold)"
	merged.Ratio, merged.Baseline = plain.Seconds/merged.Seconds, plain.Name
	mergedBoth := merged
	mergedBoth.Name = "  the same, vs reading both"
	mergedBoth.Ratio, mergedBoth.Baseline = both.Seconds/merged.Seconds, both.Name
	separate.Name = "verify-install --deep, passes in turn (Window -1), whole run"
	separate.Ratio, separate.Baseline = both.Seconds/separate.Seconds, both.Name
	phase.Name = "  its deep phase alone"
	phase.Ratio, phase.Baseline = plain.Seconds/phase.Seconds, plain.Name
	out = append(out, plain, both, merged, mergedBoth, separate, phase)

	if !*skipHub && *only != "deep" {
		hf, err := hubFigures(src, dst, shards, srcBytes, files)
		if err != nil {
			return err
		}
		out = append(out, hf...)
	}

	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	fmt.Printf("%-62s %9s %9s %8s %11s %7s\n", "", "seconds", "GB/s", "CPU s", "GB/CPU-s", "ratio")
	for _, f := range out {
		cpu, per, ratio := "", "", ""
		if f.CPU > 0 {
			cpu = fmt.Sprintf("%.2f", f.CPU)
		}
		if f.PerCoreGB > 0 {
			per = fmt.Sprintf("%.2f", f.PerCoreGB)
		}
		if f.Ratio > 0 {
			ratio = fmt.Sprintf("%.2fx", f.Ratio)
		}
		fmt.Printf("%-62s %9.2f %9.2f %8s %11s %7s\n", f.Name, f.Seconds, f.GBps, cpu, per, ratio)
	}
	fmt.Println("ratio: baseline seconds / these seconds (above 1: faster than the baseline); baselines are the b3sum line of the same cache state, and for --deep the plain read lines")
	fmt.Println("--deep must read the source and the container: on one disk, \"vs reading both\" is the ratio that can reach 1")
	return nil
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func best(fn func() figure) *figure {
	var b figure
	for i := 0; i < *rounds; i++ {
		f := fn()
		if i == 0 || f.Seconds < b.Seconds {
			b = f
		}
	}
	return &b
}

func mk(bytes int64, d time.Duration, cpu time.Duration) figure {
	f := figure{Bytes: bytes, Seconds: d.Seconds(), GBps: float64(bytes) / d.Seconds() / 1e9}
	if cpu > 0 {
		f.CPU = cpu.Seconds()
		f.PerCoreGB = float64(bytes) / cpu.Seconds() / 1e9
	}
	return f
}

func timeB3sum(b3 string, files []string, total int64) figure {
	cmd := exec.Command(b3, append([]string{"--num-threads", "2", "--"}, files...)...)
	cmd.Stdout = io.Discard
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		logf("b3sum: %v", err)
	}
	d := time.Since(start)
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return mk(total, d, cpu)
}

func timeVerify(dir string, o verify.Options, total int64) figure {
	runtime.GC()
	c0, start := selfCPU(), time.Now()
	r, err := verify.Verify(context.Background(), dir, o)
	d, cpu := time.Since(start), selfCPU()-c0
	if err != nil || r.Status != verify.StatusOK {
		logf("verify: %v %s", err, r.Status)
	}
	return mk(total, d, cpu)
}

// timeDeep runs Verify with a deep check and returns the whole run (the
// bytes of the source and the container) and its deep phase (the bytes of
// the source).
func timeDeep(dir string, open func() (*verify.Source, error), window, srcBytes, total int64) (whole, phase figure) {
	s, err := open()
	if err != nil {
		logf("deep: %v", err)
		return figure{Seconds: 1e9}, figure{Seconds: 1e9}
	}
	defer s.Close()
	runtime.GC()
	c0, start := selfCPU(), time.Now()
	r, err := verify.Verify(context.Background(), dir, verify.Options{Deep: &verify.DeepOptions{Source: s, Window: window}})
	d, cpu := time.Since(start), selfCPU()-c0
	if err != nil || r.Status != verify.StatusOK || r.Deep == nil {
		logf("deep: %v %s", err, r.Status)
		return figure{Seconds: 1e9}, figure{Seconds: 1e9}
	}
	whole = mk(srcBytes+total, d, cpu)
	whole.PerCoreGB = 0
	return whole, mk(srcBytes, time.Duration(r.Deep.Seconds*float64(time.Second)), 0)
}

// timePlainRead reads the files sequentially in 8 MiB blocks, as many at
// once as the deep check streams shards (GOMAXPROCS, at most 4).
func timePlainRead(files []string, total int64) figure {
	start := time.Now()
	par := min(runtime.GOMAXPROCS(0), 4)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, p := range files {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f, err := os.Open(p)
			if err != nil {
				logf("%v", err)
				return
			}
			defer f.Close()
			buf := make([]byte, 8<<20)
			for {
				if _, err := f.Read(buf); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return mk(total, time.Since(start), 0)
}

func readAll(files []string) {
	buf := make([]byte, 8<<20)
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		for {
			if _, err := f.Read(buf); err != nil {
				break
			}
		}
		f.Close()
	}
}

func syncFiles(files []string) {
	for _, p := range files {
		if f, err := os.Open(p); err == nil {
			f.Sync()
			f.Close()
		}
	}
	syncAll()
}

func drop(files []string) {
	if *dropAll {
		syncAll()
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err == nil {
			return
		}
		logf("cannot drop all caches (not root?): dropping the files' pages instead")
		*dropAll = false
	}
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		dropFile(f)
		f.Close()
	}
}

// generate writes a Qwen3-Next-shaped MLX 4-bit checkpoint: 512 experts
// (hidden 2048, expert intermediate 512) per layer, as many layers as make
// about -gb GB, one shard per layer plus one for the dense tensors, filled
// with pseudo-random bytes.
func generate(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	const E, H, I = 512, 2048, 512
	const stride = 1769472
	dense := int64(128 << 20)
	layers := max(1, int((*gb*1e9-float64(dense))/float64(E*stride)+0.5))
	q := map[string]any{"group_size": 64, "bits": 4, "mode": "affine"}
	cfg := map[string]any{
		"architectures": []string{"Qwen3NextForCausalLM"}, "model_type": "qwen3_next",
		"hidden_size": H, "moe_intermediate_size": I, "num_experts": E, "num_experts_per_tok": 10,
		"num_hidden_layers": layers, "full_attention_interval": 4, "decoder_sparse_step": 1, "mlp_only_layers": []int{},
		"shared_expert_intermediate_size": 512, "vocab_size": 151936, "quantization": q, "quantization_config": q,
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{1})
	fill := func(_ int, _ safetensors.Spec) (io.Reader, error) { return rng, nil }
	limited := func(specs []safetensors.Spec) func(int, safetensors.Spec) (io.Reader, error) {
		return func(i int, s safetensors.Spec) (io.Reader, error) {
			n := int64(s.DType.Size())
			for _, d := range s.Shape {
				n *= d
			}
			r, _ := fill(i, s)
			return io.LimitReader(r, n), nil
		}
	}
	weightMap := map[string]string{}
	var shardNames []string
	write := func(name string, specs []safetensors.Spec) error {
		for _, s := range specs {
			weightMap[s.Name] = name
		}
		shardNames = append(shardNames, name)
		return safetensors.WriteFile(filepath.Join(dir, name), specs, map[string]string{"format": "mlx"}, limited(specs))
	}
	n := layers + 1
	name := func(i int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n) }
	rows := dense / (H / 8 * 4) // U32 [rows, H/8]
	if err := write(name(0), []safetensors.Spec{
		{Name: "model.embed_tokens.weight", DType: safetensors.U32, Shape: []int64{rows, H / 8}},
		{Name: "model.norm.weight", DType: safetensors.BF16, Shape: []int64{H}},
	}); err != nil {
		return err
	}
	for l := 0; l < layers; l++ {
		var specs []safetensors.Spec
		for _, proj := range []string{"gate_proj", "up_proj", "down_proj"} {
			out, in := int64(I), int64(H)
			if proj == "down_proj" {
				out, in = H, I
			}
			base := fmt.Sprintf("model.layers.%d.mlp.switch_mlp.%s.", l, proj)
			specs = append(specs,
				safetensors.Spec{Name: base + "weight", DType: safetensors.U32, Shape: []int64{E, out, in / 8}},
				safetensors.Spec{Name: base + "scales", DType: safetensors.BF16, Shape: []int64{E, out, in / 64}},
				safetensors.Spec{Name: base + "biases", DType: safetensors.BF16, Shape: []int64{E, out, in / 64}})
		}
		specs = append(specs, safetensors.Spec{Name: fmt.Sprintf("model.layers.%d.input_layernorm.weight", l), DType: safetensors.BF16, Shape: []int64{H}})
		if err := write(name(l+1), specs); err != nil {
			return err
		}
	}
	ix, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap}, "", "  ")
	return os.WriteFile(filepath.Join(dir, safetensors.IndexFile), ix, 0o644)
}

// fileContent serves a file to the fake Hub.
type fileContent struct {
	*os.File
	size int64
}

func (f fileContent) Size() int64 { return f.size }

// hubFigures serves the checkpoint from the fake Hub (loopback, with a
// bandwidth cap per connection) and compares the deep phase with a plain
// read of the same shards through the same client, same connections.
func hubFigures(src, dst string, shards []string, srcBytes int64, files []string) ([]figure, error) {
	hub, err := hubtest.NewServer(hubtest.Config{BandwidthPerConn: *hubBW})
	if err != nil {
		return nil, err
	}
	defer hub.Close()
	var hf []hubtest.File
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		f, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		st, _ := f.Stat()
		hf = append(hf, hubtest.File{Path: e.Name(), Content: fileContent{f, st.Size()}, LFS: strings.HasSuffix(e.Name(), ".safetensors")})
	}
	const repo = "bench/synthetic"
	hub.MustAddRepo(repo, hf, hubtest.RepoOptions{})
	client, err := hfhub.NewClient(hfhub.Options{Endpoint: hub.URL, Anonymous: true})
	if err != nil {
		return nil, err
	}
	open := func() (*verify.Source, error) {
		return verify.OpenHubSource(context.Background(), client, repo, "main", hfhub.ReaderOptions{})
	}
	// Plain read: every shard in 16 MiB blocks, 8 at a time per shard, as
	// many shards at once as the deep check streams.
	plain := best(func() figure {
		drop(append(files, shards...))
		s, err := open()
		if err != nil {
			logf("hub: %v", err)
			return figure{Seconds: 1e9}
		}
		start := time.Now()
		var wg sync.WaitGroup
		sem := make(chan struct{}, min(runtime.GOMAXPROCS(0), 4))
		errc := make(chan error, 1)
		for _, sh := range s.Shards {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				rf, err := client.OpenFile(context.Background(), repo, s.Commit, sh.Name, hfhub.ReaderOptions{})
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					return
				}
				const bs = 16 << 20
				blocks := make(chan int64)
				var bw sync.WaitGroup
				for i := 0; i < 8; i++ {
					bw.Add(1)
					go func() {
						defer bw.Done()
						buf := make([]byte, bs)
						for off := range blocks {
							n := min(bs, rf.Size()-off)
							if _, err := rf.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
								select {
								case errc <- err:
								default:
								}
							}
						}
					}()
				}
				for off := int64(0); off < rf.Size(); off += bs {
					blocks <- off
				}
				close(blocks)
				bw.Wait()
			}()
		}
		wg.Wait()
		select {
		case err := <-errc:
			logf("hub plain read: %v", err)
		default:
		}
		return mk(srcBytes, time.Since(start), 0)
	})
	plain.Name = fmt.Sprintf("plain read of the source from the fake Hub (%d MiB/s per conn)", *hubBW>>20)
	deep := best(func() figure {
		drop(append(files, shards...))
		_, p := timeDeep(dst, open, 0, srcBytes, 0)
		return p
	})
	deep.Name = "verify-install --deep, whole run (fake Hub source)"
	deep.Ratio, deep.Baseline = plain.Seconds/deep.Seconds, plain.Name
	return []figure{*plain, *deep}, nil
}
