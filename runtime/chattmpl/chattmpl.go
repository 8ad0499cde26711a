// Package chattmpl renders a model's Jinja chat template (the chat_template
// of tokenizer_config.json, or chat_template.jinja) into the prompt text, the
// way transformers' apply_chat_template does, on github.com/nikolalohinski/gonja/v2.
//
// Like transformers it renders with trim_blocks and lstrip_blocks, provides
// raise_exception, strftime_now, a range bounded as in Jinja's sandbox, and a
// tojson filter with Python json.dumps output (", " and ": " separators,
// non-ASCII kept, keys in the order they came in). JSON handed in (tools,
// tool-call arguments) keeps its key order.
//
// When a model has no template, or its template fails to parse or render,
// Render returns the error together with a built-in ChatML rendering, so the
// caller can log the error and carry on.
package chattmpl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"

	"github.com/qpack-go/qpack/internal/regfile"
)

// Limits on untrusted input.
const (
	MaxTemplateSize = 1 << 20  // bytes of one template
	MaxConfigSize   = 32 << 20 // bytes of tokenizer_config.json
	MaxOutputSize   = 64 << 20 // bytes of rendered text
	maxRange        = 100000   // items of range(), as Jinja's sandbox allows
	maxTemplates    = 64       // named templates in one list
)

// ErrNoTemplate is returned (wrapped) when a model ships no chat template.
var ErrNoTemplate = errors.New("no chat template")

// Message is one conversation turn.
type Message struct {
	Role    string // "system", "user", "assistant" or "tool"
	Content string
	// ReasoningContent, when set, is passed as reasoning_content (Qwen3
	// templates then use it instead of a <think> block inside Content).
	ReasoningContent *string
	ToolCalls        []ToolCall // assistant turns only
}

// ToolCall is one function call made by the assistant. It reaches the
// template as {"type": "function", "function": {"name", "arguments"}}.
type ToolCall struct {
	Name string
	// Arguments is a JSON object, or a JSON string holding the arguments
	// as text (templates print such a string as it is).
	Arguments json.RawMessage
}

// Options are the template inputs other than the messages.
type Options struct {
	AddGenerationPrompt bool
	// EnableThinking, when non-nil, is passed as enable_thinking (Qwen3:
	// false appends an empty <think></think> block to the generation prompt).
	EnableThinking *bool
	// Tools are JSON tool definitions, e.g. {"type": "function", "function": {...}}.
	Tools []json.RawMessage
	// BOSToken and EOSToken are passed as bos_token / eos_token when set.
	BOSToken, EOSToken string
	// Vars are further template variables.
	Vars map[string]any
}

// Template is a parsed chat template, possibly a set of named ones.
type Template struct {
	name  string // where it came from, for errors
	named map[string]*exec.Template
	order []string
	// specials are tokenizer_config.json's special tokens (see LoadDir).
	specials map[string]string
}

// Name returns the file the template came from.
func (t *Template) Name() string { return t.name }

var gonjaConfig = func() *config.Config {
	c := config.New()
	c.TrimBlocks = true
	c.LeftStripBlocks = true
	return c
}()

var environment = func() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{})
	filters.Update(builtins.Filters)
	if err := filters.Replace("tojson", tojsonFilter); err != nil {
		panic(err)
	}
	if err := filters.Replace("items", itemsFilter); err != nil {
		panic(err)
	}
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Set("raise_exception", raiseException)
	ctx.Set("strftime_now", strftimeNow)
	ctx.Set("range", boundedRange)
	return &exec.Environment{
		Context:           ctx,
		Filters:           filters,
		Tests:             templateTests,
		ControlStructures: controlStructureSet(),
		Methods:           immutableMethods(),
	}
}()

func raiseException(_ *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	msg := "raise_exception called"
	if len(params.Args) > 0 {
		msg = params.Args[0].String()
	}
	return exec.AsValue(fmt.Errorf("template raised: %s", msg))
}

// nowFunc is replaced in tests.
var nowFunc = time.Now

func strftimeNow(_ *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	if len(params.Args) != 1 || !params.Args[0].IsString() {
		return exec.AsValue(errors.New("strftime_now takes one format string"))
	}
	return exec.AsValue(strftime(nowFunc(), params.Args[0].String()))
}

// strftime supports the directives chat templates use for dates.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'B':
			b.WriteString(t.Month().String())
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// boundedRange is range() returning a list, limited like Jinja's sandbox.
func boundedRange(_ *exec.Evaluator, params *exec.VarArgs) (pyList, error) {
	start, stop, step := 0, 0, 1
	for _, a := range params.Args {
		if !a.IsInteger() {
			return nil, errors.New("range: arguments must be integers")
		}
	}
	switch len(params.Args) {
	case 1:
		stop = params.Args[0].Integer()
	case 2:
		start, stop = params.Args[0].Integer(), params.Args[1].Integer()
	case 3:
		start, stop, step = params.Args[0].Integer(), params.Args[1].Integer(), params.Args[2].Integer()
	default:
		return nil, errors.New("range: expected [start, ]stop[, step]")
	}
	if step == 0 {
		return nil, errors.New("range: step cannot be 0")
	}
	var n int
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && stop < start {
		n = (start - stop - step - 1) / -step
	}
	if n > maxRange || n < 0 {
		return nil, fmt.Errorf("range: %d items, more than %d", n, maxRange)
	}
	out := make(pyList, n)
	for i := range out {
		out[i] = start + i*step
	}
	return out, nil
}

