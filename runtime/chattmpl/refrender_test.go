package chattmpl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefRenders compares Render with what transformers 5.17's
// apply_chat_template gave on the device machine for the two Gemma 4
// templates and the Qwen3.5 template (testdata/refrender: render_reference.py
// -> reference.json). A render transformers refused must fail here too.
func TestRefRenders(t *testing.T) {
	dir := filepath.Join("testdata", "refrender")
	var convs []conversation
	data, err := os.ReadFile(filepath.Join(dir, "conversations.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &convs); err != nil {
		t.Fatal(err)
	}
	var ref map[string]map[string]string
	data, err = os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	names := []string{"gemma4.2026-04-10.jinja", "gemma4.2026-04-28.jinja", "qwen3_5.jinja"}
	templates := map[string]*Template{}
	for _, name := range names {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if templates[name], err = Parse(name, string(src)); err != nil {
			t.Fatal(err)
		}
	}
	n, refused := 0, 0
	for _, c := range convs {
		msgs, opts := c.inputs()
		// transformers passes the tokenizer's special tokens; the Gemma
		// templates open with bos_token.
		opts.BOSToken, opts.EOSToken = "<bos>", "<eos>"
		for _, tname := range names {
			want, ok := ref[c.Name][tname]
			if !ok {
				t.Fatalf("no reference for %s/%s", c.Name, tname)
			}
			got, err := templates[tname].Render(msgs, opts)
			if strings.HasPrefix(want, "ERROR: ") {
				// transformers refuses an empty conversation before the
				// template runs; chattmpl leaves that to its caller.
				if len(msgs) == 0 {
					continue
				}
				if err == nil {
					t.Errorf("%s/%s: rendered %q, transformers refused: %s", c.Name, tname, got, want)
				}
				refused++
				continue
			}
			if err != nil {
				t.Errorf("%s/%s: %v", c.Name, tname, err)
				continue
			}
			if got != want {
				t.Errorf("%s/%s:\n got  %q\n want %q", c.Name, tname, got, want)
			}
			n++
		}
	}
	if n < 50 || refused < 2 {
		t.Fatalf("only %d renders compared, %d refusals", n, refused)
	}
}

// A model directory's tokenizer_config.json supplies bos_token, as
// transformers does: the Gemma 4 prompt then opens with <bos> although the
// caller sets no BOSToken (the runner and server do not).
func TestLoadDirSpecialTokens(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("testdata", "refrender")
	for from, to := range map[string]string{"gemma4.2026-04-28.jinja": "chat_template.jinja", "gemma4.tokenizer_config.json": "tokenizer_config.json"} {
		data, err := os.ReadFile(filepath.Join(src, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ref map[string]map[string]string
	data, err := os.ReadFile(filepath.Join(src, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	want := ref["single_user"]["gemma4.2026-04-28.jinja"]
	if !strings.HasPrefix(want, "<bos><|turn>user\n") {
		t.Fatalf("reference %q", want)
	}
	got, err := tpl.Render([]Message{{Role: "user", Content: "Hello"}}, Options{AddGenerationPrompt: true})
	if err != nil || got != want {
		t.Errorf("got %q, %v\nwant %q", got, err, want)
	}
	// The caller's value wins.
	if got, _ := tpl.Render([]Message{{Role: "user", Content: "Hello"}}, Options{BOSToken: "[B]"}); !strings.HasPrefix(got, "[B]<|turn>") {
		t.Errorf("BOSToken not used: %q", got)
	}
	// A malformed special token is refused, naming the file.
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token": 7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json") || !strings.Contains(err.Error(), "bos_token") {
		t.Errorf("bad bos_token: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token": {"content": "<s>", "lstrip": false}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if tpl, err = LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	if got, _ := tpl.Render([]Message{{Role: "user", Content: "Hello"}}, Options{}); !strings.HasPrefix(got, "<s><|turn>") {
		t.Errorf("AddedToken form: %q", got)
	}
}
