// Package server serves one loaded model over the OpenAI-compatible HTTP
// API that chat UIs, agents and the official SDKs speak: GET /v1/models,
// POST /v1/chat/completions (JSON or server-sent events), POST
// /v1/completions and GET /health.
//
// Requests run one at a time in arrival order from a bounded queue (a full
// queue answers 429 with Retry-After). A chat client resends the whole
// conversation with every turn: the server keeps decode states saved at
// prefill-chunk boundaries in a byte-bounded LRU (runner.PrefixCache) and
// prefills only what follows the longest saved prefix, with logits equal to
// a cold prefill bit for bit; usage.prompt_tokens_details.cached_tokens
// reports the reused tokens. A streamed response's text is written by a
// goroutine of its own, off the decode loop (textQueue). A client that
// goes away stops its generation within a token or two. Tools are rendered through the model's chat template;
// Qwen3's <tool_call> blocks in the output become tool_calls, and
// <think>…</think> becomes reasoning_content unless the server keeps it
// inline.
//
// Every failure is answered in OpenAI's error format
// {"error": {"message", "type", "param", "code"}} with the status that fits:
// 400 names the offending field, 401 a bad key, 404 an unknown model, 413 a
// body too large, 429 a full queue, 503 a model still loading or a server
// shutting down.
package server
