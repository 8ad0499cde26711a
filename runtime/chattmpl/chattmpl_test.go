package chattmpl

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func loadQwen06(t *testing.T) *Template {
	t.Helper()
	data, err := os.ReadFile("testdata/chat_template.Qwen3-0.6B.jinja")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := Parse("chat_template.Qwen3-0.6B.jinja", string(data))
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func ptr[T any](v T) *T { return &v }

// Expected strings written by hand from the ChatML rules of the reference
// notes (model-math.md section 5): each turn "<|im_start|>{role}\n{content}<|im_end|>\n",
// the generation prompt "<|im_start|>assistant\n", enable_thinking=false adds
// "<think>\n\n</think>\n\n", no default system prompt, and past assistant
// turns lose their <think> block.
func TestQwen3TemplateHandWritten(t *testing.T) {
	tpl := loadQwen06(t)
	cases := []struct {
		name string
		msgs []Message
		opts Options
		want string
	}{
		{
			name: "one user turn",
			msgs: []Message{{Role: "user", Content: "Hello"}},
			opts: Options{AddGenerationPrompt: true},
			want: "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "thinking off",
			msgs: []Message{{Role: "user", Content: "Hello"}},
			opts: Options{AddGenerationPrompt: true, EnableThinking: ptr(false)},
			want: "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
		},
		{
			name: "thinking on changes nothing",
			msgs: []Message{{Role: "user", Content: "Hello"}},
			opts: Options{AddGenerationPrompt: true, EnableThinking: ptr(true)},
			want: "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "no generation prompt",
			msgs: []Message{{Role: "user", Content: "Hello"}},
			opts: Options{EnableThinking: ptr(false)},
			want: "<|im_start|>user\nHello<|im_end|>\n",
		},
		{
			name: "system message",
			msgs: []Message{{Role: "system", Content: "You are a bot."}, {Role: "user", Content: "Hi"}},
			opts: Options{AddGenerationPrompt: true},
			want: "<|im_start|>system\nYou are a bot.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "past assistant turn loses its think block",
			msgs: []Message{
				{Role: "system", Content: "Be brief."},
				{Role: "user", Content: "What is 2+2?"},
				{Role: "assistant", Content: "<think>\nAdd them.\n</think>\n\n4"},
				{Role: "user", Content: "And 3+3?"},
			},
			opts: Options{AddGenerationPrompt: true, EnableThinking: ptr(false)},
			want: "<|im_start|>system\nBe brief.<|im_end|>\n" +
				"<|im_start|>user\nWhat is 2+2?<|im_end|>\n" +
				"<|im_start|>assistant\n4<|im_end|>\n" +
				"<|im_start|>user\nAnd 3+3?<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\n\n</think>\n\n",
		},
		{
			name: "assistant turn after the last user query keeps it",
			msgs: []Message{
				{Role: "user", Content: "Q"},
				{Role: "assistant", Content: "<think>\nR\n</think>\n\nA"},
			},
			want: "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n",
		},
		{
			name: "content is not escaped",
			msgs: []Message{{Role: "user", Content: "<b>&amp;</b> \"q\" 你好"}},
			opts: Options{AddGenerationPrompt: true},
			want: "<|im_start|>user\n<b>&amp;</b> \"q\" 你好<|im_end|>\n<|im_start|>assistant\n",
		},
	}
	for _, c := range cases {
		got, err := tpl.Render(c.msgs, c.opts)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got  %q\n want %q", c.name, got, c.want)
		}
		// Without tools or reasoning fields the ChatML fallback agrees,
		// except that it cannot strip think blocks.
		if !strings.Contains(c.name, "think block") && !strings.Contains(c.name, "keeps it") {
			if fb := ChatML(c.msgs, c.opts); fb != c.want {
				t.Errorf("%s: ChatML fallback %q", c.name, fb)
			}
		}
	}
}

