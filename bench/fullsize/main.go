// Command fullsize runs the user's path at a real model's full size on this
// machine, with nothing but the container on disk:
//
//  1. the fake Hub (hfhub/hubtest) serves a synthetic MLX checkpoint at the
//     real config, tensor names and ~5 GB sharding of Qwen3.6-35B-A3B-4bit
//     (19.5 GB) or Qwen3-Next-80B-A3B-Instruct-4bit (44.8 GB), generated on
//     the fly from (seed, shard, offset) by hfhub/hubtest/synthmlx, each
//     shard's sha256 computed once and cached in bench/fullsize/.cache;
//  2. `qpack repack --from-hf` (the real binary, a real HTTP client on
//     loopback) builds the .qpack, against a plain parallel download of the
//     same bytes to nowhere with the same connections (wall-time ratio, goal
//     ≤ 1.05x) and with its peak RSS (goal ≤ 128 MiB);
//  3. `qpack verify-install` with the container's pages dropped, against
//     `b3sum --num-threads 2` over the same files, pages dropped too
//     (ratio b3sum time / verify time, goal ≥ 0.9);
//  4. `qpack generate` of a ~512-token prompt and 64 tokens at each expert
//     cache budget (direct I/O), against the I/O limit measured right before
//     and after it (whole expert blobs read at random with as many readers
//     as the model's top-k: bandwidth ÷ bytes read per token), with its peak
//     RSS against the dense weights plus the budget.
//
// Disk space is checked first; the container is deleted at the end unless
// -keep. Every child's peak RSS comes from wait4's rusage.
//
//	go run ./bench/fullsize [-model qwen3.6-35b|qwen3-next-80b] [-dir /var/tmp] [-caches 2GiB,4GiB]
//	    [-prompt 512] [-tokens 64] [-connections 8] [-keep] [-layers N] [-json]
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/hfhub/hubtest/synthmlx"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/tokenizer"
)

var (
	//go:embed configs/qwen3.6-35b-a3b-4bit.json
	qwen36Config []byte
	//go:embed configs/qwen3-next-80b-a3b-instruct-4bit.json
	qwenNextConfig []byte
)

type model struct {
	repo   string
	config []byte
	topK   int
}

var models = map[string]model{
	"qwen3.6-35b":    {"mlx-community/Qwen3.6-35B-A3B-4bit", qwen36Config, 8},
	"qwen3-next-80b": {"mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit", qwenNextConfig, 10},
}

type opts struct {
	model             string
	dir, cacheDir     string
	logDir            string
	qpackBin          string
	tokenizer         string
	caches            []int64
	prompt, tokens    int
	conns             int
	hubCap            int64
	seed              uint64
	shard             int64
	layers            int
	keep, asJSON      bool
	repackOnly        bool
	bandwidthDuration time.Duration
}

