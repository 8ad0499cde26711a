package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/chattmpl"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/runner"
	"github.com/qpack-go/qpack/runtime/sample"
	"github.com/qpack-go/qpack/verify"
)

func init() {
	register(&cli.Command{
		Name:      "generate",
		Usage:     "generate text, streaming the routed experts from disk through a bounded cache",
		ArgsUsage: "MODEL --prompt TEXT",
		Description: "MODEL is a .qpack container, an MLX checkpoint directory, or a Hub repository id (org/name) whose\n" +
			"checkpoint is in the Hugging Face cache (--revision picks the snapshot; nothing is fetched). The prompt is\n" +
			"wrapped in the model's chat template as a user turn (with --system, --no-think) when the model has one;\n" +
			"--no-chat-template sends it as raw text. --prompt - reads it from standard input. Sampling follows the\n" +
			"model's generation_config.json as transformers reads it (greedy unless do_sample is true), and each flag\n" +
			"given overrides it; the summary and --json say which values were used and where they came from. Ctrl-C\n" +
			"stops the reply, prints the summary so far and exits 130. The text is streamed to stdout as it\n" +
			"is produced; a summary (prefill and decode tok/s, peak RSS, expert cache hit rate, bytes read per\n" +
			"token) follows on stderr, or everything comes as one JSON object with --json. The first generated token\n" +
			"comes from the prefill's logits: the decode rate is one-token forward passes per second (generated tokens - 1,\n" +
			"or as many as the generated tokens when an EOS, which is not counted among them, ended the generation).",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "the prompt (required); - reads it from standard input"},
			&cli.BoolFlag{Name: "no-chat-template", Aliases: []string{"ignore-chat-template"}, Usage: "send the prompt as raw text, not wrapped in the model's chat template"},
			&cli.BoolFlag{Name: "chat", Usage: "apply the chat template (the default when the model has one; an error when it has none)"},
		}, runFlags()...),
		Action: generateAction,
	})
	quickstartSteps = append(quickstartSteps, quickstartGenerate)
}

// runFlags are the flags generate and chat share.
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "max-tokens", Aliases: []string{"m", "max-new"}, Value: runner.DefaultMaxNew, Usage: "most tokens to generate (per turn); prompt and conversation tokens plus these must fit the model's max_position_embeddings"},
		&cli.StringFlag{Name: "revision", Usage: "with a repository id as MODEL: the cached branch, tag or commit to run", DefaultText: "main"},
		&cli.StringFlag{Name: "cache-dir", Usage: "with a repository id as MODEL: the HF cache root to look in", DefaultText: "$HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub"},
		&cli.Float64Flag{Name: "temperature", Aliases: []string{"temp"}, Usage: "sampling temperature; 0 is greedy", DefaultText: "generation_config.json's; greedy unless its do_sample is true"},
		&cli.IntFlag{Name: "top-k", Usage: "keep the k most likely tokens; 0: off", DefaultText: "generation_config.json's; 50, as in transformers, when sampling without one"},
		&cli.Float64Flag{Name: "top-p", Usage: "nucleus sampling threshold; 0 or 1: off", DefaultText: "generation_config.json's, else off"},
		&cli.Float64Flag{Name: "min-p", Usage: "drop tokens below min-p times the top probability; 0: off", DefaultText: "generation_config.json's, else off"},
		&cli.Float64Flag{Name: "repetition-penalty", Usage: "penalty for tokens already seen; 0 or 1: off", DefaultText: "generation_config.json's, else off"},
		&cli.Float64Flag{Name: "presence-penalty", Usage: "subtracted once from the logit of each token already seen", DefaultText: "off"},
		&cli.Uint64Flag{Name: "seed", Usage: "random seed for sampling", DefaultText: "a random one, reported in the summary and --json \"seed\""},
		&cli.StringSliceFlag{Name: "stop", Usage: "stop when the text contains this string (repeatable)"},
		&cli.StringFlag{Name: "system", Aliases: []string{"system-prompt"}, Usage: "system prompt, given to the chat template (generate: an error without one; chat writes ChatML turns then)"},
		&cli.BoolFlag{Name: "no-think", Usage: "ask a Qwen3 chat template for no reasoning block (enable_thinking=false; generate: an error without a template)"},
		&cli.StringFlag{Name: "expert-cache", Value: "auto", Usage: "expert cache budget, e.g. 2GiB; auto: half the memory left after the dense weights"},
		&cli.StringFlag{Name: "gpu-expert-cache", Value: "auto", Usage: "with --backend cuda: the GPU's own expert cache, e.g. 8GiB, beside --expert-cache; 0: none (every expert copied in each time); auto: $QPACK_CUDA_EXPERT_CACHE, else half the free device memory"},
		&cli.StringFlag{Name: "io", Value: "buffered", Usage: "expert reads: buffered (page cache) or direct (O_DIRECT / F_NOCACHE where the file system allows)"},
		&cli.IntFlag{Name: "prefill-chunk", Value: runner.DefaultPrefillChunk, Usage: fmt.Sprintf("prompt tokens per forward pass (default %d on a GPU that runs whole layers)", gpuPrefillChunk)},
		&cli.StringFlag{Name: "speculate-experts", Value: "auto", Usage: "experts per token guessed for each layer before its attention during decode, read while it computes (a hint: output is unchanged); auto: the model's top-k; 0 or off: none"},
		&cli.BoolFlag{Name: "verify-experts", Usage: "check each expert blob's BLAKE3 against the manifest when first read (.qpack only)"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of streaming text"},
		backendFlag(),
	}
}

