package chattmpl

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestGuards(t *testing.T) {
	parseErrors := map[string]string{
		"include":       `{% include "/chat_template" %}`,
		"import":        `{% import "/chat_template" as x %}`,
		"from":          `{% from "/chat_template" import y %}`,
		"extends":       `{% extends "/chat_template" %}`,
		"block":         `{% block b %}{{ self.b() }}{% endblock %}`,
		"do":            `{% do messages.append(1) %}`,
		"recursive":     `{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}`,
		"deep brackets": "{{ " + strings.Repeat("(", 200) + "1" + strings.Repeat(")", 200) + " }}",
		"deep blocks":   strings.Repeat("{% if true %}", 150) + strings.Repeat("{% endif %}", 150),
	}
	for name, src := range parseErrors {
		if _, err := Parse("g.jinja", src); err == nil || !strings.Contains(err.Error(), "g.jinja") {
			t.Errorf("%s: parsed (err %v)", name, err)
		}
	}
	renderErrors := map[string]string{
		"self recursion":   `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`,
		"mutual recursion": `{% macro f() %}{{ g() }}{% endmacro %}{% macro g() %}{{ f() }}{% endmacro %}{{ f() }}`,
		"list append":      `{{ messages.append(1) }}`,
		"dict update":      `{% set d = {"a": 1} %}{{ tools[0].update({"b": 2}) }}`,
	}
	for name, src := range renderErrors {
		tpl, err := Parse("g.jinja", src)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		out, err := tpl.Render([]Message{{Role: "user", Content: "x"}}, Options{Tools: []json.RawMessage{json.RawMessage(`{"a": 1}`)}})
		if err == nil {
			t.Errorf("%s: rendered %q", name, out)
		}
	}
	// Bounded macro recursion still works below the limit, and the
	// generation tag renders its body.
	ok := map[string]string{
		`{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}`: "54321",
		`a{% generation %}b{{ messages|length }}{% endgeneration %}c`:                            "ab1c",
		`{% set d = {"a": 1} %}{{ d.get("a") }}{{ d.items()|list|length }}`:                      "11",
		`{{ messages[0].content.upper() }}`:                                                      "X",
		`{% set ns = namespace(a=[]) %}{% set ns.a = ns.a + [1] %}{{ ns.a|length }}`:             "1",
	}
	for src, want := range ok {
		tpl, err := Parse("g.jinja", src)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if got, err := tpl.Render([]Message{{Role: "user", Content: "x"}}, Options{}); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", src, got, err, want)
		}
	}
}

func TestStringMethods(t *testing.T) {
	// Expected values are what Python's str methods return.
	cases := map[string]string{
		`{{ "  a b \n".strip()|tojson }}`:                    `"a b"`,
		`{{ "xxaxx".strip("x")|tojson }}`:                    `"a"`,
		`{{ "\n\nA\n".lstrip("\n")|tojson }}`:                `"A\n"`,
		`{{ "\n\nA\n".rstrip("\n")|tojson }}`:                `"\n\nA"`,
		`{{ "ab".strip(none)|tojson }}`:                      `"ab"`,
		`{{ " a  b c ".split()|tojson }}`:                    `["a", "b", "c"]`,
		`{{ "a,b,,c".split(",")|tojson }}`:                   `["a", "b", "", "c"]`,
		`{{ "a b c".split(none, 1)|tojson }}`:                `["a", "b c"]`,
		`{{ "  a b  ".split(none, 1)|tojson }}`:              `["a", "b  "]`,
		`{{ "  a b  ".rsplit(none, 1)|tojson }}`:             `["  a", "b"]`,
		`{{ "a,b,c".rsplit(",", 1)|tojson }}`:                `["a,b", "c"]`,
		`{{ "a,b,c".split(",", maxsplit=1)|tojson }}`:        `["a", "b,c"]`,
		`{{ "x</think>".split("</think>")|tojson }}`:         `["x", ""]`,
		`{{ "abc".startswith("b", 1) }}`:                     "True",
		`{{ "abc".startswith(["x", "a"]) }}`:                 "True",
		`{{ "abc".endswith("b", 0, 2) }}`:                    "True",
		`{{ "abc".endswith("c", 0, -1) }}`:                   "False",
		`{{ "héllo".startswith("él", 1) }}`:                  "True",
		`{{ "AbC".lower().split("b")[-1].strip().upper() }}`: "C",
		`{{ "a-b".replace("-", "+").split("+")|length }}`:    "2",
		`{{ "l1\nl2".splitlines()|tojson }}`:                 `["l1", "l2"]`,
	}
	for src, want := range cases {
		tpl, err := Parse("s", src)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if got, err := tpl.Render(nil, Options{}); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", src, got, err, want)
		}
	}
	tpl, _ := Parse("s", `{{ "a".split("") }}`)
	if _, err := tpl.Render(nil, Options{}); err == nil {
		t.Error("empty separator accepted")
	}
}

// x[-n] with n equal to the length is the first item (gonja alone gets this
// wrong; the lists we hand in answer it themselves).
func TestNegativeIndex(t *testing.T) {
	tpl, err := Parse("n", `{{ messages[-1].content }}{{ messages[-1].tool_calls[-1].function.arguments[-1] }}{{ tools[-1]|tojson }}`)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "assistant", Content: "c", ToolCalls: []ToolCall{{Name: "f", Arguments: json.RawMessage(`[7]`)}}}}
	got, err := tpl.Render(msgs, Options{Tools: []json.RawMessage{json.RawMessage(`{"t": 1}`)}})
	if err != nil || got != `c7{"t": 1}` {
		t.Errorf("got %q, %v", got, err)
	}
}