func main() {
	var o opts
	var caches string
	flag.StringVar(&o.model, "model", "qwen3.6-35b", "qwen3.6-35b, qwen3-next-80b or qwen3.5-397b (with -layers)")
	flag.StringVar(&o.dir, "dir", "/var/tmp", "work directory: the container (and the qpack binary, logs) go here")
	flag.StringVar(&o.logDir, "logs", "bench/fullsize/logs", "directory of the children's stderr logs (one set per model)")
	flag.StringVar(&o.cacheDir, "digest-cache", "bench/fullsize/.cache", "directory of the cached shard digests")
	flag.StringVar(&o.qpackBin, "qpack", "", "qpack binary to run (default: go build ./cmd/qpack into -dir)")
	flag.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json (or .json.gz) to serve (default: ../shared/refdata/tokenizer/qwen3/tokenizer.json.gz if present, else the tiny model's)")
	flag.StringVar(&caches, "caches", "2GiB,4GiB", "expert cache budgets to generate with, comma separated")
	flag.IntVar(&o.prompt, "prompt", 512, "prompt tokens (about)")
	flag.IntVar(&o.tokens, "tokens", 64, "tokens to generate")
	flag.Int64Var(&o.hubCap, "hub-cap", 0, "cap of the fake Hub per connection, bytes/s (0: none; the real Hub gives one machine about 10-100 MB/s per connection)")
	flag.IntVar(&o.conns, "connections", 8, "connections of the repack and of the baseline download")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic weights")
	flag.Int64Var(&o.shard, "shard-bytes", 5_000_000_000, "tensor bytes per shard (mlx-lm's default 5 GB)")
	flag.IntVar(&o.layers, "layers", 0, "override num_hidden_layers (a smaller run; 0: the real count)")
	flag.BoolVar(&o.repackOnly, "repack-only", false, "stop after the repack figures (no verify, no generate)")
	flag.BoolVar(&o.keep, "keep", false, "keep the container")
	flag.BoolVar(&o.asJSON, "json", false, "print the figures as JSON")
	flag.DurationVar(&o.bandwidthDuration, "bandwidth-time", 4*time.Second, "length of each read-bandwidth measurement")
	flag.Parse()
	for _, c := range strings.Split(caches, ",") {
		n, err := parseBytes(strings.TrimSpace(c))
		if err != nil {
			fail(2, fmt.Errorf("-caches: %w", err))
		}
		o.caches = append(o.caches, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		code := 1
		var u usageError
		if errors.As(err, &u) {
			code = 2
		}
		if ctx.Err() != nil {
			code = 130
		}
		fail(code, err)
	}
}

type usageError struct{ error }

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "fullsize:", err)
	os.Exit(code)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"GB", 1e9}, {"MB", 1e6}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return int64(f * float64(mult)), nil
}