// Parse parses one template; name is used in errors.
func Parse(name, src string) (*Template, error) {
	t := &Template{name: name, named: map[string]*exec.Template{}}
	if err := t.add("default", src); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Template) add(variant, src string) error {
	if len(src) > MaxTemplateSize {
		return fmt.Errorf("chattmpl: %s: template %q is %d bytes, more than %d", t.name, variant, len(src), MaxTemplateSize)
	}
	if _, dup := t.named[variant]; dup {
		return fmt.Errorf("chattmpl: %s: template %q given twice", t.name, variant)
	}
	if err := checkNesting(src); err != nil {
		return fmt.Errorf("chattmpl: %s: template %q: %w", t.name, variant, err)
	}
	ld, err := loaders.NewMemoryLoader(map[string]string{"/chat_template": src})
	if err != nil {
		return fmt.Errorf("chattmpl: %s: %w", t.name, err)
	}
	tpl, err := parseTemplate(ld)
	if err != nil {
		return fmt.Errorf("chattmpl: %s: template %q does not parse: %w", t.name, variant, err)
	}
	t.named[variant] = tpl
	t.order = append(t.order, variant)
	return nil
}

// parseTemplate calls gonja, turning a panic in its parser into an error.
func parseTemplate(ld loaders.Loader) (tpl *exec.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			tpl, err = nil, fmt.Errorf("parser panic: %v", r)
		}
	}()
	tpl, err = exec.NewTemplate("/chat_template", gonjaConfig, ld, environment)
	if err != nil {
		// gonja quotes the whole source in its message; keep only the cause.
		if u := errors.Unwrap(err); u != nil {
			err = u
		}
	}
	return tpl, err
}

// loadDirTemplate finds the template of a model directory (see LoadDir).
func loadDirTemplate(dir string) (*Template, error) {
	p := filepath.Join(dir, "chat_template.jinja")
	if data, err := readBounded(p, MaxTemplateSize); err == nil {
		return Parse(p, string(data))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chattmpl: %w", err)
	}
	for _, f := range []string{"chat_template.json", "tokenizer_config.json"} {
		p := filepath.Join(dir, f)
		data, err := readBounded(p, MaxConfigSize)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("chattmpl: %w", err)
		}
		t, err := FromConfig(p, data)
		if errors.Is(err, ErrNoTemplate) {
			continue
		}
		return t, err
	}
	return nil, fmt.Errorf("chattmpl: %s: %w", dir, ErrNoTemplate)
}

// readBounded reads a regular file of at most limit bytes, without
// blocking on a FIFO.
func readBounded(path string, limit int64) ([]byte, error) {
	return regfile.ReadFile(path, limit)
}

// FromConfig reads the "chat_template" field of a tokenizer_config.json (or
// chat_template.json); name is used in errors.
func FromConfig(name string, data []byte) (*Template, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("chattmpl: %s: %w", name, err)
	}
	raw := strings.TrimSpace(string(cfg.ChatTemplate))
	if raw == "" || raw == "null" {
		return nil, fmt.Errorf("chattmpl: %s: %w", name, ErrNoTemplate)
	}
	var single string
	if err := json.Unmarshal(cfg.ChatTemplate, &single); err == nil {
		return Parse(name, single)
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(cfg.ChatTemplate, &list); err != nil {
		return nil, fmt.Errorf("chattmpl: %s: chat_template is neither a string nor a list of {name, template}", name)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("chattmpl: %s: %w (empty list)", name, ErrNoTemplate)
	}
	if len(list) > maxTemplates {
		return nil, fmt.Errorf("chattmpl: %s: %d templates, more than %d", name, len(list), maxTemplates)
	}
	t := &Template{name: name, named: map[string]*exec.Template{}}
	for i, e := range list {
		if e.Name == nil || e.Template == nil {
			return nil, fmt.Errorf("chattmpl: %s: chat_template[%d] lacks name or template", name, i)
		}
		if err := t.add(*e.Name, *e.Template); err != nil {
			return nil, err
		}
	}
	if _, ok := t.named["default"]; !ok {
		return nil, fmt.Errorf("chattmpl: %s: the chat_template list has no \"default\"", name)
	}
	return t, nil
}

// Variants lists the names of the templates, in file order.
func (t *Template) Variants() []string { return append([]string(nil), t.order...) }

