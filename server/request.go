package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/qpack-go/qpack/runtime/chattmpl"
	"github.com/qpack-go/qpack/runtime/sample"
)

// Limits on what one request may ask for.
const (
	maxStops     = 16
	maxStopLen   = 1024
	maxMessages  = 100000
	maxTools     = 1024
	maxNameLen   = 256
	maxSeedValue = 1<<63 - 1
)

// common are the fields chat and text completions share.
type common struct {
	Model            *string         `json:"model"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"`
	MinP             *float64        `json:"min_p"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	RepetitionPen    *float64        `json:"repetition_penalty"`
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	N                *int            `json:"n"`
	Logprobs         json.RawMessage `json:"logprobs"`
}

func (c *common) modelName() *string { return c.Model }

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatRequest struct {
	common
	Messages            []rawMessage    `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Tools               []rawTool       `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	ResponseFormat      *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	ChatTemplateKwargs *struct {
		EnableThinking *bool `json:"enable_thinking"`
	} `json:"chat_template_kwargs"`
}

type rawMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCalls        []rawToolCall   `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent *string         `json:"reasoning_content"`
}

type rawToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type rawTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

type completionRequest struct {
	common
	Prompt json.RawMessage `json:"prompt"`
	Echo   bool            `json:"echo"`
	Suffix *string         `json:"suffix"`
	BestOf *int            `json:"best_of"`
}

// decodeBody parses a JSON request body into v: malformed JSON, a value of
// the wrong type (naming the field) and trailing data are 400s.
func decodeBody(body []byte, v any) *APIError {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			field := fieldPath(te.Field)
			if field == "" {
				return badRequest("", "the request body must be a JSON object, not %s", article(te.Value))
			}
			return badRequest(field, "%s must be %s, not %s", field, jsonKind(te.Type.Kind().String()), article(te.Value))
		case errors.As(err, &se):
			return badRequest("", "the request body is not valid JSON: %v (at byte %d)", se, se.Offset)
		case errors.Is(err, io.EOF):
			return badRequest("", "the request body is empty: want a JSON object")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("", "the request body is not valid JSON: it ends too early")
		}
		return badRequest("", "the request body is not valid JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "the request body has data after the JSON object")
	}
	return nil
}

