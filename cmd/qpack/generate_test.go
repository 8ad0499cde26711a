package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/runtime/runner"
)

const genModel = "../../testdata/tiny/qwen3_next-q4g64"

// The heap limit generate sets is process-wide: keep it out of the test
// binary, which runs every command's tests.
func init() { heapMargin = 0 }

func runGenCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runGenCLIReader(t, strings.NewReader(""), args...)
}

// runGenCLIStdin runs the CLI with stdin as its standard input.
func runGenCLIStdin(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runGenCLIReader(t, strings.NewReader(stdin), args...)
}

func runGenCLIReader(t *testing.T, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	app := newApp()
	var out, errw bytes.Buffer
	app.Writer, app.ErrWriter, app.Reader = &out, &errw, stdin
	err = app.Run(append([]string{"qpack"}, args...))
	return out.String(), errw.String(), err
}

// tinyContainer repacks the bundled tiny checkpoint into a container.
func tinyContainer(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(genModel); err != nil {
		t.Fatalf("the committed tiny model is missing: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "tiny.qpack")
	_, err := repack.Run(context.Background(), repack.Options{FromDir: genModel, Output: dst, ToolVersion: "test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

type genJSON struct {
	Model string `json:"model"`
	runReport
}

func TestGenerateCommand(t *testing.T) {
	pack := tinyContainer(t)
	// The same greedy generation through the library on the raw checkpoint.
	want, err := runner.Generate(context.Background(), genModel, runner.GenerateOptions{
		Options: runner.Options{ExpertCache: 1 << 30}, GenOptions: runner.GenOptions{MaxNew: 6},
		Prompt: "Hello there", Chat: true, NoThink: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Flags after MODEL, a small cache, direct reads.
	out, _, err := runGenCLI(t, "generate", pack, "--prompt", "Hello there", "--chat", "--no-think", "--max-new", "6",
		"--json", "--expert-cache", "64KiB", "--io", "direct", "--prefill-chunk", "4")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got genJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("bad JSON %v:\n%s", err, out)
	}
	if !slices.Equal(got.Tokens, want.Tokens) || got.Text != want.Text {
		t.Fatalf("CLI on the container: %v %q; library on the checkpoint: %v %q", got.Tokens, got.Text, want.Tokens, want.Text)
	}
	if got.GeneratedTokens != 6 || got.StopReason != "length" || got.ExpertCacheBytes != 64<<10 || got.PeakRSSBytes <= 0 ||
		got.PrefillTokPerSec <= 0 || got.BytesReadPerToken <= 0 || got.Decode.Requests == 0 || got.HitRate < 0 || got.HitRate > 1 {
		t.Fatalf("report %+v", got.runReport)
	}
	// Six tokens by the length limit: the first from the prefill's logits,
	// five one-token passes, and the rate is over those five.
	if got.DecodeForward != 5 || got.DecodeSeconds <= 0 || math.Abs(got.DecodeTokPerSec-5/got.DecodeSeconds) > 1e-6*got.DecodeTokPerSec {
		t.Errorf("decode: %d forward passes, %g s, %g tok/s; want 5 passes and their rate", got.DecodeForward, got.DecodeSeconds, got.DecodeTokPerSec)
	}
	// Speculative reads are on by default in decode; off, the output is the same.
	if d := got.Decode; d.SpecGuessed == 0 || d.SpecTargets == 0 || d.SpecCorrect > d.SpecTargets {
		t.Errorf("decode speculation report %+v", d)
	}
	out, _, err = runGenCLI(t, "generate", pack, "--prompt", "Hello there", "--chat", "--no-think", "--max-new", "6",
		"--json", "--expert-cache", "64KiB", "--speculate-experts", "off")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var off genJSON
	if err := json.Unmarshal([]byte(out), &off); err != nil {
		t.Fatalf("bad JSON %v:\n%s", err, out)
	}
	if !slices.Equal(off.Tokens, want.Tokens) || off.Decode.SpecGuessed != 0 {
		t.Errorf("--speculate-experts off: tokens %v (want %v), %d experts guessed", off.Tokens, want.Tokens, off.Decode.SpecGuessed)
	}

	// Streaming text and the summary on stderr.
	text, summary, err := runGenCLI(t, "generate", pack, "--prompt", "Hello there", "--chat", "--no-think", "--max-new", "6")
	if err != nil {
		t.Fatal(err)
	}
	if text != want.Text+"\n" {
		t.Errorf("stdout %q, want %q", text, want.Text+"\n")
	}
	for _, s := range []string{"tok/s", "decode: 6 tokens (5 forward passes) in ", "peak RSS", "hit rate", "read per token"} {
		if !strings.Contains(summary, s) {
			t.Errorf("summary lacks %q:\n%s", s, summary)
		}
	}

	for _, bad := range [][]string{
		{"generate", pack},
		{"generate", "--prompt", "x"},
		{"generate", pack, "--prompt", "x", "--expert-cache", "lots"},
		{"generate", pack, "--prompt", "x", "--io", "mmap"},
		{"generate", pack, "--prompt", "x", "--speculate-experts", "lots"},
		{"generate", pack, "--prompt", "x", "--speculate-experts", "-3"},
		{"generate", pack, "--prompt", "x", "--top-p", "2"},
		{"generate", genModel, "--prompt", "x", "--verify-experts"},
	} {
		if _, _, err := runGenCLI(t, bad...); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Sampling without --seed draws a seed and reports it (JSON and summary);
// --seed with the reported value repeats the tokens.
func TestGenerateSeed(t *testing.T) {
	// Without EOS ids every run gives its 12 tokens, whatever the seed.
	args := []string{"generate", endlessModel(t), "--prompt", "Hello there", "--max-new", "12", "--temperature", "1", "--json"}
	var runs []genJSON
	for range 2 {
		out, _, err := runGenCLI(t, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var got genJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("bad JSON %v:\n%s", err, out)
		}
		if !strings.Contains(out, `"seed": `) || got.Temperature != 1 || len(got.Tokens) != 12 {
			t.Fatalf("report lacks the seed or temperature: %s", out)
		}
		runs = append(runs, got)
	}
	if runs[0].Seed == runs[1].Seed {
		t.Fatalf("two runs without --seed both used seed %d", runs[0].Seed)
	}
	for _, r := range runs {
		out, _, err := runGenCLI(t, append(args, "--seed", fmt.Sprint(r.Seed))...)
		if err != nil {
			t.Fatal(err)
		}
		var again genJSON
		if err := json.Unmarshal([]byte(out), &again); err != nil {
			t.Fatal(err)
		}
		if again.Seed != r.Seed || !slices.Equal(again.Tokens, r.Tokens) {
			t.Errorf("--seed %d: seed %d tokens %v, the run that reported it gave %v", r.Seed, again.Seed, again.Tokens, r.Tokens)
		}
	}
	// Random weights at temperature 1: the two seeds give different tokens.
	if slices.Equal(runs[0].Tokens, runs[1].Tokens) {
		t.Errorf("seeds %d and %d gave the same tokens %v", runs[0].Seed, runs[1].Seed, runs[0].Tokens)
	}
	// The summary names the seed.
	_, summary, err := runGenCLI(t, "generate", genModel, "--prompt", "Hello there", "--max-new", "2", "--temperature", "0.8", "--seed", "42")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(summary, "seed 42") {
		t.Errorf("summary does not name the seed:\n%s", summary)
	}
}

// Prompt plus --max-new past the model's max_position_embeddings (4096 in
// the tiny model's config) is refused with exit code 2 before generating.
func TestGenerateContextLimit(t *testing.T) {
	for _, args := range [][]string{
		{"generate", genModel, "--prompt", "Hello there", "--max-new", "4096"},
		{"chat", genModel, "Hello there", "--max-new", "5000"},
	} {
		out, _, err := runGenCLI(t, args...)
		var ee *exitError
		if err == nil || !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "more than the model's max_position_embeddings 4096") {
			t.Errorf("%q: err = %v, want exit 2 naming max_position_embeddings 4096", args, err)
		}
		if out != "" && out != "> Hello there\n" {
			t.Errorf("%q: generated %q before refusing", args, out)
		}
	}
	// Within the limit it runs.
	if _, _, err := runGenCLI(t, "generate", genModel, "--prompt", "Hello there", "--max-new", "2"); err != nil {
		t.Fatal(err)
	}
}

// A path that holds no model: exit 2 with a message saying so, before
// any other work (the tokenizer's or --verify-experts' errors).
func TestGenerateNoModel(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	for _, args := range [][]string{
		{"generate", none, "--prompt", "x"},
		{"generate", none, "--prompt", "x", "--verify-experts"},
		{"chat", none, "x"},
	} {
		_, _, err := runGenCLI(t, args...)
		var ee *exitError
		if err == nil || err.Error() != "model directory "+none+" does not exist" || !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("%q: %v, want exit 2 saying the model directory does not exist", args, err)
		}
	}
}

func TestVerifyExpertsNamesCorruptBlob(t *testing.T) {
	pack := tinyContainer(t)
	// Find an expert the generation uses.
	r, err := runner.Open(pack, runner.Options{ExpertCache: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.NewSession().Generate(context.Background(), r.Tokenizer.Encode("Hello there"), runner.GenOptions{MaxNew: 2}); err != nil {
		t.Fatal(err)
	}
	L, E := r.Model.Config.Layers, r.Model.Config.Experts
	layer, expert := -1, -1
	for l := L - 1; l >= 0 && layer < 0; l-- {
		for e := range E {
			if r.Cache.Resident(l, e) {
				layer, expert = l, e
				break
			}
		}
	}
	r.Close()
	if layer < 0 {
		t.Fatal("no expert was read")
	}
	c, err := qpack.Open(pack)
	if err != nil {
		t.Fatal(err)
	}
	off, _ := c.ExpertOffset(layer, expert)
	path := c.LayerPath(layer)
	c.Close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, off+100)
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off+100); err != nil {
		t.Fatal(err)
	}
	f.Close()

	args := []string{"generate", pack, "--prompt", "Hello there", "--max-new", "2"}
	if _, _, err := runGenCLI(t, args...); err != nil {
		t.Fatalf("without --verify-experts the damage goes unnoticed, but the run failed: %v", err)
	}
	_, _, err = runGenCLI(t, append(args, "--verify-experts")...)
	// The container once, then the layer file, layer and expert once.
	want := fmt.Sprintf("--verify-experts: %s: %s: layer %d expert %d: expert blob does not match its digest", pack, qpack.LayerFile(layer), layer, expert)
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), fmt.Sprintf("layer %d ", layer)) != 1 {
		t.Fatalf("error %v, want one starting %q", err, want)
	}
	// Undamaged, the check passes.
	b[0] ^= 0x40
	f, _ = os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt(b, off+100)
	f.Close()
	if _, _, err := runGenCLI(t, append(args, "--verify-experts")...); err != nil {
		t.Fatalf("intact container: %v", err)
	}
}

func TestChatCommand(t *testing.T) {
	pack := tinyContainer(t)
	out, _, err := runGenCLI(t, "chat", pack, "first turn", "second turn", "--max-new", "4", "--no-think", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got struct {
		Turns []struct {
			User string `json:"user"`
			runReport
		} `json:"turns"`
		StateTokens int `json:"state_tokens"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("bad JSON %v:\n%s", err, out)
	}
	if len(got.Turns) != 2 || got.Turns[0].User != "first turn" || got.Turns[1].User != "second turn" {
		t.Fatalf("turns %+v", got.Turns)
	}
	// Turn 2 prefills only itself: the state holds turn 1's prompt and
	// reply (all but a token ending it) and turn 2's prompt and reply.
	t1, t2 := got.Turns[0], got.Turns[1]
	if t2.PromptTokens >= t1.PromptTokens+t2.PromptTokens-1 || got.StateTokens < t1.PromptTokens+t2.PromptTokens+t1.GeneratedTokens-1 {
		t.Errorf("turn prompts %d and %d, %d tokens in the state", t1.PromptTokens, t2.PromptTokens, got.StateTokens)
	}
	// Without TURN arguments and with standard input not a terminal, the
	// turns are its lines (tested in run_test.go); an empty input is no turn.
	out, _, err = runGenCLIStdin(t, "", "chat", pack, "--json")
	if err != nil || !strings.Contains(out, `"turns": []`) {
		t.Errorf("chat with an empty standard input: %v\n%s", err, out)
	}
}
