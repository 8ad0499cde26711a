package server

import (
	"fmt"
	"strings"
	"testing"
)

type parsed struct {
	content, reasoning string
	calls              []string // name + " " + arguments
}

func parseAll(p *outputParser, pieces []string) parsed {
	var out parsed
	add := func(evs []event) {
		for _, ev := range evs {
			out.content += ev.content
			out.reasoning += ev.reasoning
			if ev.call != nil {
				out.calls = append(out.calls, ev.call.Name+" "+ev.call.Arguments)
			}
		}
	}
	for _, s := range pieces {
		add(p.Push(s))
	}
	add(p.Flush())
	return out
}

func newTestParser(think, tools, inThink bool) *outputParser {
	n := 0
	return newOutputParser(think, tools, inThink, func() string { n++; return fmt.Sprintf("call_%d", n) })
}

// Expected results written by hand from Qwen3's output conventions.
func TestOutputParser(t *testing.T) {
	cases := []struct {
		name                 string
		think, tools, inside bool
		text                 string
		want                 parsed
	}{
		{"plain", true, true, false, "Hello <b>world</b>", parsed{content: "Hello <b>world</b>"}},
		{"think", true, false, false, "<think>\nhmm\n</think>\n\nAnswer", parsed{content: "Answer", reasoning: "hmm\n"}},
		{"think inline", false, false, false, "<think>\nhmm\n</think>\n\nAnswer", parsed{content: "<think>\nhmm\n</think>\n\nAnswer"}},
		{"prompt opened think", true, false, true, "hmm</think>\n\nA", parsed{content: "A", reasoning: "hmm"}},
		{"unclosed think", true, false, false, "<think>\nstill", parsed{reasoning: "still"}},
		{"json call", true, true, false, "Let me look.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [true, null]}}\n</tool_call>",
			parsed{content: "Let me look.\n", calls: []string{`f {"a":1,"b":[true,null]}`}}},
		{"two calls", true, true, false, "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>\n\n<tool_call>{\"name\":\"g\",\"arguments\":\"{\\\"x\\\": 2}\"}</tool_call>\n",
			parsed{calls: []string{"f {}", `g {"x":2}`}}},
		{"xml call", true, true, false, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
			parsed{calls: []string{`get_weather {"city":"Paris","days":3}`}}},
		{"tools off", true, false, false, "<tool_call>{\"name\":\"f\"}</tool_call>", parsed{content: "<tool_call>{\"name\":\"f\"}</tool_call>"}},
		{"not a call", true, true, false, "<tool_call>oops</tool_call> after", parsed{content: "<tool_call>oops</tool_call> after"}},
		{"unterminated call", true, true, false, "x <tool_call>{\"name\": \"f\"", parsed{content: "x <tool_call>{\"name\": \"f\""}},
		{"text after a call", true, true, false, "<tool_call>{\"name\":\"f\"}</tool_call> and more", parsed{content: " and more", calls: []string{"f {}"}}},
		{"lone angle bracket", true, true, false, "a < b <", parsed{content: "a < b <"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			whole := parseAll(newTestParser(c.think, c.tools, c.inside), []string{c.text})
			if fmt.Sprint(whole) != fmt.Sprint(c.want) {
				t.Fatalf("got %+v, want %+v", whole, c.want)
			}
			// Cut into pieces at every position: the same result.
			for i := 1; i < len(c.text); i++ {
				got := parseAll(newTestParser(c.think, c.tools, c.inside), []string{c.text[:i], c.text[i:]})
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Fatalf("cut at %d: got %+v, want %+v", i, got, c.want)
				}
			}
			bytes := strings.Split(c.text, "")
			if got := parseAll(newTestParser(c.think, c.tools, c.inside), bytes); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("one character at a time: got %+v", got)
			}
		})
	}
}