// runSettings are the parsed shared flags.
type runSettings struct {
	model    string    // the directory loaded
	ref      *modelRef // MODEL as given and resolved
	opts     runner.Options
	sampling *samplingReport
	template bool // the model has a chat template
	gen      runner.GenOptions
	system   string
	noThink  bool
	json     bool
	budget   string
	closeChk func()
	backend  runtime.Backend
}

func float64Flag(l *lateFlags, name string) float64 {
	if g, ok := l.late(name); ok {
		if v, ok := g.Get().(float64); ok {
			return v
		}
	}
	return l.c.Float64(name)
}

func uint64Flag(l *lateFlags, name string) uint64 {
	if g, ok := l.late(name); ok {
		if v, ok := g.Get().(uint64); ok {
			return v
		}
	}
	return l.c.Uint64(name)
}

func parseRunSettings(l *lateFlags, cmd string) (*runSettings, error) {
	normalizeAliases(l)
	s := &runSettings{system: l.String("system"), noThink: l.Bool("no-think"), json: l.Bool("json"), budget: l.String("expert-cache")}
	if len(l.Args()) == 0 {
		return nil, withCode(2, fmt.Errorf("%s: want a MODEL argument", cmd))
	}
	ref, err := resolveModelIn(l.Args()[0], l.String("revision"), l.String("cache-dir"))
	if err != nil {
		return nil, err
	}
	s.ref, s.model = ref, ref.Path
	switch _, err := chattmpl.LoadDir(s.model); {
	case err == nil:
		s.template = true
	case !errors.Is(err, chattmpl.ErrNoTemplate):
		return nil, withCode(2, runner.WrapLoadError(s.model, err))
	}
	gcfg, err := sample.LoadGenerationConfig(s.model)
	if err != nil {
		return nil, withCode(2, err)
	}
	if s.budget != "auto" {
		b, err := expertcache.ParseSize(s.budget)
		if err != nil {
			return nil, withCode(2, fmt.Errorf("--expert-cache: %w", err))
		}
		s.opts.ExpertCache = b
	}
	mode, err := expertcache.ParseIOMode(l.String("io"))
	if err != nil {
		return nil, withCode(2, fmt.Errorf("--io: %w", err))
	}
	s.opts.IO = mode
	if n := l.Int("prefill-chunk"); n < 1 || n > 4096 {
		return nil, withCode(2, fmt.Errorf("--prefill-chunk %d: want 1 to 4096", n))
	} else {
		s.opts.PrefillChunk = n
	}
	if n, err := parseSpeculate(l.String("speculate-experts")); err != nil {
		return nil, withCode(2, fmt.Errorf("--speculate-experts: %w", err))
	} else {
		s.opts.Speculate = n
	}
	if n := l.Int("max-tokens"); n < 1 {
		return nil, withCode(2, fmt.Errorf("--max-tokens %d: want at least 1", n))
	} else {
		s.gen.MaxNew = n
	}
	if s.gen.Sample, s.sampling, err = resolveSampling(l, gcfg); err != nil {
		return nil, err
	}
	s.gen.Stop = l.StringSlice("stop")
	be, err := selectBackend(l.String("backend"))
	if err != nil {
		return nil, err // its exit code: 2 for no device, 1 for a failure
	}
	s.opts.Backend, s.backend = be, be
	s.opts.PrefillChunk = prefillChunk(l, be, gpuPrefillChunk)
	if err := applyGPUExpertCache(l.String("gpu-expert-cache"), be); err != nil {
		closeBackend(be)
		return nil, err
	}
	if l.Bool("verify-experts") {
		check, closeFn, err := expertVerifier(s.model)
		if err != nil {
			closeBackend(be)
			return nil, withCode(2, err)
		}
		s.opts.VerifyExpert, s.closeChk = check, closeFn
	}
	return s, nil
}

