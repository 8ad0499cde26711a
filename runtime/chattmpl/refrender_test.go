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
