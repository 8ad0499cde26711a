package server

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/qpack-go/qpack/runtime/chattmpl"
)

// prompt is a rendered chat prompt.
type prompt struct {
	text string
	// forced is output text the prompt ends with on the model's behalf
	// (the opening of a tool call that tool_choice requires): the parser
	// sees it as if generated.
	forced string
	// inThink: the prompt leaves a <think> block open (Qwen3.5's
	// generation prompt does).
	inThink bool
}

// render renders a chat through the model's template. A template that
// refuses a system message after the first turn (Qwen3.5 raises) gets the
// system messages merged into one at the start; a template that still
// fails, or none, gives ChatML (logged).
func (s *Server) render(in *chatInput) prompt {
	opts := chattmpl.Options{AddGenerationPrompt: true, EnableThinking: in.thinking, Tools: in.tools}
	tmpl := s.r.Template
	var text string
	var err error
	if tmpl == nil {
		text, err = chattmpl.Render(nil, in.msgs, opts)
	} else if text, err = tmpl.Render(in.msgs, opts); err != nil {
		if hoisted, moved := hoistSystem(in.msgs); moved {
			if t, err2 := tmpl.Render(hoisted, opts); err2 == nil {
				s.log.Debug("chat template refused a system message after the first turn: merged the system messages at the start", "err", err)
				text, err = t, nil
			}
		}
		if err != nil {
			s.log.Warn("chat template failed; using ChatML", "template", tmpl.Name(), "err", err)
			text = chattmpl.ChatML(in.msgs, opts)
		}
	}
	if len(in.tools) > 0 && !strings.Contains(text, toolName(in.tools[0])) {
		s.log.Warn("the chat template does not render tools: the model will not see them", "tools", len(in.tools))
	}
	p := prompt{text: text, inThink: strings.HasSuffix(strings.TrimRight(text, " \n"), thinkOpen)}
	if in.choice.mode == "required" || in.choice.mode == "function" {
		if p.inThink {
			p.forced = "\n" + thinkClose + "\n\n"
		}
		// Qwen3.5's template asks for <function=NAME> blocks, Qwen3's for JSON.
		xml := strings.Contains(text, "<function=example_function_name>")
		switch {
		case in.choice.mode == "required" && xml:
			p.forced += toolOpen + "\n<function="
		case in.choice.mode == "required":
			p.forced += toolOpen + "\n{\"name\": \""
		case xml:
			p.forced += toolOpen + "\n<function=" + in.choice.name + ">\n"
		default:
			p.forced += toolOpen + "\n{\"name\": \"" + in.choice.name + "\", \"arguments\": "
		}
		p.text += p.forced
	}
	return p
}

// hoistSystem moves every system message to one at the start (texts joined
// by a blank line); moved is false when they already were there.
func hoistSystem(msgs []chattmpl.Message) ([]chattmpl.Message, bool) {
	var sys []string
	var rest []chattmpl.Message
	moved, seenOther := false, false
	for _, m := range msgs {
		if m.Role == "system" {
			sys = append(sys, m.Content)
			moved = moved || seenOther
			continue
		}
		seenOther = true
		rest = append(rest, m)
	}
	if !moved {
		return msgs, false
	}
	return slices.Insert(rest, 0, chattmpl.Message{Role: "system", Content: strings.Join(sys, "\n\n")}), true
}

// toolName is the function name in a tool definition made by toolJSON.
func toolName(raw []byte) string {
	var t struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	json.Unmarshal(raw, &t)
	return t.Function.Name
}