// isSet reports whether the flag was given, before or after MODEL, under
// any of its names.
func (l *lateFlags) isSet(name string) bool { return l.seen[name] || l.c.IsSet(name) }

// normalizeAliases makes a flag given after MODEL under an alias
// (--max-new, -m, --temp, -p) read as its main name: the late flag set
// holds each name of a flag separately.
func normalizeAliases(l *lateFlags) {
	for _, f := range l.c.Command.Flags {
		names := f.Names()
		if _, ok := f.(*cli.StringSliceFlag); ok || len(names) < 2 {
			continue
		}
		for _, n := range names[1:] {
			if !l.seen[n] {
				continue
			}
			if v := l.set.Lookup(n); v != nil && l.set.Set(names[0], v.Value.String()) == nil {
				l.seen[names[0]] = true
			}
		}
	}
}

// randomSeed draws a sampling seed below 2^53, so that it survives a trip
// through JSON numbers read as doubles.
func randomSeed() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano()) & (1<<53 - 1)
	}
	return binary.LittleEndian.Uint64(b[:]) & (1<<53 - 1)
}

// parseSpeculate maps --speculate-experts to runner.Options.Speculate:
// auto is the runner's default, 0 or off turns speculation off, N guesses N
// experts per token.
func parseSpeculate(v string) (int, error) {
	switch v {
	case "auto", "":
		return runner.DefaultSpeculate, nil
	case "off", "0":
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1<<16 {
		return 0, fmt.Errorf("%q: want auto, off, or a number of experts from 1 to 65536", v)
	}
	return n, nil
}

// expertVerifier checks expert blobs against the container's manifest.
func expertVerifier(model string) (func(l, e int, blob []byte) error, func(), error) {
	if !runtime.IsContainer(model) {
		return nil, nil, fmt.Errorf("--verify-experts: %s is not a .qpack container (a checkpoint directory has no expert digests)", model)
	}
	c, err := qpack.Open(model)
	if err != nil {
		return nil, nil, runner.WrapLoadError(model, err)
	}
	chk, err := verify.NewContainerChecker(c)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("--verify-experts: %s: %w", model, err)
	}
	return chk.CheckOnce, func() { c.Close() }, nil
}

func (s *runSettings) close() {
	if s.closeChk != nil {
		s.closeChk()
	}
	if s.backend != nil {
		closeBackend(s.backend)
	}
}

