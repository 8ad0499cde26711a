package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/runner"
	"github.com/qpack-go/qpack/safetensors"
)

func init() {
	register(&cli.Command{
		Name:      "logits",
		Usage:     "teacher-forced logits of a token sequence (reference forward pass)",
		ArgsUsage: "MODEL",
		Description: "MODEL is a .qpack container, an MLX checkpoint directory, or a Hub repository id (org/name) whose\n" +
			"checkpoint is in the Hugging Face cache (--revision picks the snapshot). Runs the tokens through the\n" +
			"model in one pass and reports, for each position, the greedy next token and its logit.\n" +
			"--output writes float32 logits [T, vocab] (tensor \"logits\"), \"greedy\" and \"input_ids\"\n" +
			"(I64 [T]) and, with --dump-layers, each layer's output hidden state \"hidden.L\" [T, hidden].",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tokens", Usage: "comma-separated token ids, e.g. 1,5,9 (required)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the tensors to this safetensors file (a new one, or one qpack logits wrote before)"},
			&cli.BoolFlag{Name: "dump-layers", Usage: "also write every layer's output hidden state (needs --output)"},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON object instead of a table"},
			&cli.StringFlag{Name: "revision", Usage: "with a repository id as MODEL: the cached branch, tag or commit", DefaultText: "main"},
			&cli.StringFlag{Name: "cache-dir", Usage: "with a repository id as MODEL: the HF cache root to look in", DefaultText: "$HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub"},
			backendFlag(),
		},
		Action: logitsAction,
	})
}

// parseTokens parses "1,5,9" (spaces allowed) into ids; the vocabulary
// bound is checked once the config is read.
func parseTokens(s string) ([]int, error) {
	var out []int
	for i, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("--tokens: empty entry at position %d", i)
		}
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--tokens: %q at position %d is not a token id", f, i)
		}
		out = append(out, int(v))
	}
	if len(out) == 0 {
		return nil, errors.New("--tokens: no tokens")
	}
	return out, nil
}

type logitsResult struct {
	Model     string       `json:"model"`
	ModelType string       `json:"model_type"`
	Vocab     int          `json:"vocab_size"`
	Layers    int          `json:"layers"`
	Tokens    []int        `json:"tokens"`
	Greedy    []int        `json:"greedy"`
	TopLogit  []float32    `json:"top_logit"`
	Output    string       `json:"output,omitempty"`
	Backend   *backendInfo `json:"backend"`
}

// logitsFlags are the command's flag values; flags may also follow MODEL
// (urfave/cli stops at the first argument), so the tail is parsed again.
type logitsFlags struct {
	tokens, output, backend, revision, cacheDir string
	dump, json                                  bool
}

