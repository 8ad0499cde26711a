package server

import (
	"net/http"
	"strings"
	"time"
)

// usage is the usage object of a response.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func newUsage(prompt int, o *outcome) usage {
	u := usage{PromptTokens: prompt, CompletionTokens: o.completion, TotalTokens: prompt + o.completion}
	u.PromptTokensDetails.CachedTokens = o.cached
	return u
}

// shape writes one API's objects (chat.completion or text_completion).
type shape interface {
	// first is the stream's first chunk (nil: none).
	first() any
	// delta is the chunk of one parsed event (nil: nothing to send).
	delta(ev event) any
	// last is the stream's chunk with the finish reason.
	last(reason string) any
	// usageChunk is the stream's usage chunk (choices: []).
	usageChunk(u usage) any
	// whole is the non-streaming response.
	whole(content, reasoning string, calls []ToolCall, reason string, u usage) any
}

// head is what every object of a response carries.
type head struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
}

type chatShape struct{ h head }

type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int          `json:"index"`
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatChunk struct {
	head
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

func (c *chatShape) chunk(d chatDelta, reason *string) any {
	h := c.h
	h.Object = "chat.completion.chunk"
	return chatChunk{head: h, Choices: []chunkChoice{{Delta: d, FinishReason: reason}}}
}

func (c *chatShape) first() any {
	empty := ""
	return c.chunk(chatDelta{Role: "assistant", Content: &empty}, nil)
}

// calls counts the tool calls streamed so far, for their index.
func (c *chatShape) delta(ev event) any {
	switch {
	case ev.call != nil:
		return c.chunk(chatDelta{ToolCalls: []toolCallDelta{{Index: ev.index, ID: ev.call.ID, Type: "function",
			Function: toolFunction{Name: ev.call.Name, Arguments: ev.call.Arguments}}}}, nil)
	case ev.reasoning != "":
		return c.chunk(chatDelta{ReasoningContent: &ev.reasoning}, nil)
	case ev.content != "":
		return c.chunk(chatDelta{Content: &ev.content}, nil)
	}
	return nil
}

func (c *chatShape) last(reason string) any { return c.chunk(chatDelta{}, &reason) }

func (c *chatShape) usageChunk(u usage) any {
	h := c.h
	h.Object = "chat.completion.chunk"
	return chatChunk{head: h, Choices: []chunkChoice{}, Usage: &u}
}

func (c *chatShape) whole(content, reasoning string, calls []ToolCall, reason string, u usage) any {
	type message struct {
		Role             string          `json:"role"`
		Content          *string         `json:"content"`
		ReasoningContent *string         `json:"reasoning_content,omitempty"`
		ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
	}
	m := message{Role: "assistant", Content: &content}
	if reasoning != "" {
		m.ReasoningContent = &reasoning
	}
	for i, tc := range calls {
		m.ToolCalls = append(m.ToolCalls, toolCallDelta{Index: i, ID: tc.ID, Type: "function",
			Function: toolFunction{Name: tc.Name, Arguments: tc.Arguments}})
	}
	if len(calls) > 0 && strings.TrimSpace(content) == "" {
		m.Content = nil
	}
	h := c.h
	h.Object = "chat.completion"
	return struct {
		head
		Choices []any `json:"choices"`
		Usage   usage `json:"usage"`
	}{h, []any{map[string]any{"index": 0, "message": m, "logprobs": nil, "finish_reason": reason}}, u}
}

func (s *Server) newHead(prefix string) head {
	return head{ID: randomID(prefix), Created: time.Now().Unix(), Model: s.cfg.ModelID, SystemFingerprint: s.fingerprint}
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request, body []byte) {
	var req chatRequest
	if !s.accept(w, body, &req) {
		return
	}
	in, e := req.parse(s.cfg.Defaults, randomSeed)
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
	p := s.render(in)
	ids := s.r.Tokenizer.Encode(p.text)
	maxNew, e := s.limits(len(ids), in.gen.maxTokens, "messages")
	if e != nil {
		writeError(w, e)
		return
	}
	parser := newOutputParser(!s.cfg.ThinkInline, len(in.tools) > 0, p.inThink, func() string { return randomID("call_") })
	j := &job{prompt: ids, text: p.text, gen: in.gen, maxNew: maxNew}
	s.respond(w, r, t, j, &chatShape{h: s.newHead("chatcmpl-")}, parser, p.forced)
}

// accept decodes a request body into req and checks the model it names
// and that the server can take work, answering a failure itself.
func (s *Server) accept(w http.ResponseWriter, body []byte, req interface{ modelName() *string }) bool {
	e := decodeBody(body, req)
	if e == nil {
		e = s.checkModel(req.modelName())
	}
	if e == nil {
		e = s.available()
	}
	if e != nil {
		writeError(w, e)
		return false
	}
	return true
}

// respond waits for t's turn, runs j and answers in the request's shape:
// one JSON object, or a stream of chunks. parser splits the output (nil:
// all of it is text); forced is output the prompt already holds. The
// caller takes t (s.admit) before it renders and tokenizes the prompt, so
// that no more requests than the queue holds spend CPU on that at once.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, t *ticket, j *job, sh shape, parser *outputParser, forced string) {
	if parser == nil {
		parser = newOutputParser(false, false, false, nil)
	}
	var content, reasoning strings.Builder
	var calls []ToolCall
	collect := func(evs []event) []event {
		for i := range evs {
			ev := &evs[i]
			content.WriteString(ev.content)
			reasoning.WriteString(ev.reasoning)
			if ev.call != nil {
				ev.index = len(calls)
				calls = append(calls, *ev.call)
			}
		}
		return evs
	}
	finish := func(o *outcome) string {
		reason := o.finishReason()
		if len(calls) > 0 && o.reason != "length" {
			reason = "tool_calls"
		}
		s.log.Info("completion", "prompt_tokens", len(j.prompt), "cached_tokens", o.cached, "completion_tokens", o.completion,
			"finish_reason", reason, "prefill_seconds", o.prefill.Seconds(), "decode_seconds", o.decode.Seconds())
		return reason
	}
	collect(parser.Push(forced))

	if !j.gen.stream {
		if e := s.await(r.Context(), t); e != nil {
			writeError(w, e)
			return
		}
		o, _, err := s.run(r.Context(), j)
		if err != nil {
			s.failed(w, r, err)
			return
		}
		collect(parser.Push(o.text))
		collect(parser.Flush())
		writeJSON(w, http.StatusOK, sh.whole(content.String(), reasoning.String(), calls, finish(o), newUsage(len(j.prompt), o)))
		return
	}

	sse := newSSE(w, s.cfg.KeepAlive)
	defer sse.stop()
	if f := sh.first(); f != nil {
		sse.send(f)
	}
	if e := s.await(r.Context(), t); e != nil {
		sse.send(e.body())
		sse.end()
		return
	}
	send := func(evs []event) error {
		for _, ev := range collect(evs) {
			if d := sh.delta(ev); d != nil {
				if err := sse.send(d); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// The text goes to the client off the decode loop (textQueue); the
	// parser and the collected calls are the writer's until close.
	q := newTextQueue(func(text string) error { return send(parser.Push(text)) }, textQueueDepth)
	defer q.close() // the writer's end on every way out
	j.onText = q.push
	o, _, err := s.run(r.Context(), j)
	if qerr := q.close(); err == nil {
		err = qerr // the client gone (sse.err) or the writer's panic, after the last piece
	}
	if err != nil {
		if r.Context().Err() == nil && sse.err == nil {
			s.log.Error("generation failed", "err", err)
			sse.send(serverError("generation failed: %v", err).body())
			sse.end()
		}
		return
	}
	if send(parser.Flush()) != nil {
		return
	}
	sse.send(sh.last(finish(o)))
	if j.gen.includeUsage {
		sse.send(sh.usageChunk(newUsage(len(j.prompt), o)))
	}
	sse.end()
}

// failed answers a generation that failed before anything was sent.
func (s *Server) failed(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away
	}
	s.log.Error("generation failed", "err", err)
	writeError(w, serverError("generation failed: %v", err))
}