// streamTo makes generated text stream to out as it is produced (not in
// --json mode, where it comes in the report).
func (s *runSettings) streamTo(out io.Writer) {
	if s.json {
		return
	}
	s.gen.OnText = func(t string) error {
		_, err := io.WriteString(out, t)
		return err
	}
}

func (s *runSettings) thinking() *bool {
	if !s.noThink {
		return nil
	}
	f := false
	return &f
}

// heapMargin is the Go heap allowed beyond the dense weights (0: no limit;
// the tests, which share one process with other commands' tests, set 0).
var heapMargin int64 = 256 << 20

// openRunner loads the model and bounds the Go heap to the dense weights
// plus a margin (the expert cache lives outside it).
func openRunner(s *runSettings) (*runner.Runner, error) {
	r, err := runner.Open(s.model, s.opts)
	if errors.Is(err, runner.ErrNoModel) {
		return nil, withCode(2, err)
	}
	if err != nil {
		return nil, err
	}
	if heapMargin > 0 {
		r.LimitHeap(heapMargin)
	}
	return r, nil
}

// maxStdinPrompt bounds a prompt read from standard input (--prompt -).
const maxStdinPrompt = 16 << 20

// readPrompt returns --prompt, or standard input for "-" (bounded, UTF-8,
// taken as it is: a trailing newline stays, as in mlx_lm). Ctrl-C while it
// waits for the input ends the wait (exit 130).
func readPrompt(ctx context.Context, l *lateFlags, stdin io.Reader) (string, error) {
	prompt := l.String("prompt")
	if prompt == "" {
		return "", withCode(2, errors.New("generate: --prompt is required (- reads it from standard input)"))
	}
	if prompt != "-" {
		return prompt, nil
	}
	var err error
	if stdin == nil {
		stdin = os.Stdin
	}
	type result struct {
		data []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		data, err := io.ReadAll(io.LimitReader(stdin, maxStdinPrompt+1))
		got <- result{data, err}
	}()
	var data []byte
	select {
	case r := <-got:
		data, err = r.data, r.err
	case <-ctx.Done():
		return "", withCode(130, errors.New("interrupted while reading the prompt from standard input"))
	}
	switch {
	case err != nil:
		return "", withCode(2, fmt.Errorf("--prompt -: reading standard input: %w", err))
	case len(data) > maxStdinPrompt:
		return "", withCode(2, fmt.Errorf("--prompt -: standard input holds more than %s, the most a prompt may have", expertcache.FormatSize(maxStdinPrompt)))
	case len(data) == 0:
		return "", withCode(2, errors.New("--prompt -: standard input is empty"))
	case !utf8.Valid(data):
		return "", withCode(2, errors.New("--prompt -: standard input is not UTF-8 text"))
	}
	return string(data), nil
}

// useTemplate decides whether generate wraps the prompt in the chat
// template: by default when the model has one. --system and --no-think
// only mean something to a template: without one to apply they are
// refused, not ignored.
func useTemplate(l *lateFlags, s *runSettings) (bool, error) {
	raw := l.Bool("no-chat-template")
	switch {
	case raw && l.Bool("chat"):
		return false, withCode(2, errors.New("generate: --chat and --no-chat-template contradict each other"))
	case !raw && !s.template && l.Bool("chat"):
		return false, withCode(2, fmt.Errorf("generate: --chat: %s has no chat template (tokenizer_config.json, chat_template.jinja or chat_template.json)", s.model))
	}
	if !raw && s.template {
		return true, nil
	}
	why := "--no-chat-template sends the prompt as raw text"
	if !raw {
		why = fmt.Sprintf("%s has no chat template, so the prompt goes to it as raw text", s.model)
	}
	for _, f := range []string{"system", "no-think"} {
		if l.isSet(f) {
			return false, withCode(2, fmt.Errorf("generate: --%s needs a chat template to apply, and %s", f, why))
		}
	}
	return false, nil
}

