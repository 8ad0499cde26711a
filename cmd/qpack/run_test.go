package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime/runner"
	"github.com/qpack-go/qpack/runtime/tokenizer"
)

// copyModel copies the tiny checkpoint to a temporary directory and lets
// edit change its small files there.
func copyModel(t *testing.T, edit func(dir string)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(genModel)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(genModel, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if edit != nil {
		edit(dir)
	}
	return dir
}

// editJSON rewrites one JSON object file of dir.
func editJSON(t *testing.T, dir, name string, edit func(m map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, name)
	m := map[string]any{}
	if data, err := os.ReadFile(p); err == nil {
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
	}
	edit(m)
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

type genOut struct {
	Model     string `json:"model"`
	ModelPath string `json:"model_path"`
	runReport
}

func genJSONRun(t *testing.T, stdin string, args ...string) genOut {
	t.Helper()
	out, stderr, err := runGenCLIStdin(t, stdin, append(args, "--json")...)
	if err != nil {
		t.Fatalf("%q: %v\n%s\n%s", args, err, out, stderr)
	}
	var g genOut
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("%q: bad JSON %v:\n%s", args, err, out)
	}
	return g
}

func wantExit2(t *testing.T, err error, substr string, args ...string) {
	t.Helper()
	var ee *exitError
	if err == nil || !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), substr) {
		t.Errorf("%q: error %v, want exit 2 saying %q", args, err, substr)
	}
}

func tinyTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.LoadDir(genModel)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// --prompt - reads the prompt from standard input: the same run as the
// prompt given on the command line; empty, non-UTF-8 and oversized input
// are refused with exit 2.
func TestGeneratePromptStdin(t *testing.T) {
	want := genJSONRun(t, "", "generate", genModel, "--prompt", "Hello there\n", "-m", "5")
	got := genJSONRun(t, "Hello there\n", "generate", genModel, "--prompt", "-", "-m", "5")
	if !slices.Equal(got.PromptIDs, want.PromptIDs) || !slices.Equal(got.Tokens, want.Tokens) || len(got.PromptIDs) == 0 {
		t.Errorf("--prompt -: prompt %v tokens %v; --prompt TEXT: %v %v", got.PromptIDs, got.Tokens, want.PromptIDs, want.Tokens)
	}
	for _, c := range []struct {
		stdin io.Reader
		msg   string
	}{
		{strings.NewReader(""), "standard input is empty"},
		{strings.NewReader("\xff\xfe bad"), "not UTF-8"},
		{io.LimitReader(zeros{}, maxStdinPrompt+1), "more than 16.00 MiB"},
	} {
		_, _, err := runGenCLIReader(t, c.stdin, "generate", genModel, "-p", "-")
		wantExit2(t, err, "--prompt -: ", "generate", "-p", "-")
		if err != nil && !strings.Contains(err.Error(), c.msg) {
			t.Errorf("error %v, want it to say %q", err, c.msg)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// The chat template applies by default: with a real Qwen3 template in
// place of the tiny model's, the prefilled tokens are those of the text
// transformers' apply_chat_template renders (committed in
// runtime/chattmpl/testdata/reference.json), and the reply is what a raw
// generation from those tokens gives. --chat changes nothing;
// --no-chat-template prefills the prompt as raw text.
func TestGenerateTemplateDefault(t *testing.T) {
	td := filepath.Join("..", "..", "runtime", "chattmpl", "testdata")
	var refs map[string]map[string]string
	data, err := os.ReadFile(filepath.Join(td, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &refs); err != nil {
		t.Fatal(err)
	}
	var q4 struct {
		ChatTemplate string `json:"chat_template"`
	}
	data, err = os.ReadFile(filepath.Join(td, "tokenizer_config.Qwen3-4B.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &q4); err != nil || q4.ChatTemplate == "" {
		t.Fatalf("Qwen3-4B template: %v", err)
	}
	model := copyModel(t, func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(q4.ChatTemplate), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	tok := tinyTokenizer(t)
	r, err := runner.Open(genModel, runner.Options{ExpertCache: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct {
		ref  string
		args []string
	}{
		{"single_user", []string{"--prompt", "Hello"}},
		{"system", []string{"--prompt", "Hi", "--system", "You are a bot."}},
		{"system", []string{"--prompt", "Hi", "--system-prompt", "You are a bot.", "--chat"}},
	} {
		text := refs[c.ref]["qwen3-4b-config"]
		if text == "" {
			t.Fatalf("no reference render %s", c.ref)
		}
		got := genJSONRun(t, "", append([]string{"generate", model, "-m", "6"}, c.args...)...)
		wantIDs := tok.Encode(text)
		if !got.ChatTemplate || !slices.Equal(got.PromptIDs, wantIDs) || got.PromptTokens != len(wantIDs) {
			t.Errorf("%q: prompt %v (template %v), want the tokens of %q: %v", c.args, got.PromptIDs, got.ChatTemplate, text, wantIDs)
			continue
		}
		res, err := r.NewSession().Generate(context.Background(), wantIDs, runner.GenOptions{MaxNew: 6})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Tokens, res.Tokens) {
			t.Errorf("%q: tokens %v, a raw generation from the rendered prompt gives %v", c.args, got.Tokens, res.Tokens)
		}
	}
	for _, flag := range []string{"--no-chat-template", "--ignore-chat-template"} {
		raw := genJSONRun(t, "", "generate", model, "--prompt", "Hello", "-m", "3", flag)
		if raw.ChatTemplate || !slices.Equal(raw.PromptIDs, tok.Encode("Hello")) {
			t.Errorf("%s: prompt %v (template %v), want the raw text's %v", flag, raw.PromptIDs, raw.ChatTemplate, tok.Encode("Hello"))
		}
	}
	for _, args := range [][]string{
		{"generate", model, "--prompt", "Hi", "--no-chat-template", "--system", "x"},
		{"generate", model, "--prompt", "Hi", "--no-chat-template", "--no-think"},
	} {
		_, _, err := runGenCLI(t, args...)
		wantExit2(t, err, "needs a chat template to apply, and --no-chat-template sends the prompt as raw text", args...)
	}
	_, _, err = runGenCLI(t, "generate", model, "--prompt", "Hi", "--no-chat-template", "--chat")
	wantExit2(t, err, "contradict")
}

// A model without a chat template: generate sends raw text, and --system,
// --no-think and --chat are errors (exit 2), not silently ignored.
func TestGenerateWithoutTemplate(t *testing.T) {
	model := copyModel(t, func(dir string) {
		editJSON(t, dir, "tokenizer_config.json", func(m map[string]any) { delete(m, "chat_template") })
	})
	tok := tinyTokenizer(t)
	got := genJSONRun(t, "", "generate", model, "--prompt", "Hello there", "-m", "3")
	if got.ChatTemplate || !slices.Equal(got.PromptIDs, tok.Encode("Hello there")) {
		t.Errorf("prompt %v (template %v), want the raw text's %v", got.PromptIDs, got.ChatTemplate, tok.Encode("Hello there"))
	}
	for _, c := range []struct {
		flags []string
		msg   string
	}{
		{[]string{"--system", "Be brief."}, "--system needs a chat template to apply, and " + model + " has no chat template"},
		{[]string{"--no-think"}, "--no-think needs a chat template"},
		{[]string{"--chat"}, "--chat: " + model + " has no chat template"},
	} {
		args := append([]string{"generate", model, "--prompt", "Hi"}, c.flags...)
		out, _, err := runGenCLI(t, args...)
		wantExit2(t, err, c.msg, args...)
		if out != "" {
			t.Errorf("%q: wrote %q before refusing", args, out)
		}
	}
}

// Sampling defaults come from generation_config.json as transformers reads
// it, flags override them, and --json says what was used and where from.
func TestGenerateSamplingDefaults(t *testing.T) {
	withGen := func(gen map[string]any) string {
		return copyModel(t, func(dir string) {
			editJSON(t, dir, "generation_config.json", func(m map[string]any) {
				for k, v := range gen {
					m[k] = v
				}
			})
		})
	}
	greedy := genJSONRun(t, "", "generate", genModel, "--prompt", "Hello there", "-m", "8")
	if s := greedy.Sampling; s == nil || s.Mode != "greedy" || s.Temperature != 0 || s.Why != "generation_config.json has no do_sample" {
		t.Fatalf("tiny model (no do_sample): %+v", greedy.Sampling)
	}
	// A filter flag without sampling changes nothing (and is reported so).
	if g := genJSONRun(t, "", "generate", genModel, "--prompt", "Hello there", "-m", "8", "--top-k", "3"); g.Sampling.Mode != "greedy" ||
		g.Sampling.TopK != 0 || g.Sampling.Sources["top_k"] != fromGreedy || !slices.Equal(g.Tokens, greedy.Tokens) {
		t.Errorf("--top-k 3 when greedy: %+v tokens %v, want greedy %v", g.Sampling, g.Tokens, greedy.Tokens)
	}
	// do_sample false with sampling values: still greedy.
	off := withGen(map[string]any{"do_sample": false, "temperature": 0.7, "top_k": 3})
	if g := genJSONRun(t, "", "generate", off, "--prompt", "Hello there", "-m", "8"); g.Sampling.Mode != "greedy" || !slices.Equal(g.Tokens, greedy.Tokens) {
		t.Errorf("do_sample false: %+v tokens %v, want greedy %v", g.Sampling, g.Tokens, greedy.Tokens)
	}

	// do_sample true: the file's values; the same as giving them as flags.
	on := withGen(map[string]any{"do_sample": true, "temperature": 0.7, "top_k": 20, "top_p": 0.9})
	a := genJSONRun(t, "", "generate", on, "--prompt", "Hello there", "-m", "12", "--seed", "5")
	s := a.Sampling
	if s.Mode != "sample" || s.Temperature != 0.7 || s.TopK != 20 || s.TopP != 0.9 || s.Seed != 5 ||
		s.Sources["temperature"] != fromGenConfig || s.Sources["top_k"] != fromGenConfig || s.Sources["seed"] != fromFlag || s.Sources["min_p"] != fromTransformers {
		t.Errorf("do_sample true: %+v", s)
	}
	b := genJSONRun(t, "", "generate", genModel, "--prompt", "Hello there", "-m", "12", "--seed", "5", "--temp", "0.7", "--top-k", "20", "--top-p", "0.9")
	if !slices.Equal(a.Tokens, b.Tokens) || b.Sampling.Sources["top_k"] != fromFlag {
		t.Errorf("generation_config.json values: %v; the same as flags: %v (%+v)", a.Tokens, b.Tokens, b.Sampling)
	}
	again := genJSONRun(t, "", "generate", on, "--prompt", "Hello there", "-m", "12", "--seed", "5")
	if !slices.Equal(again.Tokens, a.Tokens) {
		t.Errorf("--seed 5 twice: %v then %v", a.Tokens, again.Tokens)
	}
	// Without --seed a seed is drawn and reported.
	if r := genJSONRun(t, "", "generate", on, "--prompt", "Hello there", "-m", "2"); r.Sampling.Sources["seed"] != fromRandom || r.Seed != r.Sampling.Seed {
		t.Errorf("no --seed: %+v (seed %d)", r.Sampling, r.Seed)
	}
	// --temperature 0 is greedy whatever the file says.
	if g := genJSONRun(t, "", "generate", on, "--prompt", "Hello there", "-m", "8", "--temperature", "0"); g.Sampling.Mode != "greedy" || !slices.Equal(g.Tokens, greedy.Tokens) || g.Sampling.Why != "--temperature 0" {
		t.Errorf("--temperature 0: %+v tokens %v, want greedy %v", g.Sampling, g.Tokens, greedy.Tokens)
	}
	// A flag overrides one value; the rest stay the file's.
	if g := genJSONRun(t, "", "generate", on, "--prompt", "Hello there", "-m", "2", "--top-k", "3"); g.Sampling.TopK != 3 || g.Sampling.Sources["top_k"] != fromFlag || g.Sampling.TopP != 0.9 {
		t.Errorf("--top-k 3 over the file: %+v", g.Sampling)
	}
	// do_sample true alone: transformers' defaults.
	bare := withGen(map[string]any{"do_sample": true})
	if g := genJSONRun(t, "", "generate", bare, "--prompt", "Hello there", "-m", "2"); g.Sampling.Temperature != 1 || g.Sampling.TopK != 50 ||
		g.Sampling.Sources["top_k"] != fromTransformers {
		t.Errorf("do_sample true alone: %+v, want temperature 1 and top_k 50 as transformers' defaults", g.Sampling)
	}
	// The summary line says it too.
	_, summary, err := runGenCLI(t, "generate", on, "--prompt", "Hello there", "-m", "2", "--seed", "9")
	if err != nil || !strings.Contains(summary, "sampling: sampled (generation_config.json: do_sample true), temperature 0.7 (generation_config.json), top_k 20 (generation_config.json), top_p 0.9 (generation_config.json); seed 9") {
		t.Errorf("summary:\n%s", summary)
	}
	// A bad value in the file: exit 2 naming the file and the field.
	bad := withGen(map[string]any{"do_sample": true, "top_p": 7})
	_, _, err = runGenCLI(t, "generate", bad, "--prompt", "x")
	wantExit2(t, err, filepath.Join(bad, "generation_config.json")+": top_p 7")
}

// fakeCache lays out an official Hugging Face cache holding the tiny
// checkpoint as org/tiny: blobs, a snapshot of links into them, refs/main.
func fakeCache(t *testing.T) (root, commit string) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "hub")
	commit = strings.Repeat("ab12", 10)
	repo := filepath.Join(root, "models--org--tiny")
	snap := filepath.Join(repo, "snapshots", commit)
	for _, d := range []string{filepath.Join(repo, "blobs"), snap, filepath.Join(repo, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(genModel)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range ents {
		data, err := os.ReadFile(filepath.Join(genModel, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		blob := fmt.Sprintf("%064x", i+1)
		if err := os.WriteFile(filepath.Join(repo, "blobs", blob), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, commit
}

// MODEL as a repository id runs the checkpoint cached for it; what is not
// cached, or cached only in part, is a clear exit-2 error saying how to get
// it.
func TestGenerateRepoID(t *testing.T) {
	root, commit := fakeCache(t)
	t.Setenv("HF_HUB_CACHE", root)
	snap := filepath.Join(root, "models--org--tiny", "snapshots", commit)
	want := genJSONRun(t, "", "generate", genModel, "--prompt", "Hello there", "-m", "5")
	for _, args := range [][]string{
		{"generate", "org/tiny", "--prompt", "Hello there", "-m", "5"},
		{"generate", "org/tiny", "--revision", commit, "--prompt", "Hello there", "-m", "5"},
		{"generate", "org/tiny", "--revision", "main", "--prompt", "Hello there", "-m", "5"},
	} {
		got := genJSONRun(t, "", args...)
		if got.Model != "org/tiny" || got.ModelPath != snap || !slices.Equal(got.Tokens, want.Tokens) {
			t.Errorf("%q: model %s at %s, tokens %v; want %s and %v", args, got.Model, got.ModelPath, got.Tokens, snap, want.Tokens)
		}
	}
	// HF_HOME/hub, and --cache-dir over the environment.
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", filepath.Dir(root))
	if got := genJSONRun(t, "", "generate", "org/tiny", "--prompt", "Hello there", "-m", "5"); got.ModelPath != snap {
		t.Errorf("HF_HOME: model at %s, want %s", got.ModelPath, snap)
	}
	t.Setenv("HF_HOME", t.TempDir())
	if got := genJSONRun(t, "", "generate", "org/tiny", "--cache-dir", root, "--prompt", "Hello there", "-m", "5"); got.ModelPath != snap {
		t.Errorf("--cache-dir: model at %s, want %s", got.ModelPath, snap)
	}
	t.Setenv("HF_HUB_CACHE", root)
	out, _, err := runGenCLI(t, "chat", "org/tiny", "hello", "-m", "2", "--json")
	if err != nil || !strings.Contains(out, `"model_path": "`+snap+`"`) {
		t.Errorf("chat org/tiny: %v\n%s", err, out)
	}
	// logits takes a repository id too.
	if out, _, err := runGenCLI(t, "logits", "org/tiny", "--tokens", "1,2,3", "--json"); err != nil || !strings.Contains(out, `"greedy"`) {
		t.Errorf("logits org/tiny: %v\n%s", err, out)
	}

	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"org/none"}, "no repository org/none in the Hugging Face cache " + root + ": get it with `qpack download org/none`"},
		{[]string{"org/none"}, "`qpack repack --from-hf org/none --output none.qpack`"},
		{[]string{"org/tiny", "--revision", "v2"}, "org/tiny@v2 is not in the Hugging Face cache " + root + " (no refs/v2; cached snapshots: " + commit + " (pass one with --revision))"},
		{[]string{"org/tiny", "--revision", "../../x"}, "--revision \"../../x\": not a branch, tag or commit name"},
		{[]string{"org/tiny", "--revision", strings.Repeat("0", 40)}, "has no snapshot " + strings.Repeat("0", 40)},
		{[]string{genModel, "--revision", "main"}, "is a path, not a Hub repository id"},
		{[]string{"org/x--y"}, "not a Hub repository id"},
	} {
		args := append([]string{"generate"}, c.args...)
		args = append(args, "--prompt", "x")
		_, _, err := runGenCLI(t, args...)
		wantExit2(t, err, c.msg, args...)
	}
	// A one-part name runs when the cache has it, and reads as a path
	// otherwise.
	if err := os.Rename(filepath.Join(root, "models--org--tiny"), filepath.Join(root, "models--tiny")); err != nil {
		t.Fatal(err)
	}
	if got := genJSONRun(t, "", "generate", "tiny", "--prompt", "Hello there", "-m", "5"); !slices.Equal(got.Tokens, want.Tokens) {
		t.Errorf("one-part id: %v, want %v", got.Tokens, want.Tokens)
	}
	_, _, err = runGenCLI(t, "generate", "tiny2", "--prompt", "x")
	wantExit2(t, err, "model directory tiny2 does not exist")

	// An incomplete snapshot: a shard the index names is missing.
	snap = filepath.Join(root, "models--tiny", "snapshots", commit)
	if err := os.Remove(filepath.Join(snap, "model-00002-of-00002.safetensors")); err != nil {
		t.Fatal(err)
	}
	_, _, err = runGenCLI(t, "generate", "tiny", "--prompt", "x")
	wantExit2(t, err, "tiny@main in the Hugging Face cache ("+snap+") is incomplete: it lacks model-00002-of-00002.safetensors; complete it with `qpack download tiny`")
	// A prebuilt container in the cache cannot run from there.
	if err := os.WriteFile(filepath.Join(snap, "manifest.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = runGenCLI(t, "generate", "tiny", "--prompt", "x")
	wantExit2(t, err, "is a prebuilt .qpack container")
}

type chatOut struct {
	Turns []struct {
		User string `json:"user"`
		runReport
	} `json:"turns"`
	StateTokens int `json:"state_tokens"`
}

// chat without TURN arguments and a standard input that is not a terminal
// takes a turn per line: /reset starts over (the next turn is the same as
// a first turn), /exit ends, empty lines are skipped.
func TestChatStdinTurns(t *testing.T) {
	args := []string{"chat", genModel, "-m", "4", "--no-think", "--json"}
	out, _, err := runGenCLIStdin(t, "first turn\n\nsecond turn\n/reset\nfirst turn\n/exit\nnever\n", args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got chatOut
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("bad JSON %v:\n%s", err, out)
	}
	users := []string{}
	for _, tr := range got.Turns {
		users = append(users, tr.User)
	}
	if !slices.Equal(users, []string{"first turn", "second turn", "first turn"}) {
		t.Fatalf("turns %q", users)
	}
	t1, t2, t3 := got.Turns[0], got.Turns[1], got.Turns[2]
	if t3.PromptTokens != t1.PromptTokens || !slices.Equal(t3.Tokens, t1.Tokens) || t2.PromptTokens >= t1.PromptTokens+t2.PromptTokens-1 {
		t.Errorf("after /reset: %d prompt tokens %v; first turn %d %v; second turn prefilled %d", t3.PromptTokens, t3.Tokens, t1.PromptTokens, t1.Tokens, t2.PromptTokens)
	}
	// The same turns as arguments give the same replies.
	out, _, err = runGenCLI(t, "chat", genModel, "first turn", "second turn", "-m", "4", "--no-think", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var argRun chatOut
	if err := json.Unmarshal([]byte(out), &argRun); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(argRun.Turns[1].Tokens, t2.Tokens) {
		t.Errorf("turn 2 from arguments %v, from standard input %v", argRun.Turns[1].Tokens, t2.Tokens)
	}
	// Text mode echoes each turn.
	text, _, err := runGenCLIStdin(t, "hello\n", "chat", genModel, "-m", "2")
	if err != nil || !strings.HasPrefix(text, "> hello\n") {
		t.Errorf("text mode: %v %q", err, text)
	}
}

// chat on a model without a chat template writes the turns in ChatML,
// --system and --no-think included.
func TestChatWithoutTemplate(t *testing.T) {
	model := copyModel(t, func(dir string) {
		editJSON(t, dir, "tokenizer_config.json", func(m map[string]any) { delete(m, "chat_template") })
	})
	out, _, err := runGenCLI(t, "chat", model, "hi", "--no-think", "--system", "Be brief.", "-m", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got chatOut
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Turns) != 1 {
		t.Fatalf("%v\n%s", err, out)
	}
	want := tinyTokenizer(t).Encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
	if tr := got.Turns[0]; tr.PromptTokens != len(want) || !slices.Equal(tr.PromptIDs, want) {
		t.Errorf("prompt %v, want the ChatML rendering's %v", tr.PromptIDs, want)
	}
}
