package server

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Tags of Qwen3-family output.
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
	toolOpen   = "<tool_call>"
	toolClose  = "</tool_call>"
)

// ToolCall is one function call parsed from the model's output.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // a JSON object, as text
}

// event is one piece of parsed output.
type event struct {
	content   string
	reasoning string
	call      *ToolCall
	index     int // the call's index among the response's calls
}

// outputParser splits the model's output text, as it streams, into
// content, reasoning (<think>…</think>) and tool calls
// (<tool_call>…</tool_call>). It holds back any tail that could be the
// start of a tag, so no tag is ever split across the events; tags are
// ASCII, so a held-back tail never splits a UTF-8 character either.
type outputParser struct {
	think   bool // split reasoning out (else it stays inline)
	tools   bool // parse tool calls
	mode    int
	pending string
	trimNL  bool            // drop newlines at the start of what follows a tag
	block   strings.Builder // the body of the open <tool_call>
	calls   int
	// afterCall: the last thing out was a tool call; the text that follows
	// is held in after until it is more than whitespace (whitespace between
	// and after calls is not content, text after them is, all of it).
	afterCall bool
	after     strings.Builder
	newID     func() string
	sawThink  bool
}

const (
	inText = iota
	inThink
	inTool
)

// newOutputParser returns a parser; startInThink says the prompt already
// opened a <think> block (Qwen3.5 generation prompts end with "<think>\n").
func newOutputParser(think, tools, startInThink bool, newID func() string) *outputParser {
	p := &outputParser{think: think, tools: tools, newID: newID}
	if think && startInThink {
		p.mode, p.trimNL, p.sawThink = inThink, true, true
	}
	return p
}

// tags are the tags that end the current mode's text.
func (p *outputParser) tags() []string {
	switch p.mode {
	case inThink:
		return []string{thinkClose}
	case inTool:
		return []string{toolClose}
	}
	var t []string
	if p.think && !p.sawThink {
		t = append(t, thinkOpen)
	}
	if p.tools {
		t = append(t, toolOpen)
	}
	return t
}

// Push adds output text and returns the events it completes.
func (p *outputParser) Push(s string) []event {
	var out []event
	buf := p.pending + s
	p.pending = ""
	for buf != "" {
		tags := p.tags()
		at, tag := -1, ""
		for _, t := range tags {
			if i := strings.Index(buf, t); i >= 0 && (at < 0 || i < at) {
				at, tag = i, t
			}
		}
		if at < 0 {
			hold := 0
			for _, t := range tags {
				for k := min(len(t)-1, len(buf)); k > hold; k-- {
					if strings.HasSuffix(buf, t[:k]) {
						hold = k
						break
					}
				}
			}
			out = p.text(out, buf[:len(buf)-hold])
			p.pending = buf[len(buf)-hold:]
			return out
		}
		out = p.text(out, buf[:at])
		buf = buf[at+len(tag):]
		switch tag {
		case thinkOpen:
			p.mode, p.trimNL, p.sawThink = inThink, true, true
		case thinkClose:
			p.mode, p.trimNL = inText, true
		case toolOpen:
			p.mode = inTool
			p.block.Reset()
		case toolClose:
			out = p.endTool(out, false)
		}
	}
	return out
}

// text handles text inside the current mode.
func (p *outputParser) text(out []event, s string) []event {
	if p.trimNL {
		s = strings.TrimLeft(s, "\n")
		if s == "" {
			return out
		}
		p.trimNL = false
	}
	if s == "" {
		return out
	}
	switch p.mode {
	case inThink:
		return append(out, event{reasoning: s})
	case inTool:
		p.block.WriteString(s)
		return out
	}
	if p.afterCall {
		// Between and after tool calls only text that is more than
		// whitespace is content; once some is, what follows is too.
		p.after.WriteString(s)
		if strings.TrimSpace(p.after.String()) == "" {
			return out
		}
		s = p.after.String()
		p.after.Reset()
		p.afterCall = false
	}
	return append(out, event{content: s})
}