func generateAction(c *cli.Context) error {
	l, err := parseLateFlags(c)
	if err != nil {
		return err
	}
	s, err := parseRunSettings(l, "generate")
	if err != nil {
		return err
	}
	defer s.close()
	if len(l.Args()) > 1 {
		return withCode(2, fmt.Errorf("generate: want one MODEL argument, also got %q (quote the prompt and pass it with --prompt)", l.Args()[1:]))
	}
	chat, err := useTemplate(l, s)
	if err != nil {
		return err
	}
	prompt, err := readPrompt(c.Context, l, c.App.Reader)
	if err != nil {
		return err
	}
	r, err := openRunner(s)
	if err != nil {
		return err
	}
	defer r.Close()
	out, errw := c.App.Writer, c.App.ErrWriter
	s.streamTo(out)
	sess := r.NewSession()
	var res *runner.Result
	var ids []int
	if chat {
		res, err = sess.Chat(c.Context, prompt, runner.ChatOptions{GenOptions: s.gen, System: s.system, EnableThinking: s.thinking()})
		if res != nil && len(sess.Tokens()) >= res.PromptTokens {
			ids = sess.Tokens()[:res.PromptTokens] // a fresh session: the prompt comes first
		}
	} else {
		ids = r.Tokenizer.Encode(prompt)
		res, err = sess.Generate(c.Context, ids, s.gen)
	}
	if err != nil && res == nil {
		return runError(s.model, err)
	}
	rep := newRunReport(r, res, s.gen.Sample)
	rep.Sampling, rep.PromptIDs, rep.ChatTemplate = s.sampling, ids, chat
	rep.Backend = describeBackend(s.backend)
	if s.json {
		if jerr := writeJSON(out, struct {
			Model     string `json:"model"`
			ModelPath string `json:"model_path"`
			*runReport
		}{s.ref.Arg, s.model, rep}); jerr != nil {
			return jerr
		}
	} else {
		fmt.Fprintln(out)
		rep.print(errw)
	}
	return interrupted(err)
}

// interrupted turns the error of a generation stopped by Ctrl-C (whose
// partial summary has been printed) into exit code 130 with one line
// instead of the context's "context canceled".
func interrupted(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return withCode(130, errors.New("interrupted"))
	}
	return err
}

// runError gives a generation refused for the model's context limit exit
// code 2 (the request, not the model, is at fault), and reports a damaged
// expert found by --verify-experts as the container path and the checker's
// error, which names the layer file, layer and expert (without the forward
// pass's own "layer N:" in front).
func runError(model string, err error) error {
	if errors.Is(err, runner.ErrContextLimit) {
		return withCode(2, err)
	}
	var xe *verify.ExpertError
	if errors.As(err, &xe) {
		return fmt.Errorf("--verify-experts: %s: %w", model, xe)
	}
	return err
}

// cacheReport is the expert cache's work in one phase.
type cacheReport struct {
	Requests  int64   `json:"requests"`
	Hits      int64   `json:"hits"`
	Misses    int64   `json:"misses"`
	HitRate   float64 `json:"hit_rate"`
	Reads     int64   `json:"reads"`
	BytesRead int64   `json:"bytes_read"`
	ReadP50Ms float64 `json:"read_p50_ms"`
	ReadP99Ms float64 `json:"read_p99_ms"`
	// Speculative reads (decode): experts guessed, of which the real
	// batch named; the real batch's experts; reads queued, useful,
	// cancelled, and the bytes read for wrong guesses.
	SpecGuessed         int64 `json:"speculated_experts"`
	SpecCorrect         int64 `json:"speculated_correct"`
	SpecTargets         int64 `json:"speculated_targets"`
	SpecReads           int64 `json:"speculative_reads"`
	SpecUseful          int64 `json:"speculative_reads_useful"`
	SpecCancelled       int64 `json:"speculative_reads_cancelled"`
	SpecWastedBytesRead int64 `json:"speculative_bytes_wasted"`
}