func parseLogitsArgs(c *cli.Context) (string, logitsFlags, error) {
	f := logitsFlags{tokens: c.String("tokens"), output: c.String("output"), backend: c.String("backend"),
		revision: c.String("revision"), cacheDir: c.String("cache-dir"), dump: c.Bool("dump-layers"), json: c.Bool("json")}
	args := c.Args().Slice()
	if len(args) == 0 {
		return "", f, errors.New("logits: want a MODEL argument")
	}
	if len(args) > 1 {
		fs := flag.NewFlagSet("logits", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.StringVar(&f.tokens, "tokens", f.tokens, "")
		fs.StringVar(&f.output, "output", f.output, "")
		fs.StringVar(&f.output, "o", f.output, "")
		fs.BoolVar(&f.dump, "dump-layers", f.dump, "")
		fs.BoolVar(&f.json, "json", f.json, "")
		fs.StringVar(&f.backend, "backend", f.backend, "")
		fs.StringVar(&f.revision, "revision", f.revision, "")
		fs.StringVar(&f.cacheDir, "cache-dir", f.cacheDir, "")
		if err := fs.Parse(args[1:]); err != nil {
			return "", f, fmt.Errorf("logits: %w", err)
		}
		if fs.NArg() > 0 {
			return "", f, fmt.Errorf("logits: want exactly one MODEL argument, also got %q", fs.Args())
		}
	}
	if f.tokens == "" {
		return "", f, errors.New("logits: --tokens is required")
	}
	if f.dump && f.output == "" {
		return "", f, errors.New("logits: --dump-layers needs --output")
	}
	return args[0], f, nil
}

func logitsAction(c *cli.Context) error {
	arg, flags, err := parseLogitsArgs(c)
	if err != nil {
		return withCode(2, err)
	}
	if flags.output != "" {
		if err := checkLogitsOutput(flags.output); err != nil {
			return withCode(2, err)
		}
	}
	ref, err := resolveModelIn(arg, flags.revision, flags.cacheDir)
	if err != nil {
		return err
	}
	dir := ref.Path
	tokens, err := parseTokens(flags.tokens)
	if err != nil {
		return withCode(2, err)
	}
	dump := flags.dump
	be, err := selectBackend(flags.backend)
	if err != nil {
		return err // its exit code: 2 for no device, 1 for a failure
	}
	defer closeBackend(be)
	// The ids are checked against the vocabulary before the weights load.
	cfg, err := runtime.LoadConfig(dir)
	if err != nil {
		return runner.WrapLoadError(dir, err)
	}
	for i, id := range tokens {
		if id >= cfg.Vocab {
			return withCode(2, fmt.Errorf("--tokens: token id %d at position %d is outside the vocabulary of %s (vocab_size %d: ids 0 to %d)", id, i, dir, cfg.Vocab, cfg.Vocab-1))
		}
	}
	m, err := runtime.Load(dir, &runtime.LoadOptions{Backend: be})
	if err != nil {
		return runner.WrapLoadError(dir, err)
	}
	defer m.Close()
	cfg = m.Config
	T, H, V := len(tokens), cfg.Hidden, cfg.Vocab
	var hidden [][]float32
	opt := &runtime.ForwardOptions{AllLogits: true}
	if dump {
		hidden = make([][]float32, cfg.Layers)
		opt.LayerHook = func(l int, h []float32) { hidden[l] = append([]float32(nil), h[:T*H]...) }
	}
	logits, err := m.Forward(m.NewState(), tokens, opt)
	if err != nil {
		return err
	}
	res := logitsResult{Model: dir, ModelType: cfg.ModelType, Vocab: V, Layers: cfg.Layers, Tokens: tokens,
		Greedy: make([]int, T), TopLogit: make([]float32, T), Output: flags.output}
	for t := range T {
		row := logits[t*V : (t+1)*V]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		res.Greedy[t], res.TopLogit[t] = best, row[best]
	}
	res.Backend = describeBackend(be)
	if res.Output != "" {
		if err := writeLogits(res.Output, tokens, res.Greedy, logits, V, H, hidden); err != nil {
			return err
		}
	}
	out := c.App.Writer
	if flags.json {
		return writeJSON(out, res)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "position\ttoken\tgreedy next\ttop logit\t")
	for t := range T {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.6f\t\n", t, tokens[t], res.Greedy[t], res.TopLogit[t])
	}
	if res.Output != "" {
		fmt.Fprintf(tw, "wrote %s\n", res.Output)
	}
	if flags.backend != "cpu" { // asked for a GPU or auto: say which ran
		fmt.Fprintf(c.App.ErrWriter, "backend: %s\n", res.Backend)
	}
	return tw.Flush()
}

// writeLogits writes input_ids, greedy (I64 [T]), logits (F32 [T, V]) and
// hidden.L (F32 [T, H]) to path, atomically.
// logitsProducer is the __metadata__ "producer" of the files logits writes.
const logitsProducer = "qpack logits"

// checkLogitsOutput refuses, before the forward pass, an --output that the
// atomic rename would replace and that qpack logits did not write: a
// device or FIFO (/dev/null), a directory, or any other file than an
// earlier logits output.
func checkLogitsOutput(path string) error {
	if err := safetensors.CheckOutputPath(path); err != nil {
		return fmt.Errorf("logits: --output %w", err)
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if h, err := safetensors.ReadFileHeader(path); err != nil || h.Metadata["producer"] != logitsProducer {
		return fmt.Errorf("logits: --output %s exists and is not a file qpack logits wrote: move it away or choose another path", path)
	}
	return nil
}

func writeLogits(path string, tokens, greedy []int, logits []float32, V, H int, hidden [][]float32) error {
	T := int64(len(tokens))
	ints := func(v []int) []byte {
		b := make([]byte, 8*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(x)))
		}
		return b
	}
	floats := func(v []float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	specs := []safetensors.Spec{
		{Name: "input_ids", DType: safetensors.I64, Shape: []int64{T}},
		{Name: "greedy", DType: safetensors.I64, Shape: []int64{T}},
		{Name: "logits", DType: safetensors.F32, Shape: []int64{T, int64(V)}},
	}
	data := [][]byte{ints(tokens), ints(greedy), floats(logits)}
	for l, h := range hidden {
		specs = append(specs, safetensors.Spec{Name: fmt.Sprintf("hidden.%d", l), DType: safetensors.F32, Shape: []int64{T, int64(H)}})
		data = append(data, floats(h))
	}
	return safetensors.WriteFile(path, specs, map[string]string{"producer": logitsProducer},
		func(i int, _ safetensors.Spec) (io.Reader, error) { return bytes.NewReader(data[i]), nil })
}
