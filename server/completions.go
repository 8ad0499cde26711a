package server

import (
	"fmt"
	"net/http"
)

// textShape writes text_completion objects.
type textShape struct{ h head }

type textChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type textChunk struct {
	head
	Choices []textChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
}

func (c *textShape) obj(choices []textChoice, u *usage) any {
	h := c.h
	h.Object = "text_completion"
	return textChunk{head: h, Choices: choices, Usage: u}
}

func (c *textShape) first() any { return nil }

func (c *textShape) delta(ev event) any {
	if ev.content == "" {
		return nil
	}
	return c.obj([]textChoice{{Text: ev.content}}, nil)
}

func (c *textShape) last(reason string) any {
	return c.obj([]textChoice{{FinishReason: &reason}}, nil)
}

func (c *textShape) usageChunk(u usage) any { return c.obj([]textChoice{}, &u) }

func (c *textShape) whole(content, _ string, _ []ToolCall, reason string, u usage) any {
	return c.obj([]textChoice{{Text: content, FinishReason: &reason}}, &u)
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request, body []byte) {
	var req completionRequest
	if !s.accept(w, body, &req) {
		return
	}
	text, ids, g, e := req.parse(s.cfg.Defaults, randomSeed)
	if e != nil {
		writeError(w, e)
		return
	}
	t, e := s.admit()
	if e != nil {
		writeError(w, e)
		return
	}
	defer t.release()
	if ids == nil {
		if text == "" {
			writeError(w, badRequest("prompt", "prompt is empty"))
			return
		}
		ids = s.r.Tokenizer.Encode(text)
	} else {
		vocab := s.r.Model.Config.Vocab
		for i, id := range ids {
			if id < 0 || id >= vocab {
				writeError(w, badRequest(fmt.Sprintf("prompt[%d]", i), "token id %d is outside the vocabulary [0, %d)", id, vocab))
				return
			}
		}
		text = s.r.Tokenizer.Decode(ids, false)
	}
	maxNew, e := s.limits(len(ids), g.maxTokens, "prompt")
	if e != nil {
		writeError(w, e)
		return
	}
	j := &job{prompt: ids, text: text, gen: g, maxNew: maxNew}
	s.respond(w, r, t, j, &textShape{h: s.newHead("cmpl-")}, nil, "")
}
