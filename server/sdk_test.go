package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

func client(url, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithRequestTimeout(60*time.Second))
}

func chatParams(msgs ...openai.ChatCompletionMessageParamUnion) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "tiny", Messages: msgs, MaxTokens: openai.Int(8), Temperature: openai.Float(0)}
}

// The official SDK, non-streaming and streaming, on the tiny model: the
// same greedy text both ways, usage in both, the stream's usage chunk with
// no choices, ids and fingerprints.
func TestSDKChatStreamingMatchesNonStreaming(t *testing.T) {
	_, ts := newTiny(t, Config{}, 0)
	c := client(ts.URL, "any")
	ctx := context.Background()
	p := chatParams(openai.SystemMessage("Be brief."), openai.UserMessage("Hello there"))
	res, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 1 || res.Choices[0].FinishReason != "length" || res.Usage.CompletionTokens != 8 ||
		res.Usage.PromptTokens == 0 || res.Usage.TotalTokens != res.Usage.PromptTokens+8 {
		t.Fatalf("response %+v", res)
	}
	if !strings.HasPrefix(res.ID, "chatcmpl-") || res.SystemFingerprint == "" || res.Model != "tiny" || res.Object != "chat.completion" {
		t.Fatalf("head: id %q fingerprint %q model %q object %q", res.ID, res.SystemFingerprint, res.Model, res.Object)
	}
	text := res.Choices[0].Message.Content
	if text == "" {
		t.Fatal("empty content")
	}

	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := c.Chat.Completions.NewStreaming(ctx, p)
	var acc openai.ChatCompletionAccumulator
	var chunks, usageChunks int
	var first, lastReason string
	ids := map[string]bool{}
	for st.Next() {
		ch := st.Current()
		acc.AddChunk(ch)
		ids[ch.ID] = true
		chunks++
		if len(ch.Choices) == 0 {
			usageChunks++
			if ch.Usage.CompletionTokens != 8 {
				t.Fatalf("usage chunk %+v", ch.Usage)
			}
			continue
		}
		if chunks == 1 {
			first = string(ch.Choices[0].Delta.Role)
		}
		if ch.Choices[0].FinishReason != "" {
			lastReason = ch.Choices[0].FinishReason
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if first != "assistant" || lastReason != "length" || usageChunks != 1 || len(ids) != 1 {
		t.Fatalf("stream: first role %q, finish %q, %d usage chunks, %d ids", first, lastReason, usageChunks, len(ids))
	}
	if got := acc.Choices[0].Message.Content; got != text {
		t.Fatalf("streamed %q, non-streaming %q", got, text)
	}
}

// Stop strings end the text before them, with finish_reason stop.
func TestSDKStop(t *testing.T) {
	s, ts := newTiny(t, Config{}, 0)
	script(s, []string{"Hel", "lo wo", "rld. ", "Bye"}, nil)
	c := client(ts.URL, "k")
	p := chatParams(openai.UserMessage("hi"))
	p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"world", "zzz"}}
	res, err := c.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Choices[0].Message.Content; got != "Hello " || res.Choices[0].FinishReason != "stop" {
		t.Fatalf("content %q finish %q", got, res.Choices[0].FinishReason)
	}
	// The text completions endpoint too.
	cr, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "tiny",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once")}, Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String("rld")}})
	if err != nil {
		t.Fatal(err)
	}
	if cr.Choices[0].Text != "Hello wo" || cr.Choices[0].FinishReason != "stop" || cr.Object != "text_completion" {
		t.Fatalf("completion %+v", cr.Choices[0])
	}
}

func apiErr(t *testing.T, err error, status int, param, code string) {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an API error", err)
	}
	if ae.StatusCode != status || ae.Param != param || ae.Code != code || ae.Message == "" {
		t.Fatalf("got status %d param %q code %q message %q; want %d %q %q", ae.StatusCode, ae.Param, ae.Code, ae.Message, status, param, code)
	}
}

// Errors as the SDK sees them: another model 404, n 400 naming the
// field, a bad key 401, an image part 400 naming the part.
func TestSDKErrors(t *testing.T) {
	_, ts := newTiny(t, Config{APIKey: "sekrit"}, 0)
	ctx := context.Background()
	c := client(ts.URL, "sekrit")
	p := chatParams(openai.UserMessage("hi"))
	p.Model = "gpt-4o"
	_, err := c.Chat.Completions.New(ctx, p)
	apiErr(t, err, http.StatusNotFound, "model", "model_not_found")

	p = chatParams(openai.UserMessage("hi"))
	p.N = openai.Int(2)
	_, err = c.Chat.Completions.New(ctx, p)
	apiErr(t, err, http.StatusBadRequest, "n", "")

	p = chatParams(openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
		openai.TextContentPart("look"), openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "http://x/y.png"})}))
	_, err = c.Chat.Completions.New(ctx, p)
	apiErr(t, err, http.StatusBadRequest, "messages[0].content[1].type", "")

	p = chatParams(openai.UserMessage("hi"))
	p.Temperature = openai.Float(3)
	_, err = c.Chat.Completions.New(ctx, p)
	apiErr(t, err, http.StatusBadRequest, "temperature", "")

	bad := client(ts.URL, "wrong")
	_, err = bad.Chat.Completions.New(ctx, chatParams(openai.UserMessage("hi")))
	apiErr(t, err, http.StatusUnauthorized, "", "invalid_api_key")

	if _, err := c.Models.List(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := c.Models.Get(ctx, "tiny")
	if err != nil || m.ID != "tiny" {
		t.Fatalf("model %+v, %v", m, err)
	}
}

var weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name: "get_weather", Description: openai.String("the weather in a city"),
	Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
})

// A scripted model answers with reasoning and two Qwen3 tool calls: the
// SDK sees reasoning_content, the calls with their arguments as a JSON
// string and finish_reason tool_calls, both ways.
func TestSDKToolCalls(t *testing.T) {
	s, ts := newTiny(t, Config{}, 0)
	useQwen3Template(t, s)
	var prompts []string
	out := []string{"<th", "ink>\nThe user wants weather.", "</think>\n\n", "<tool_", "call>\n{\"name\": \"get_weather\", ",
		"\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"}
	script(s, out, nil)
	inner := s.gen
	s.gen = func(ctx context.Context, j *job) (*outcome, error) {
		prompts = append(prompts, j.text)
		return inner(ctx, j)
	}
	c := client(ts.URL, "k")
	p := chatParams(openai.UserMessage("Weather in Paris and Rome?"))
	p.MaxTokens = openai.Int(50)
	p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool}
	res, err := c.Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	ch := res.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 2 {
		t.Fatalf("finish %q, %d calls", ch.FinishReason, len(ch.Message.ToolCalls))
	}
	if f := ch.Message.ToolCalls[0].Function; f.Name != "get_weather" || f.Arguments != `{"city":"Paris"}` {
		t.Fatalf("call 0: %+v", f)
	}
	if f := ch.Message.ToolCalls[1].Function; f.Arguments != `{"city":"Rome"}` || ch.Message.ToolCalls[1].ID == ch.Message.ToolCalls[0].ID {
		t.Fatalf("call 1: %+v", ch.Message.ToolCalls[1])
	}
	if ch.Message.Content != "" {
		t.Fatalf("content %q beside the calls", ch.Message.Content)
	}
	if r := ch.Message.JSON.ExtraFields["reasoning_content"].Raw(); r != `"The user wants weather."` {
		t.Fatalf("reasoning_content %s", r)
	}
	if !strings.Contains(prompts[0], `"name": "get_weather"`) || !strings.Contains(prompts[0], "<tools>") {
		t.Fatalf("the tools were not rendered through the template:\n%s", prompts[0])
	}

	st := c.Chat.Completions.NewStreaming(context.Background(), p)
	var acc openai.ChatCompletionAccumulator
	var finished []string
	var reasoning strings.Builder
	for st.Next() {
		chunk := st.Current()
		acc.AddChunk(chunk)
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc.Arguments)
		}
		if len(chunk.Choices) > 0 {
			var d struct {
				R string `json:"reasoning_content"`
			}
			if err := json.Unmarshal([]byte(chunk.Choices[0].Delta.RawJSON()), &d); err != nil {
				t.Fatal(err)
			}
			reasoning.WriteString(d.R)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	got := acc.Choices[0]
	if got.FinishReason != "tool_calls" || len(got.Message.ToolCalls) != 2 || got.Message.ToolCalls[1].Function.Arguments != `{"city":"Rome"}` {
		t.Fatalf("streamed: finish %q calls %+v", got.FinishReason, got.Message.ToolCalls)
	}
	if len(finished) < 1 || finished[0] != `{"city":"Paris"}` || reasoning.String() != "The user wants weather." {
		t.Fatalf("streamed: finished %v, reasoning %q", finished, reasoning.String())
	}

	// A tool result goes back through the template as the next turn.
	p.Messages = append(p.Messages, res.Choices[0].Message.ToParam(), openai.ToolMessage("sunny", ch.Message.ToolCalls[0].ID))
	if _, err := c.Chat.Completions.New(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if last := prompts[len(prompts)-1]; !strings.Contains(last, "sunny") || !strings.Contains(last, "<tool_call>") {
		t.Fatalf("the tool turn was not rendered:\n%s", last)
	}
}

// A conversation's later turns resume from a saved state: cached_tokens
// reports the reused prompt tokens, and the reply equals that of a server
// with no saved states (greedy: the logits are the same bit for bit).
func TestSDKPrefixReuse(t *testing.T) {
	warm, wts := newTiny(t, Config{}, 4)
	_, cts := newTiny(t, Config{PrefixCache: -1}, 4)
	ctx := context.Background()
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You answer briefly."), openai.UserMessage("First question")}
	wc, cc := client(wts.URL, "k"), client(cts.URL, "k")
	for turn := range 3 {
		w, err := wc.Chat.Completions.New(ctx, chatParams(msgs...))
		if err != nil {
			t.Fatal(err)
		}
		c, err := cc.Chat.Completions.New(ctx, chatParams(msgs...))
		if err != nil {
			t.Fatal(err)
		}
		if w.Choices[0].Message.Content != c.Choices[0].Message.Content {
			t.Fatalf("turn %d: %q with reuse, %q cold", turn, w.Choices[0].Message.Content, c.Choices[0].Message.Content)
		}
		cached := w.Usage.PromptTokensDetails.CachedTokens
		if turn == 0 && cached != 0 || turn > 0 && (cached == 0 || cached >= w.Usage.PromptTokens || cached%4 != 0) {
			t.Fatalf("turn %d: cached %d of %d prompt tokens", turn, cached, w.Usage.PromptTokens)
		}
		if c.Usage.PromptTokensDetails.CachedTokens != 0 {
			t.Fatal("cold server reused tokens")
		}
		msgs = append(msgs, openai.AssistantMessage(w.Choices[0].Message.Content), openai.UserMessage("And then?"))
	}
	if st := warm.PrefixStats(); st.States == 0 || st.Bytes > st.Budget {
		t.Fatalf("prefix stats %+v", st)
	}
}
