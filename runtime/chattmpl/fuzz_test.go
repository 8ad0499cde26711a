package chattmpl

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// FuzzFromConfig: arbitrary tokenizer_config.json bytes never panic the
// loader, and a template that loads renders (or fails) without panicking.
func FuzzFromConfig(f *testing.F) {
	if data, err := os.ReadFile("testdata/tokenizer_config.Qwen3-4B.json"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"chat_template": "{% for m in messages %}{{ m.role }}: {{ m.content|tojson }}\n{% endfor %}"}`))
	f.Add([]byte(`{"chat_template": [{"name": "default", "template": "{{ messages[::-1]|length }}"}, {"name": "tool_use", "template": "{{ tools|tojson(indent=2) }}"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tpl, err := FromConfig("fuzz.json", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.json") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		msgs := []Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"},
			{Role: "assistant", Content: "<think>\nr\n</think>\n\na", ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`{"k": [1, 2.5]}`)}}}}
		opts := Options{AddGenerationPrompt: true, EnableThinking: ptr(false), Tools: []json.RawMessage{json.RawMessage(`{"type": "function"}`)}}
		_, _ = Render(tpl, msgs, opts)
	})
}

// FuzzRenderQwen: any message content and tool JSON render through the
// real Qwen3 template without panicking, and plain content comes out verbatim.
func FuzzRenderQwen(f *testing.F) {
	f.Add("Hello", "<think>\nx\n</think>\n\ny", `{"type": "function", "function": {"name": "f"}}`)
	f.Add("<tool_response>\nr\n</tool_response>", "", `[]`)
	f.Add("{{ 1 }}{% if %}", "\u2028\x00", `{"a": "\ud83d\ude00"}`)
	src, err := os.ReadFile("testdata/chat_template.Qwen3-0.6B.jinja")
	if err != nil {
		f.Fatal(err)
	}
	tpl, err := Parse("qwen", string(src))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, user, assistant, tool string) {
		msgs := []Message{{Role: "user", Content: user}, {Role: "assistant", Content: assistant}, {Role: "user", Content: "again"}}
		out, err := tpl.Render(msgs, Options{AddGenerationPrompt: true, Tools: []json.RawMessage{json.RawMessage(tool)}})
		if err != nil {
			if json.Valid([]byte(tool)) {
				t.Fatalf("valid input failed: %v", err)
			}
			return
		}
		if !strings.Contains(out, "<|im_start|>user\n"+user+"<|im_end|>\n") {
			t.Fatalf("user content not rendered verbatim: %q", out)
		}
	})
}