// conversation is one case of testdata/conversations.json.
type conversation struct {
	Name                string `json:"name"`
	AddGenerationPrompt bool   `json:"add_generation_prompt"`
	EnableThinking      *bool  `json:"enable_thinking"`
	Tools               []json.RawMessage
	Messages            []struct {
		Role             string  `json:"role"`
		Content          string  `json:"content"`
		ReasoningContent *string `json:"reasoning_content"`
		ToolCalls        []struct {
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
}

func (c conversation) inputs() ([]Message, Options) {
	var msgs []Message
	for _, m := range c.Messages {
		msg := Message{Role: m.Role, Content: m.Content, ReasoningContent: m.ReasoningContent}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		msgs = append(msgs, msg)
	}
	return msgs, Options{AddGenerationPrompt: c.AddGenerationPrompt, EnableThinking: c.EnableThinking, Tools: c.Tools}
}

// TestMatchesTransformers compares with what transformers' apply_chat_template
// rendered for the same conversations on the device machine
// (testdata/render_reference.py -> testdata/reference.json).
func TestMatchesTransformers(t *testing.T) {
	var convs []conversation
	data, err := os.ReadFile("testdata/conversations.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &convs); err != nil {
		t.Fatal(err)
	}
	var ref map[string]map[string]string
	data, err = os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("testdata/tokenizer_config.Qwen3-4B.json")
	if err != nil {
		t.Fatal(err)
	}
	tpl4b, err := FromConfig("tokenizer_config.Qwen3-4B.json", cfg)
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]*Template{"qwen3-0.6b": loadQwen06(t), "qwen3-4b-config": tpl4b}
	n := 0
	for _, c := range convs {
		msgs, opts := c.inputs()
		for tname, tpl := range templates {
			want, ok := ref[c.Name][tname]
			if !ok || strings.HasPrefix(want, "ERROR") {
				t.Fatalf("no reference for %s/%s: %q", c.Name, tname, want)
			}
			got, err := tpl.Render(msgs, opts)
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
	if n < 20 {
		t.Fatalf("only %d renders compared", n)
	}
}

func TestFallback(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"},
		{Role: "assistant", Content: "", ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`{"a": 1}`)}}}}
	want := "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n" +
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>assistant\n<think>\n\n</think>\n\n"
	opts := Options{AddGenerationPrompt: true, EnableThinking: ptr(false)}
	if got := ChatML(msgs, opts); got != want {
		t.Errorf("ChatML:\n got  %q\n want %q", got, want)
	}
	got, err := Render(nil, msgs, opts)
	if !errors.Is(err, ErrNoTemplate) || got != want {
		t.Errorf("Render(nil) = %q, %v", got, err)
	}
	// A template that raises: the error names the file and carries the
	// message; the fallback text comes with it.
	tpl, err := Parse("raising.jinja", `{% if messages|length > 1 %}{{ raise_exception("only one message") }}{% endif %}ok`)
	if err != nil {
		t.Fatal(err)
	}
	got, err = Render(tpl, msgs, opts)
	if err == nil || !strings.Contains(err.Error(), "only one message") || !strings.Contains(err.Error(), "raising.jinja") || got != want {
		t.Errorf("raising template: %q, %v", got, err)
	}
	got, err = Render(tpl, msgs[:1], Options{})
	if err != nil || got != "ok" {
		t.Errorf("non-raising path: %q, %v", got, err)
	}
	// A template that does not parse.
	if _, err := Parse("broken.jinja", "{% for x in %}"); err == nil || !strings.Contains(err.Error(), "broken.jinja") {
		t.Errorf("broken template: %v", err)
	}
	if _, err := Parse("unclosed.jinja", "{% if true %}x"); err == nil {
		t.Error("unclosed block parsed")
	}
}