// fieldPath turns encoding/json's field path ("common.stop",
// "messages.2.role") into the request's spelling ("stop", "messages[2].role").
func fieldPath(f string) string {
	var b strings.Builder
	for _, part := range strings.Split(f, ".") {
		switch {
		case part == "common":
			continue
		case part != "" && strings.Trim(part, "0123456789") == "":
			b.WriteString("[" + part + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(part)
		}
	}
	return b.String()
}

func article(v string) string {
	switch v {
	case "array", "object", "bool":
		if v == "bool" {
			return "a boolean"
		}
		return "an " + v
	case "string", "number":
		return "a " + v
	}
	return v
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "uint64":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "slice":
		return "an array"
	case "struct", "map", "ptr":
		return "an object"
	}
	return goKind
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// genParams are the validated generation settings of a request.
type genParams struct {
	sample       sample.Params
	maxTokens    int // 0: not given
	stop         []string
	stream       bool
	includeUsage bool
}

// params validates the shared fields over the model's defaults.
func (c *common) params(defaults sample.Params, seed func() uint64) (genParams, *APIError) {
	g := genParams{sample: defaults, stream: c.Stream}
	if c.StreamOptions != nil {
		if !c.Stream {
			return g, badRequest("stream_options", "stream_options is only allowed with stream: true")
		}
		g.includeUsage = c.StreamOptions.IncludeUsage
	}
	if c.N != nil && *c.N != 1 {
		return g, badRequest("n", "n must be 1: this server generates one choice per request")
	}
	if !isNull(c.Logprobs) && string(bytes.TrimSpace(c.Logprobs)) != "false" && string(bytes.TrimSpace(c.Logprobs)) != "0" {
		return g, badRequest("logprobs", "logprobs are not supported")
	}
	if c.MaxTokens != nil {
		if *c.MaxTokens < 1 {
			return g, badRequest("max_tokens", "max_tokens must be at least 1, got %d", *c.MaxTokens)
		}
		g.maxTokens = *c.MaxTokens
	}
	type fl struct {
		name    string
		v       *float64
		lo, hi  float64
		dst     *float64
		exclLow bool
	}
	p := &g.sample
	for _, f := range []fl{
		{name: "temperature", v: c.Temperature, lo: 0, hi: 2, dst: &p.Temperature},
		{name: "top_p", v: c.TopP, lo: 0, hi: 1, dst: &p.TopP},
		{name: "min_p", v: c.MinP, lo: 0, hi: 1, dst: &p.MinP},
		{name: "presence_penalty", v: c.PresencePenalty, lo: -2, hi: 2, dst: &p.PresencePenalty},
		{name: "frequency_penalty", v: c.FrequencyPenalty, lo: -2, hi: 2, dst: &p.FrequencyPenalty},
		{name: "repetition_penalty", v: c.RepetitionPen, lo: 0, hi: 10, dst: &p.RepetitionPenalty, exclLow: true},
	} {
		if f.v == nil {
			continue
		}
		v := *f.v
		if math.IsNaN(v) || v < f.lo || v > f.hi || (f.exclLow && v == f.lo) {
			rng := fmt.Sprintf("[%g, %g]", f.lo, f.hi)
			if f.exclLow {
				rng = fmt.Sprintf("(%g, %g]", f.lo, f.hi)
			}
			return g, badRequest(f.name, "%s must be in %s, got %g", f.name, rng, v)
		}
		*f.dst = v
	}
	if c.TopP != nil && *c.TopP == 0 {
		// OpenAI's top_p 0 is the narrowest nucleus (the most likely
		// token), not sample.Params' "off", which samples from all.
		p.TopP = math.SmallestNonzeroFloat64
	}
	if c.TopK != nil {
		switch k := *c.TopK; {
		case k == -1 || k == 0: // -1 is "off" in vLLM and llama.cpp
			p.TopK = 0
		case k < 0:
			return g, badRequest("top_k", "top_k must be >= 0 (or -1 for off), got %d", k)
		default:
			p.TopK = k
		}
	}
	if c.Seed != nil {
		p.Seed = uint64(*c.Seed)
	} else {
		p.Seed = seed()
	}
	stop, err := parseStop(c.Stop)
	if err != nil {
		return g, err
	}
	g.stop = stop
	if e := p.Validate(); e != nil {
		return g, badRequest("", "%v", e)
	}
	return g, nil
}

// parseStop reads stop: a string, or a list of strings.
func parseStop(raw json.RawMessage) ([]string, *APIError) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	var list []string
	if err := json.Unmarshal(raw, &one); err == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest("stop", "stop must be a string or an array of strings")
	}
	if len(list) > maxStops {
		return nil, badRequest("stop", "stop has %d strings, more than %d", len(list), maxStops)
	}
	out := list[:0]
	for i, s := range list {
		if len(s) > maxStopLen {
			return nil, badRequest(fmt.Sprintf("stop[%d]", i), "stop string %d is %d bytes, more than %d", i, len(s), maxStopLen)
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// toolChoice is what tool_choice asks for.
type toolChoice struct {
	mode string // "auto", "none", "required" or "function"
	name string // with "function"
}

// chatInput is a validated chat request ready to render.
type chatInput struct {
	msgs     []chattmpl.Message
	tools    []json.RawMessage
	choice   toolChoice
	thinking *bool
	gen      genParams
}

// parse validates a chat request.
func (r *chatRequest) parse(defaults sample.Params, seed func() uint64) (*chatInput, *APIError) {
	in := &chatInput{}
	g, err := r.params(defaults, seed)
	if err != nil {
		return nil, err
	}
	if r.MaxCompletionTokens != nil {
		if *r.MaxCompletionTokens < 1 {
			return nil, badRequest("max_completion_tokens", "max_completion_tokens must be at least 1, got %d", *r.MaxCompletionTokens)
		}
		g.maxTokens = *r.MaxCompletionTokens
	}
	in.gen = g
	if r.ResponseFormat != nil && r.ResponseFormat.Type != "" && r.ResponseFormat.Type != "text" {
		return nil, badRequest("response_format", "response_format %q is not supported (only \"text\")", r.ResponseFormat.Type)
	}
	if r.ChatTemplateKwargs != nil {
		in.thinking = r.ChatTemplateKwargs.EnableThinking
	}
	if r.Messages == nil {
		return nil, badRequest("messages", "messages is required")
	}
	if len(r.Messages) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	if len(r.Messages) > maxMessages {
		return nil, badRequest("messages", "%d messages, more than %d", len(r.Messages), maxMessages)
	}
	for i, m := range r.Messages {
		msg, err := m.parse(i)
		if err != nil {
			return nil, err
		}
		in.msgs = append(in.msgs, msg)
	}
	if len(r.Tools) > maxTools {
		return nil, badRequest("tools", "%d tools, more than %d", len(r.Tools), maxTools)
	}
	names := map[string]bool{}
	for i, t := range r.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return nil, badRequest(p+".type", "%s.type must be \"function\", got %q", p, t.Type)
		}
		if t.Function == nil || t.Function.Name == "" {
			return nil, badRequest(p+".function.name", "%s.function.name is required", p)
		}
		if len(t.Function.Name) > maxNameLen {
			return nil, badRequest(p+".function.name", "%s.function.name is longer than %d bytes", p, maxNameLen)
		}
		if ps := bytes.TrimSpace(t.Function.Parameters); len(ps) > 0 && ps[0] != '{' && string(ps) != "null" {
			return nil, badRequest(p+".function.parameters", "%s.function.parameters must be a JSON Schema object", p)
		}
		names[t.Function.Name] = true
	}
	choice, err := parseToolChoice(r.ToolChoice, names)
	if err != nil {
		return nil, err
	}
	in.choice = choice
	if choice.mode != "none" {
		for _, t := range r.Tools {
			if choice.mode == "function" && t.Function.Name != choice.name {
				continue
			}
			in.tools = append(in.tools, toolJSON(t))
		}
	}
	return in, nil
}

