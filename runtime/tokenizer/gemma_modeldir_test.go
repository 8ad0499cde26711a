package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime/chattmpl"
	"github.com/qpack-go/qpack/runtime/sample"
)

// TestGemma4ModelDir follows a Gemma 4 model directory the way the runner
// reads one (tokenizer.LoadDir, chattmpl.LoadDir, sample.LoadEOS) with the
// real files: the chat prompt is the ids tokenizers gave for transformers'
// render, and generation stops at <eos>, <|tool_response> and <turn|>, the
// end of a model turn in that prompt format.
func TestGemma4ModelDir(t *testing.T) {
	raw, _ := gemmaJSON(t)
	dir := t.TempDir()
	files := map[string]string{
		"tokenizer_config.json":  refdataFile(t, "tokenizer/gemma4/tokenizer_config.json"),
		"chat_template.jinja":    refdataFile(t, "tokenizer/gemma4/chat_template.2026-04-28.jinja"),
		"generation_config.json": refdataFile(t, "configs/gemma-4-26B-A4B-it.generation_config.json"),
	}
	for to, from := range files {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := chattmpl.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	eos, err := sample.LoadEOS(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 50, 106}; !slices.Equal(eos, want) {
		t.Errorf("EOS %v, want %v", eos, want)
	}
	if id, _ := tok.TokenID("<turn|>"); !slices.Contains(eos, id) {
		t.Errorf("<turn|> (%d) does not stop generation", id)
	}

	var exp gemmaExpected
	if err := json.Unmarshal(gunzipFile(t, filepath.Join(gemmaDir, "expected.json.gz")), &exp); err != nil {
		t.Fatal(err)
	}
	var ref map[string]map[string]string
	data, err := os.ReadFile("../chattmpl/testdata/refrender/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	want := ref["multi_turn"]["gemma4.2026-04-28.jinja"]
	var wantIDs []int
	for _, r := range exp.Variants["gemma4"].Renders {
		if r.Text == want {
			wantIDs = r.IDs
		}
	}
	if wantIDs == nil {
		t.Fatal("no reference ids for the multi_turn render")
	}
	msgs := []chattmpl.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "What is 2+2?"},
		{Role: "assistant", Content: "4"}, {Role: "user", Content: "And 3+3?"}}
	text, err := tpl.Render(msgs, chattmpl.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if text != want {
		t.Fatalf("render %q, want %q", text, want)
	}
	ids := tok.Encode(text)
	if !slices.Equal(ids, wantIDs) {
		t.Errorf("prompt ids %v, want %v", ids, wantIDs)
	}
	if bos, _ := tok.TokenID("<bos>"); len(ids) == 0 || ids[0] != bos {
		t.Errorf("the prompt does not open with <bos>: %v", ids[:min(3, len(ids))])
	}
}