// endTool parses the closed (or, at the end, unterminated) tool call block;
// a block that is not a call is given back as content, tags included.
func (p *outputParser) endTool(out []event, unterminated bool) []event {
	body := p.block.String()
	p.block.Reset()
	p.mode = inText
	if !unterminated {
		if name, args, ok := parseToolCall(body); ok {
			p.after.Reset()
			p.afterCall = true
			return append(out, event{call: &ToolCall{ID: p.newID(), Name: name, Arguments: args}})
		}
	}
	raw := toolOpen + body
	if !unterminated {
		raw += toolClose
	}
	if p.afterCall { // the whitespace held since the last call comes first
		raw = p.after.String() + raw
		p.after.Reset()
		p.afterCall = false
	}
	return append(out, event{content: raw})
}

// Flush ends the output: held-back text and an unterminated block come out.
func (p *outputParser) Flush() []event {
	var out []event
	rest := p.pending
	p.pending = ""
	p.trimNL = false
	switch p.mode {
	case inTool:
		p.block.WriteString(rest)
		out = p.endTool(out, true)
	default:
		out = p.text(out, rest)
	}
	if s := p.after.String(); strings.TrimSpace(s) != "" {
		out = append(out, event{content: s})
	}
	p.after.Reset()
	return out
}

// parseToolCall reads a <tool_call> body: Qwen3's JSON
// {"name": ..., "arguments": {...}} or Qwen3.5's
// <function=NAME><parameter=KEY>VALUE</parameter>…</function>. The
// arguments come back as a compact JSON object.
func parseToolCall(body string) (name, args string, ok bool) {
	body = strings.TrimSpace(body)
	if strings.HasPrefix(body, "{") {
		var c struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			Params    json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal([]byte(body), &c); err != nil || c.Name == "" {
			return "", "", false
		}
		a := c.Arguments
		if isNull(a) {
			a = c.Params
		}
		if isNull(a) {
			return c.Name, "{}", true
		}
		var s string
		if json.Unmarshal(a, &s) == nil { // arguments given as a JSON string
			if json.Valid([]byte(s)) && strings.HasPrefix(strings.TrimSpace(s), "{") {
				a = json.RawMessage(s)
			} else {
				return "", "", false
			}
		}
		var b bytes.Buffer
		if json.Compact(&b, a) != nil || b.Len() == 0 || b.Bytes()[0] != '{' {
			return "", "", false
		}
		return c.Name, b.String(), true
	}
	return parseXMLCall(body)
}

// parseXMLCall reads <function=NAME> <parameter=K>V</parameter>… </function>.
// A value that is valid JSON (a number, true, an object, ...) is kept as
// such; any other is a string.
func parseXMLCall(body string) (name, args string, ok bool) {
	rest, found := strings.CutPrefix(body, "<function=")
	if !found {
		return "", "", false
	}
	end := strings.IndexByte(rest, '>')
	if end <= 0 {
		return "", "", false
	}
	name = strings.TrimSpace(rest[:end])
	rest, found = strings.CutSuffix(strings.TrimSpace(rest[end+1:]), "</function>")
	if !found || name == "" {
		return "", "", false
	}
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for {
		rest = strings.TrimSpace(rest)
		if rest == "" {
			break
		}
		r, found := strings.CutPrefix(rest, "<parameter=")
		if !found {
			return "", "", false
		}
		e := strings.IndexByte(r, '>')
		if e <= 0 {
			return "", "", false
		}
		key := strings.TrimSpace(r[:e])
		r = r[e+1:]
		c := strings.Index(r, "</parameter>")
		if c < 0 {
			return "", "", false
		}
		val := strings.TrimSuffix(strings.TrimPrefix(r[:c], "\n"), "\n")
		rest = r[c+len("</parameter>"):]
		if n > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		b.Write(k)
		b.WriteByte(':')
		var compact bytes.Buffer
		if t := strings.TrimSpace(val); t != "" && json.Valid([]byte(t)) && json.Compact(&compact, []byte(t)) == nil {
			b.Write(compact.Bytes())
		} else {
			v, _ := json.Marshal(val)
			b.Write(v)
		}
		n++
	}
	b.WriteByte('}')
	return name, b.String(), true
}