// Render renders msgs. With tools, a template set's "tool_use" variant is
// used when there is one, as transformers does.
func (t *Template) Render(msgs []Message, opts Options) (string, error) {
	variant := "default"
	if len(opts.Tools) > 0 {
		if _, ok := t.named["tool_use"]; ok {
			variant = "tool_use"
		}
	}
	ko := keyOrder{}
	vars, err := templateVars(msgs, opts, ko)
	if err != nil {
		return "", fmt.Errorf("chattmpl: %s: %w", t.name, err)
	}
	t.addSpecials(vars)
	w := &limitedWriter{limit: MaxOutputSize}
	if err := execute(t.named[variant], w, vars); err != nil {
		return "", fmt.Errorf("chattmpl: %s: rendering failed: %w", t.name, err)
	}
	return w.b.String(), nil
}

func execute(tpl *exec.Template, w io.Writer, vars map[string]any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("template engine panic: %v", r)
		}
	}()
	return tpl.Execute(w, exec.NewContext(vars))
}

func templateVars(msgs []Message, opts Options, ko keyOrder) (map[string]any, error) {
	list := make(pyList, len(msgs))
	for i, m := range msgs {
		mm := map[string]any{"role": m.Role, "content": m.Content}
		keys := []string{"role", "content"}
		if m.ReasoningContent != nil {
			mm["reasoning_content"] = *m.ReasoningContent
			keys = append(keys, "reasoning_content")
		}
		if len(m.ToolCalls) > 0 {
			calls := make(pyList, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				var args any = map[string]any{}
				if len(c.Arguments) > 0 {
					var err error
					if args, err = decodeJSON(c.Arguments, ko); err != nil {
						return nil, fmt.Errorf("message %d tool call %d (%s): arguments: %w", i, j, c.Name, err)
					}
				}
				fn := map[string]any{"name": c.Name, "arguments": args}
				ko.record(fn, []string{"name", "arguments"})
				call := map[string]any{"type": "function", "function": fn}
				ko.record(call, []string{"type", "function"})
				calls[j] = call
			}
			mm["tool_calls"] = calls
			keys = append(keys, "tool_calls")
		}
		ko.record(mm, keys)
		list[i] = mm
	}
	vars := map[string]any{}
	for k, v := range opts.Vars {
		vars[k] = v
	}
	vars["messages"] = list
	vars["add_generation_prompt"] = opts.AddGenerationPrompt
	if opts.EnableThinking != nil {
		vars["enable_thinking"] = *opts.EnableThinking
	}
	if len(opts.Tools) > 0 {
		tools := make(pyList, len(opts.Tools))
		for i, raw := range opts.Tools {
			v, err := decodeJSON(raw, ko)
			if err != nil {
				return nil, fmt.Errorf("tool %d: %w", i, err)
			}
			tools[i] = v
		}
		vars["tools"] = tools
	}
	if opts.BOSToken != "" {
		vars["bos_token"] = opts.BOSToken
	}
	if opts.EOSToken != "" {
		vars["eos_token"] = opts.EOSToken
	}
	vars[keyOrderVar] = ko
	return vars, nil
}

type limitedWriter struct {
	b     strings.Builder
	limit int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.b.Len()+len(p) > w.limit {
		return 0, fmt.Errorf("output longer than %d bytes", w.limit)
	}
	return w.b.Write(p)
}

// Render renders msgs with t. When t is nil (the model has no template) or
// fails, it returns the ChatML fallback rendering together with the error,
// which the caller should log; the text is always usable.
func Render(t *Template, msgs []Message, opts Options) (string, error) {
	if t == nil {
		return ChatML(msgs, opts), ErrNoTemplate
	}
	out, err := t.Render(msgs, opts)
	if err != nil {
		return ChatML(msgs, opts), err
	}
	return out, nil
}

// ChatML renders msgs in the plain ChatML format Qwen models use: each turn
// "<|im_start|>{role}\n{content}<|im_end|>\n", then "<|im_start|>assistant\n"
// when a generation prompt is asked for, followed by an empty
// "<think>\n\n</think>\n\n" when EnableThinking is false. Tool calls are
// written as Qwen's <tool_call> blocks; tools and reasoning_content are not
// rendered.
func ChatML(msgs []Message, opts Options) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		for i, c := range m.ToolCalls {
			if i > 0 || m.Content != "" {
				b.WriteByte('\n')
			}
			args := strings.TrimSpace(string(c.Arguments))
			if args == "" {
				args = "{}"
			}
			name, _ := json.Marshal(c.Name)
			fmt.Fprintf(&b, "<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>", name, args)
		}
		b.WriteString("<|im_end|>\n")
	}
	if opts.AddGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
		if opts.EnableThinking != nil && !*opts.EnableThinking {
			b.WriteString("<think>\n\n</think>\n\n")
		}
	}
	return b.String()
}