func newCacheReport(st expertcache.Stats) cacheReport {
	return cacheReport{Requests: st.Requests, Hits: st.Hits, Misses: st.Misses, HitRate: st.HitRate(), Reads: st.Reads,
		BytesRead: st.BytesRead, ReadP50Ms: st.ReadP50.Seconds() * 1e3, ReadP99Ms: st.ReadP99.Seconds() * 1e3,
		SpecGuessed: st.SpecNamed, SpecCorrect: st.SpecCorrect, SpecTargets: st.SpecTargets, SpecReads: st.SpecReads,
		SpecUseful: st.SpecUseful, SpecCancelled: st.SpecCancelled, SpecWastedBytesRead: st.SpecWastedBytes}
}

// runReport is what generate prints at the end (and chat per turn). The
// first generated token is sampled from the prefill's logits, so decode
// runs generated_tokens - 1 one-token forward passes
// (decode_forward_passes), or generated_tokens when an EOS id (sampled,
// not counted) ended the generation; decode_tok_per_sec is
// decode_forward_passes / decode_seconds.
type runReport struct {
	Text            string  `json:"text"`
	Tokens          []int   `json:"tokens"`
	PromptTokens    int     `json:"prompt_tokens"`
	GeneratedTokens int     `json:"generated_tokens"`
	StopReason      string  `json:"stop_reason"`
	Temperature     float64 `json:"temperature"`
	// Seed is the sampling seed (--seed, or the one drawn at random when
	// sampling without it): --seed Seed repeats the run.
	Seed uint64 `json:"seed"`
	// Sampling is every sampling parameter used and where it came from.
	Sampling *samplingReport `json:"sampling,omitempty"`
	// ChatTemplate says whether the prompt was wrapped in the model's
	// chat template; PromptIDs are the tokens prefilled.
	ChatTemplate      bool         `json:"chat_template"`
	PromptIDs         []int        `json:"prompt_token_ids,omitempty"`
	PrefillSeconds    float64      `json:"prefill_seconds"`
	PrefillTokPerSec  float64      `json:"prefill_tok_per_sec"`
	DecodeSeconds     float64      `json:"decode_seconds"`
	DecodeForward     int          `json:"decode_forward_passes"`
	DecodeTokPerSec   float64      `json:"decode_tok_per_sec"`
	PeakRSSBytes      int64        `json:"peak_rss_bytes"`
	DenseBytes        int64        `json:"dense_bytes"`
	ExpertCacheBytes  int64        `json:"expert_cache_bytes"`
	IO                string       `json:"io"`
	HitRate           float64      `json:"expert_cache_hit_rate"`
	BytesReadPerToken float64      `json:"bytes_read_per_token"`
	Prefill           cacheReport  `json:"prefill_cache"`
	Decode            cacheReport  `json:"decode_cache"`
	Backend           *backendInfo `json:"backend,omitempty"`
}

func newRunReport(r *runner.Runner, res *runner.Result, p sample.Params) *runReport {
	tokens := res.Tokens
	if tokens == nil {
		tokens = []int{}
	}
	// The hit rate over the whole call: prefill and decode together.
	all := res.PrefillCache
	all.Requests += res.DecodeCache.Requests
	all.Hits += res.DecodeCache.Hits
	return &runReport{
		Text: res.Text, Tokens: tokens, PromptTokens: res.PromptTokens, GeneratedTokens: len(res.Tokens), StopReason: res.StopReason,
		Temperature: p.Temperature, Seed: p.Seed,
		PrefillSeconds: res.Prefill.Seconds(), PrefillTokPerSec: res.PrefillTokPerSec(),
		DecodeSeconds: res.Decode.Seconds(), DecodeForward: res.DecodeTokens, DecodeTokPerSec: res.DecodeTokPerSec(),
		PeakRSSBytes: res.PeakRSS, DenseBytes: r.DenseBytes(), ExpertCacheBytes: r.Cache.Budget(), IO: ioName(r),
		HitRate: all.HitRate(), BytesReadPerToken: res.BytesReadPerToken(),
		Prefill: newCacheReport(res.PrefillCache), Decode: newCacheReport(res.DecodeCache),
	}
}

