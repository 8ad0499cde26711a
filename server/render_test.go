package server

import (
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime/chattmpl"
)

// A template that, like Qwen3.5's, raises on a system message after the
// first turn gets the system messages merged at the start; one that
// accepts it renders it where it is.
func TestRenderSystemMessageAnywhere(t *testing.T) {
	s, _ := newTiny(t, Config{}, 0)
	strict, err := chattmpl.Parse("strict.jinja", `{%- for m in messages %}{%- if m.role == 'system' and not loop.first %}{{ raise_exception('System message must be at the beginning.') }}{%- endif %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}`)
	if err != nil {
		t.Fatal(err)
	}
	in := &chatInput{msgs: []chattmpl.Message{{Role: "user", Content: "u1"}, {Role: "system", Content: "late"}, {Role: "system", Content: "later"}}}
	own := s.render(in)
	if !strings.Contains(own.text, "<|im_start|>user\nu1<|im_end|>\n<|im_start|>system\nlate") {
		t.Fatalf("the model's template moved the system message:\n%s", own.text)
	}
	s.r.Template = strict
	p := s.render(in)
	want := "<|im_start|>system\nlate\n\nlater<|im_end|>\n<|im_start|>user\nu1<|im_end|>\n<|im_start|>assistant\n<think>\n"
	if p.text != want || !p.inThink {
		t.Fatalf("got %q (in think %v), want %q", p.text, p.inThink, want)
	}
}

// tool_choice required or a named function opens the call in the prompt
// (closing an open think block first), in the format the template asks
// for; the parser sees the opening as output.
func TestRenderForcedToolCall(t *testing.T) {
	s, _ := newTiny(t, Config{}, 0)
	useQwen3Template(t, s)
	in := &chatInput{msgs: []chattmpl.Message{{Role: "user", Content: "go"}}, choice: toolChoice{mode: "function", name: "f"}}
	p := s.render(in)
	if want := "<tool_call>\n{\"name\": \"f\", \"arguments\": "; p.forced != want || !strings.HasSuffix(p.text, want) {
		t.Fatalf("forced %q", p.forced)
	}
	got := parseAll(newTestParser(true, true, p.inThink), []string{p.forced, `{"x": 1}}`, "\n</tool_call>"})
	if len(got.calls) != 1 || got.calls[0] != `f {"x":1}` || got.content != "" {
		t.Fatalf("parsed %+v", got)
	}
	in.choice = toolChoice{mode: "required"}
	if p := s.render(in); p.forced != "<tool_call>\n{\"name\": \"" {
		t.Fatalf("required: forced %q", p.forced)
	}
}