// toolJSON re-encodes a tool definition in the key order OpenAI documents
// (type, function: name, description, parameters), as templates print it.
func toolJSON(t rawTool) json.RawMessage {
	var b bytes.Buffer
	name, _ := json.Marshal(t.Function.Name)
	fmt.Fprintf(&b, `{"type": "function", "function": {"name": %s`, name)
	if t.Function.Description != "" {
		d, _ := json.Marshal(t.Function.Description)
		fmt.Fprintf(&b, `, "description": %s`, d)
	}
	if ps := bytes.TrimSpace(t.Function.Parameters); len(ps) > 0 && string(ps) != "null" {
		fmt.Fprintf(&b, `, "parameters": %s`, ps)
	}
	b.WriteString("}}")
	return b.Bytes()
}

func parseToolChoice(raw json.RawMessage, names map[string]bool) (toolChoice, *APIError) {
	if isNull(raw) {
		if len(names) == 0 {
			return toolChoice{mode: "none"}, nil
		}
		return toolChoice{mode: "auto"}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "none", "auto", "required":
			if s != "none" && len(names) == 0 {
				return toolChoice{}, badRequest("tool_choice", "tool_choice %q needs tools", s)
			}
			return toolChoice{mode: s}, nil
		}
		return toolChoice{}, badRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got %q", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Type != "function" || obj.Function.Name == "" {
		return toolChoice{}, badRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	if !names[obj.Function.Name] {
		return toolChoice{}, badRequest("tool_choice", "tool_choice names the function %q, which is not among the tools", obj.Function.Name)
	}
	return toolChoice{mode: "function", name: obj.Function.Name}, nil
}