func ioName(r *runner.Runner) string {
	if st := r.Cache.Stats(); st.DirectReads > 0 {
		return "direct"
	}
	return "buffered"
}

func (p *runReport) print(w io.Writer) {
	gib := func(n int64) string { return expertcache.FormatSize(n) }
	fmt.Fprintf(w, "prefill: %d tokens in %.2fs (%.1f tok/s) | decode: %d tokens (%d forward passes) in %.2fs (%.2f tok/s), stopped by %s\n",
		p.PromptTokens, p.PrefillSeconds, p.PrefillTokPerSec, p.GeneratedTokens, p.DecodeForward, p.DecodeSeconds, p.DecodeTokPerSec, stopText(p.StopReason))
	if p.Sampling != nil {
		p.Sampling.print(w)
	} else if p.Temperature > 0 {
		fmt.Fprintf(w, "sampling: temperature %g, seed %d (--seed %d repeats this run)\n", p.Temperature, p.Seed, p.Seed)
	}
	fmt.Fprintf(w, "memory: peak RSS %s (dense weights %s, expert cache budget %s)\n", gib(p.PeakRSSBytes), gib(p.DenseBytes), gib(p.ExpertCacheBytes))
	fmt.Fprintf(w, "experts: hit rate %.1f%% | decode: hit rate %.1f%%, %s read per token, read p50 %.2f ms p99 %.2f ms | prefill: %d reads, %s\n",
		100*p.HitRate, 100*p.Decode.HitRate, gib(int64(p.BytesReadPerToken)), p.Decode.ReadP50Ms, p.Decode.ReadP99Ms,
		p.Prefill.Reads, gib(p.Prefill.BytesRead))
	if p.Backend != nil {
		fmt.Fprintf(w, "backend: %s\n", p.Backend)
	}
	if d := p.Decode; d.SpecGuessed > 0 {
		fmt.Fprintf(w, "speculation: %.0f%% of the decode experts guessed before attention; %d reads ahead, %d useful, %d cancelled, %s read for wrong guesses\n",
			100*float64(d.SpecCorrect)/float64(max(d.SpecTargets, 1)), d.SpecReads, d.SpecUseful, d.SpecCancelled, gib(d.SpecWastedBytesRead))
	}
}

// quickstartGenerate runs a short greedy chat generation on the container.
func quickstartGenerate(ctx context.Context, w io.Writer, container string, sum *quickstartSummary) error {
	var text strings.Builder
	res, err := runner.Generate(ctx, container, runner.GenerateOptions{
		Options:    runner.Options{ExpertCache: 1 << 20},
		GenOptions: runner.GenOptions{MaxNew: 16, OnText: func(s string) error { text.WriteString(s); return nil }},
		Prompt:     "Hello", Chat: true, NoThink: true,
	})
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if sum.Extra == nil {
		sum.Extra = map[string]any{}
	}
	sum.Extra["generate"] = map[string]any{
		"text": res.Text, "tokens": res.Tokens, "stop_reason": res.StopReason,
		"prefill_tok_per_sec": res.PrefillTokPerSec(), "decode_tok_per_sec": res.DecodeTokPerSec(),
		"expert_cache_hit_rate": res.DecodeCache.HitRate(),
	}
	sum.Steps = append(sum.Steps, "generate")
	fmt.Fprintf(w, "== generate (greedy, 16 tokens, 1 MiB expert cache; the tiny model's weights are random)\n   %q\n", text.String())
	fmt.Fprintf(w, "   prefill %.0f tok/s, decode %.0f tok/s, decode hit rate %.0f%%\n",
		res.PrefillTokPerSec(), res.DecodeTokPerSec(), 100*res.DecodeCache.HitRate())
	return nil
}