func TestFromConfigAndLoadDir(t *testing.T) {
	list := `{"chat_template": [{"name": "default", "template": "D{{ messages|length }}"}, {"name": "tool_use", "template": "T{{ tools|length }}"}]}`
	tpl, err := FromConfig("cfg.json", []byte(list))
	if err != nil {
		t.Fatal(err)
	}
	if v := tpl.Variants(); len(v) != 2 || v[0] != "default" || v[1] != "tool_use" {
		t.Errorf("variants %v", v)
	}
	msgs := []Message{{Role: "user", Content: "x"}}
	if got, err := tpl.Render(msgs, Options{}); err != nil || got != "D1" {
		t.Errorf("default: %q %v", got, err)
	}
	if got, err := tpl.Render(msgs, Options{Tools: []json.RawMessage{[]byte(`{}`), []byte(`{}`)}}); err != nil || got != "T2" {
		t.Errorf("tool_use: %q %v", got, err)
	}
	for name, cfg := range map[string]string{
		"no default":  `{"chat_template": [{"name": "x", "template": "a"}]}`,
		"wrong type":  `{"chat_template": 5}`,
		"no template": `{"eos_token": "x"}`,
		"null":        `{"chat_template": null}`,
		"bad json":    `{`,
		"no name":     `{"chat_template": [{"template": "a"}]}`,
	} {
		if _, err := FromConfig("cfg.json", []byte(cfg)); err == nil || !strings.Contains(err.Error(), "cfg.json") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := FromConfig("cfg.json", []byte(`{"eos_token": "x"}`)); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("missing template should be ErrNoTemplate: %v", err)
	}

	// LoadDir: chat_template.jinja wins over tokenizer_config.json.
	dir := t.TempDir()
	if _, err := LoadDir(dir); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("empty dir: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"chat_template": "from-config"}`), 0o644)
	if tpl, err := LoadDir(dir); err != nil {
		t.Fatal(err)
	} else if got, _ := tpl.Render(nil, Options{}); got != "from-config" {
		t.Errorf("config template: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("from-jinja"), 0o644)
	if tpl, err := LoadDir(dir); err != nil {
		t.Fatal(err)
	} else if got, _ := tpl.Render(nil, Options{}); got != "from-jinja" {
		t.Errorf("jinja file: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(strings.Repeat("x", MaxTemplateSize+1)), 0o644)
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "chat_template.jinja") {
		t.Errorf("oversize: %v", err)
	}
}

func TestTemplateHelpers(t *testing.T) {
	old := nowFunc
	nowFunc = func() time.Time { return time.Date(2025, 3, 7, 9, 5, 0, 0, time.UTC) }
	defer func() { nowFunc = old }()
	cases := map[string]string{
		`{{ strftime_now("%d %B %Y, %a %H:%M %%") }}`:              "07 March 2025, Fri 09:05 %",
		`{{ range(3)|join(",") }}|{{ range(5, 0, -2)|join(",") }}`: "0,1,2|5,3,1",
		`{{ bos_token }}{{ eos_token }}`:                           "<s></s>",
		`{{ custom }}`:                                             "42",
		`{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}`: "6",
		`{{ messages[::-1][0].content }}`:                                        "b",
		`{{ "  a,b ".strip().split(",")|join("+") }}`:                            "a+b",
		`{{ "<think>x".startswith("<think>") }} {{ "x</think>".endswith("x") }}`: "True False",
		"{% for m in messages %}\n  {{ m.role }}\n{% endfor %}":                  "  user\n  assistant\n",
	}
	msgs := []Message{{Role: "user", Content: "a"}, {Role: "assistant", Content: "b"}}
	opts := Options{BOSToken: "<s>", EOSToken: "</s>", Vars: map[string]any{"custom": 42}}
	for src, want := range cases {
		tpl, err := Parse("helpers", src)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		got, err := tpl.Render(msgs, opts)
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", src, got, err, want)
		}
	}
	// range is bounded as in Jinja's sandbox.
	tpl, _ := Parse("range", `{% for i in range(100001) %}{% endfor %}`)
	if _, err := tpl.Render(nil, Options{}); err == nil || !strings.Contains(err.Error(), "range") {
		t.Errorf("unbounded range: %v", err)
	}
	// Output is bounded.
	big := strings.Repeat("x", 1<<20)
	tpl, _ = Parse("big", `{% for i in range(100) %}{{ messages[0].content }}{% endfor %}`)
	if _, err := tpl.Render([]Message{{Role: "user", Content: big}}, Options{}); err == nil || !strings.Contains(err.Error(), "output longer") {
		t.Errorf("unbounded output: %v", err)
	}
}