// parse validates message i.
func (m rawMessage) parse(i int) (chattmpl.Message, *APIError) {
	p := fmt.Sprintf("messages[%d]", i)
	out := chattmpl.Message{Role: m.Role, ReasoningContent: m.ReasoningContent}
	switch m.Role {
	case "system", "user", "assistant", "tool":
	case "developer":
		out.Role = "system"
	case "":
		return out, badRequest(p+".role", "%s.role is required", p)
	default:
		return out, badRequest(p+".role", "%s.role must be system, developer, user, assistant or tool, got %q", p, m.Role)
	}
	text, err := contentText(m.Content, p+".content")
	if err != nil {
		return out, err
	}
	if text == nil && !(m.Role == "assistant" && len(m.ToolCalls) > 0) {
		return out, badRequest(p+".content", "%s.content is required", p)
	}
	if text != nil {
		out.Content = *text
	}
	if len(m.ToolCalls) > 0 && m.Role != "assistant" {
		return out, badRequest(p+".tool_calls", "%s.tool_calls is only allowed on assistant messages", p)
	}
	for j, c := range m.ToolCalls {
		cp := fmt.Sprintf("%s.tool_calls[%d]", p, j)
		if c.Type != "" && c.Type != "function" {
			return out, badRequest(cp+".type", "%s.type must be \"function\", got %q", cp, c.Type)
		}
		if c.Function.Name == "" {
			return out, badRequest(cp+".function.name", "%s.function.name is required", cp)
		}
		args := json.RawMessage(strings.TrimSpace(c.Function.Arguments))
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		if !json.Valid(args) || args[0] != '{' {
			// Not a JSON object: hand it to the template as the text it is.
			args, _ = json.Marshal(c.Function.Arguments)
		}
		out.ToolCalls = append(out.ToolCalls, chattmpl.ToolCall{Name: c.Function.Name, Arguments: args})
	}
	return out, nil
}

// contentText reads a message content: a string, an array of text parts,
// or null (nil).
func contentText(raw json.RawMessage, param string) (*string, *APIError) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return &s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badRequest(param, "%s must be a string or an array of content parts", param)
	}
	var b strings.Builder
	for k, part := range parts {
		pp := fmt.Sprintf("%s[%d]", param, k)
		if part.Type != "text" {
			return nil, badRequest(pp+".type", "%s.type %q is not supported: this model reads only text parts", pp, part.Type)
		}
		if part.Text == nil {
			return nil, badRequest(pp+".text", "%s.text is required", pp)
		}
		b.WriteString(*part.Text)
	}
	out := b.String()
	return &out, nil
}

// parse validates a text completion request; the prompt is a string or a
// list of one string, or a list of token ids (or a list of one such list).
func (r *completionRequest) parse(defaults sample.Params, seed func() uint64) (text string, ids []int, g genParams, e *APIError) {
	g, e = r.params(defaults, seed)
	if e != nil {
		return
	}
	if r.MaxTokens == nil {
		g.maxTokens = 16 // OpenAI's default for completions
	}
	if r.Echo {
		return "", nil, g, badRequest("echo", "echo is not supported")
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return "", nil, g, badRequest("suffix", "suffix is not supported")
	}
	if r.BestOf != nil && *r.BestOf != 1 {
		return "", nil, g, badRequest("best_of", "best_of must be 1")
	}
	if isNull(r.Prompt) {
		return "", nil, g, badRequest("prompt", "prompt is required")
	}
	var s string
	if err := json.Unmarshal(r.Prompt, &s); err == nil {
		return s, nil, g, nil
	}
	var list []string
	if err := json.Unmarshal(r.Prompt, &list); err == nil {
		if len(list) != 1 {
			return "", nil, g, badRequest("prompt", "prompt must be one string: got %d (this server answers one prompt per request)", len(list))
		}
		return list[0], nil, g, nil
	}
	var toks []int
	if err := json.Unmarshal(r.Prompt, &toks); err != nil {
		var nested [][]int
		if err := json.Unmarshal(r.Prompt, &nested); err != nil || len(nested) != 1 {
			return "", nil, g, badRequest("prompt", "prompt must be a string, an array of one string, or an array of token ids")
		}
		toks = nested[0]
	}
	if len(toks) == 0 {
		return "", nil, g, badRequest("prompt", "prompt has no tokens")
	}
	return "", toks, g, nil
}