// figure is one measured line.
type figure struct {
	Name     string  `json:"name"`
	Seconds  float64 `json:"seconds"`
	CPU      float64 `json:"cpu_seconds,omitempty"` // the child's user + system time
	Bytes    int64   `json:"bytes,omitempty"`
	PeakRSS  int64   `json:"peak_rss_bytes,omitempty"`
	Baseline string  `json:"baseline,omitempty"`
	BaseSecs float64 `json:"baseline_seconds,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	Note     string  `json:"note,omitempty"`
	Extra    any     `json:"generate,omitempty"`
}

func run(ctx context.Context, o opts) error {
	m, ok := models[o.model]
	if !ok {
		return usageError{fmt.Errorf("-model %q: want qwen3.6-35b, qwen3-next-80b or qwen3.5-397b", o.model)}
	}
	cfg := m.config
	if o.layers > 0 {
		var err error
		if cfg, err = withLayers(cfg, o.layers); err != nil {
			return err
		}
	}
	ck, err := synthmlx.New(cfg, o.seed, o.shard)
	if err != nil {
		return usageError{err}
	}
	var total int64
	for _, s := range ck.Shards {
		total += s.Size()
	}
	logf("%s: %d shards, %.2f GB (machine: %d CPUs; shared, so timings are noisy)", m.repo, len(ck.Shards), float64(total)/1e9, goruntime.NumCPU())
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return usageError{err}
	}
	if free, err := freeBytes(o.dir); err != nil {
		return usageError{err}
	} else if need := total + total/20 + 1<<30; free < need {
		return usageError{fmt.Errorf("%s: %.1f GB free, the container needs about %.1f GB", o.dir, float64(free)/1e9, float64(need)/1e9)}
	}
	work, err := os.MkdirTemp(o.dir, "qpack-fullsize-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keep {
			logf("kept %s", work)
			return
		}
		os.RemoveAll(work) // everything in it was made by this run
	}()
	out := filepath.Join(work, "model.qpack")
	logs := filepath.Join(o.logDir, o.model)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return usageError{err}
	}

	t0 := time.Now()
	digests, err := ck.CachedDigests(filepath.Join(o.cacheDir, o.model+".digests.json"), func(name string, d synthmlx.Digests) {
		logf("digest %s: sha256 %s (%.0fs so far)", name, d.SHA256[:16], time.Since(t0).Seconds())
	})
	if err != nil {
		return err
	}
	tok, err := loadTokenizer(o.tokenizer)
	if err != nil {
		return usageError{err}
	}
	files, err := ck.Files(digests, hubtest.File{Path: "tokenizer.json", Data: tok, LFS: len(tok) > 10<<20})
	if err != nil {
		return err
	}
	hub, err := hubtest.NewServer(hubtest.Config{BandwidthPerConn: o.hubCap})
	if err != nil {
		return err
	}
	defer hub.Close()
	if _, err := hub.AddRepo(m.repo, files, hubtest.RepoOptions{}); err != nil {
		return err
	}
	bin := o.qpackBin
	if bin == "" {
		bin = filepath.Join(work, "qpack")
		b := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/qpack")
		b.Stderr = os.Stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/qpack (run from the repository root, or give -qpack): %w", err)
		}
	}
	env := append(os.Environ(), "HF_ENDPOINT="+hub.URL, "HF_HOME="+filepath.Join(work, "hf"), "HF_HUB_DISABLE_TELEMETRY=1")
	var figs []figure

	// repack against a plain download of the same bytes
	logf("plain parallel download of %.2f GB (%d connections, cap per connection %d B/s, 0: none)", float64(total)/1e9, o.conns, o.hubCap)
	dl, err := plainDownload(ctx, hub.URL, m.repo, ck.Shards, o.conns)
	if err != nil {
		return fmt.Errorf("baseline download: %w", err)
	}
	logf("download: %.1fs (%.0f MB/s)", dl, float64(total)/dl/1e6)
	logf("qpack repack --from-hf %s", m.repo)
	rp, err := child(ctx, env, filepath.Join(logs, "repack.log"), bin, "repack", "--from-hf", m.repo, "-o", out, "--connections", strconv.Itoa(o.conns), "--json")
	if err != nil {
		return err
	}
	logf("repack: %.1fs (CPU %.1fs), peak RSS %.1f MiB", rp.secs, rp.cpu, float64(rp.rss)/(1<<20))
	figs = append(figs, figure{Name: "repack --from-hf (fake Hub, loopback)", Seconds: rp.secs, CPU: rp.cpu, Bytes: total, PeakRSS: rp.rss,
		Baseline: fmt.Sprintf("plain parallel download to nowhere, %d connections (cap %d B/s each, 0: none)", o.conns, o.hubCap), BaseSecs: dl, Ratio: rp.secs / dl,
		Note: "ratio = wall time / baseline's (goal <= 1.05); goal peak RSS <= 128 MiB"})

	if o.repackOnly {
		return printFigures(figs, m.repo, total, o.asJSON)
	}

	// verify-install against b3sum, both cold
	cfiles, cbytes, err := containerFiles(out)
	if err != nil {
		return err
	}
	dropPages(cfiles)
	vf, err := child(ctx, env, filepath.Join(logs, "verify.log"), bin, "verify-install", "--json", "--no-receipt", out)
	if err != nil {
		return err
	}
	logf("verify-install: %.1fs (CPU %.1fs), peak RSS %.1f MiB", vf.secs, vf.cpu, float64(vf.rss)/(1<<20))
	f := figure{Name: "verify-install (pages dropped)", Seconds: vf.secs, CPU: vf.cpu, Bytes: cbytes, PeakRSS: vf.rss}
	if b3, err := exec.LookPath("b3sum"); err == nil {
		dropPages(cfiles)
		bs, err := child(ctx, nil, filepath.Join(logs, "b3sum.log"), b3, append([]string{"--num-threads", "2"}, cfiles...)...)
		if err != nil {
			return err
		}
		logf("b3sum --num-threads 2: %.1fs (CPU %.1fs)", bs.secs, bs.cpu)
		f.Baseline, f.BaseSecs, f.Ratio = fmt.Sprintf("b3sum --num-threads 2, pages dropped (CPU %.1fs)", bs.cpu), bs.secs, bs.secs/vf.secs
		f.Note = "ratio = baseline time / verify time (goal >= 0.9)"
	} else {
		f.Note = "b3sum not installed (Debian: apt-get install b3sum): no baseline"
	}
	figs = append(figs, f)

	// generate at each budget against the I/O limit
	prompt, err := promptText(tok, o.prompt, o.seed)
	if err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	for _, budget := range o.caches {
		bw0, err := readBandwidth(out, m.topK, o.bandwidthDuration, o.seed)
		if err != nil {
			return fmt.Errorf("read bandwidth: %w", err)
		}
		label := fmt.Sprintf("%.0fMiB", float64(budget)/(1<<20))
		logf("qpack generate, expert cache %s (read bandwidth before: %.0f MB/s)", label, bw0/1e6)
		g, err := childIn(ctx, env, filepath.Join(logs, "generate-"+label+".log"), prompt, bin, "generate", out, "--prompt", "-",
			"--no-chat-template", "--max-tokens", strconv.Itoa(o.tokens), "--expert-cache", strconv.FormatInt(budget, 10),
			"--io", "direct", "--temperature", "0", "--json")
		if err != nil {
			return err
		}
		bw1, err := readBandwidth(out, m.topK, o.bandwidthDuration, o.seed+1)
		if err != nil {
			return fmt.Errorf("read bandwidth: %w", err)
		}
		var res genResult
		if err := json.Unmarshal(g.stdout, &res); err != nil {
			return fmt.Errorf("generate --json: %w", err)
		}
		bw := (bw0 + bw1) / 2
		limit := bw / res.BytesPerToken
		over := res.PeakRSS - res.Dense - budget
		logf("generate %s: prefill %d tok %.2f tok/s, decode %.3f tok/s (I/O limit %.3f), hit %.3f, %.1f MB/token, peak RSS %.0f MiB (dense %.0f MiB + budget: %+.0f MiB)",
			label, res.PromptTokens, res.PrefillTokS, res.DecodeTokS, limit, res.HitRate, res.BytesPerToken/1e6,
			float64(res.PeakRSS)/(1<<20), float64(res.Dense)/(1<<20), float64(over)/(1<<20))
		res.ReadBandwidth, res.IOLimitTokS, res.RatioToIOLimit, res.RSSOverDenseBudget = bw, limit, res.DecodeTokS/limit, over
		res.Budget, res.ChildPeakRSS = budget, g.rss
		figs = append(figs, figure{Name: "generate, expert cache " + label + ", direct I/O", Seconds: g.secs, CPU: g.cpu, PeakRSS: res.PeakRSS,
			Baseline: fmt.Sprintf("I/O limit: random whole-blob reads, %d readers, %.0f MB/s", m.topK, bw/1e6), Ratio: res.DecodeTokS / limit,
			Note: fmt.Sprintf("ratio = decode tok/s / I/O limit (goal >= 0.8); peak RSS - dense - budget = %.0f MiB (goal <= 256)", float64(over)/(1<<20)), Extra: res})
	}
	return printFigures(figs, m.repo, total, o.asJSON)
}

type genResult struct {
	PromptTokens    int     `json:"prompt_tokens"`
	GeneratedTokens int     `json:"generated_tokens"`
	PrefillTokS     float64 `json:"prefill_tok_per_sec"`
	DecodeTokS      float64 `json:"decode_tok_per_sec"`
	PeakRSS         int64   `json:"peak_rss_bytes"`
	Dense           int64   `json:"dense_bytes"`
	CacheBytes      int64   `json:"expert_cache_bytes"`
	HitRate         float64 `json:"expert_cache_hit_rate"`
	BytesPerToken   float64 `json:"bytes_read_per_token"`
	StopReason      string  `json:"stop_reason"`

	Budget             int64   `json:"budget_bytes"`
	ChildPeakRSS       int64   `json:"child_maxrss_bytes"`
	ReadBandwidth      float64 `json:"read_bandwidth_bytes_per_sec"`
	IOLimitTokS        float64 `json:"io_limit_tok_per_sec"`
	RatioToIOLimit     float64 `json:"ratio_to_io_limit"`
	RSSOverDenseBudget int64   `json:"rss_minus_dense_minus_budget"`
}

func printFigures(figs []figure, repo string, total int64, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"model": repo, "checkpoint_bytes": total, "cpus": goruntime.NumCPU(), "figures": figs})
	}
	fmt.Printf("%s, %.2f GB synthetic checkpoint, %d CPUs (shared machine: timings noisy)\n", repo, float64(total)/1e9, goruntime.NumCPU())
	fmt.Printf("%-44s %9s %9s %10s %10s %7s  %s\n", "run", "s", "CPU s", "peak MiB", "base s", "ratio", "baseline; note")
	for _, f := range figs {
		fmt.Printf("%-44s %9.1f %9.1f %10.1f %10.1f %7.3f  %s; %s\n", f.Name, f.Seconds, f.CPU, float64(f.PeakRSS)/(1<<20), f.BaseSecs, f.Ratio, f.Baseline, f.Note)
		if g, ok := f.Extra.(genResult); ok {
			fmt.Printf("%44s prompt %d tok, prefill %.2f tok/s; decode %.3f tok/s vs I/O limit %.3f; hit rate %.3f; %.2f MB read/token; dense %.0f MiB\n",
				"", g.PromptTokens, g.PrefillTokS, g.DecodeTokS, g.IOLimitTokS, g.HitRate, g.BytesPerToken/1e6, float64(g.Dense)/(1<<20))
		}
	}
	return nil
}

// withLayers returns config with num_hidden_layers set to n.
func withLayers(config []byte, n int) ([]byte, error) {
	var top map[string]any
	if err := json.Unmarshal(config, &top); err != nil {
		return nil, err
	}
	text := top
	if tc, ok := top["text_config"].(map[string]any); ok {
		text = tc
	}
	text["num_hidden_layers"] = n
	if lt, ok := text["layer_types"].([]any); ok && len(lt) > n {
		text["layer_types"] = lt[:n]
	}
	return json.MarshalIndent(top, "", "  ")
}

func loadTokenizer(path string) ([]byte, error) {
	if path == "" {
		for _, p := range []string{"../shared/refdata/tokenizer/qwen3/tokenizer.json.gz", "testdata/tiny/qwen3_next-q4g64/tokenizer.json"} {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
		if path == "" {
			return nil, errors.New("no tokenizer found: run from the repository root or give -tokenizer")
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if b, err = io.ReadAll(io.LimitReader(zr, 256<<20)); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	logf("tokenizer: %s (%d bytes)", path, len(b))
	return b, nil
}

// promptText is plain English-like words that the tokenizer encodes to n
// tokens (or just over, where a word adds two).
func promptText(tokJSON []byte, n int, seed uint64) (string, error) {
	tk, err := tokenizer.Parse("tokenizer.json", tokJSON)
	if err != nil {
		return "", err
	}
	text := wordSalad(2*n, seed)
	lo, hi := 0, len(text) // cut at a space so that the prefix has >= n tokens
	for lo < hi {
		mid := (lo + hi) / 2
		if len(tk.Encode(text[:mid])) >= n {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return text[:lo], nil
}

func wordSalad(n int, seed uint64) string {
	words := strings.Fields("the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she there one all we their can has been would more when if will no other into some could them time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three")
	r := rand.New(rand.NewPCG(seed, 42))
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(9) == 0 {
			b.WriteByte('.')
		}
	}
	return b.String()
}

type childRun struct {
	secs   float64
	cpu    float64 // user + system seconds
	rss    int64
	stdout []byte
}

func child(ctx context.Context, env []string, logFile, name string, args ...string) (childRun, error) {
	return childIn(ctx, env, logFile, "", name, args...)
}

// childIn runs name with stdin, stderr to logFile, and returns its wall
// time, peak RSS (rusage) and stdout.
func childIn(ctx context.Context, env []string, logFile, stdin, name string, args ...string) (childRun, error) {
	lf, err := os.Create(logFile)
	if err != nil {
		return childRun{}, err
	}
	defer lf.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if env != nil {
		cmd.Env = env
	}
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, lf, strings.NewReader(stdin)
	t := time.Now()
	err = cmd.Run()
	r := childRun{secs: time.Since(t).Seconds(), stdout: stdout.Bytes()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.rss = ru.Maxrss << 10 // KiB on Linux
		r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	if err != nil {
		tail, _ := os.ReadFile(logFile)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return r, fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), args[0], err, tail)
	}
	return r, nil
}

// plainDownload reads every shard through the Hub's resolve URL (redirected
// to the CDN) with conns parallel range requests of 64 MiB to io.Discard,
// and returns the wall time in seconds.
func plainDownload(ctx context.Context, hubURL, repo string, shards []*synthmlx.Shard, conns int) (float64, error) {
	type job struct {
		url      string
		from, to int64
	}
	const chunk = 64 << 20
	jobs := make(chan job)
	client := &http.Client{Timeout: 10 * time.Minute}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	t := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for j := range jobs {
				err := func() error {
					req, err := http.NewRequestWithContext(ctx, "GET", j.url, nil)
					if err != nil {
						return err
					}
					req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", j.from, j.to-1))
					resp, err := client.Do(req)
					if err != nil {
						return err
					}
					defer resp.Body.Close()
					if resp.StatusCode != http.StatusPartialContent {
						return fmt.Errorf("%s: %s", j.url, resp.Status)
					}
					n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
					if err == nil && n != j.to-j.from {
						err = fmt.Errorf("%s: %d bytes, want %d", j.url, n, j.to-j.from)
					}
					return err
				}()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for _, s := range shards {
		u := hubURL + "/" + repo + "/resolve/main/" + s.Name
		for off := int64(0); off < s.Size(); off += chunk {
			select {
			case jobs <- job{u, off, min(off+chunk, s.Size())}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return time.Since(t).Seconds(), firstErr
}

// containerFiles lists the regular files of the container and their total size.
func containerFiles(dir string) ([]string, int64, error) {
	var out []string
	var total int64
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			out = append(out, p)
			total += info.Size()
		}
		return nil
	})
	return out, total, err
}

func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("%s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// readBandwidth reads whole expert blobs at random (layer, expert) with
// readers parallel direct reads for dur, and returns bytes per second: the
// disk rate the runner's expert reads can reach.
func readBandwidth(pack string, readers int, dur time.Duration, seed uint64) (float64, error) {
	c, err := qpack.Open(pack)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	lay := c.Layout
	files := make([]*os.File, lay.LayerCount)
	for l := range files {
		f := expertcache.OpenDirect(c.LayerPath(l))
		if f == nil {
			if f, err = os.Open(c.LayerPath(l)); err != nil {
				return 0, err
			}
		}
		defer f.Close()
		files[l] = f
	}
	var total int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	t := time.Now()
	deadline := t.Add(dur)
	for w := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := alignedBuf(lay.ExpertStride)
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			var n int64
			for time.Now().Before(deadline) {
				got, err := files[r.IntN(lay.LayerCount)].ReadAt(buf, int64(r.IntN(lay.ExpertCount))*lay.ExpertStride)
				n += int64(got)
				if err != nil && err != io.EOF {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(total) / time.Since(t).Seconds(), firstErr
}

// alignedBuf returns n bytes aligned to 4096 (for O_DIRECT).
func alignedBuf(n int64) []byte {
	b := make([]byte, n+4096)
	off := int((4096 - uintptr(unsafe.Pointer(&b[0]))%4096) % 4096)
	return b[off : off+int(n)]
}
