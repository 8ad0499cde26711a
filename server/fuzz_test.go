package server

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/qpack-go/qpack/runtime/sample"
)

// FuzzOutputParser: however the output is cut, the parser gives the same
// events, never panics, and loses no text when nothing parses as a call
// or a reasoning block.
func FuzzOutputParser(f *testing.F) {
	f.Add("<think>\nx\n</think>\n\ny<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", uint8(7))
	f.Add("<tool_call><function=f><parameter=a>1</parameter></function></tool_call>", uint8(3))
	f.Fuzz(func(t *testing.T, text string, cut uint8) {
		if len(text) > 4096 {
			return
		}
		whole := parseAll(newTestParser(true, true, false), []string{text})
		var pieces []string
		step := int(cut%16) + 1
		for i := 0; i < len(text); i += step {
			pieces = append(pieces, text[i:min(i+step, len(text))])
		}
		if got := parseAll(newTestParser(true, true, false), pieces); fmt.Sprint(got) != fmt.Sprint(whole) {
			t.Fatalf("cut every %d bytes: %+v, whole: %+v", step, got, whole)
		}
		if !strings.Contains(text, "<t") && whole.content != text {
			t.Fatalf("plain text changed: %q -> %q", text, whole.content)
		}
		if utf8.ValidString(text) && !utf8.ValidString(whole.content+whole.reasoning) {
			t.Fatal("valid UTF-8 in, invalid out")
		}
	})
}

// FuzzRequest: any body is answered by a 400 or parsed, never a panic.
func FuzzRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop":["a"],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"auto"}`))
	f.Add([]byte(`{"prompt":[[1,2]],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var c chatRequest
		if e := decodeBody(body, &c); e == nil {
			if in, e := c.parse(sample.Params{}, func() uint64 { return 1 }); e == nil && len(in.msgs) == 0 {
				t.Fatal("parsed a chat without messages")
			} else if e != nil && e.Status != 400 {
				t.Fatalf("status %d", e.Status)
			}
		}
		var r completionRequest
		if e := decodeBody(body, &r); e == nil {
			r.parse(sample.Params{}, func() uint64 { return 1 })
		}
	})
}
