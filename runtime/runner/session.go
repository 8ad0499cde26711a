package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/chattmpl"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/sample"
)

func lookupEnv(k string) bool { _, ok := os.LookupEnv(k); return ok }

// Session is one sequence: the decode state and the tokens in it. For a
// conversation (Chat), each turn prefills only its new tokens: the earlier
// turns, the assistant's replies included, are already in the state.
type Session struct {
	r       *Runner
	st      *runtime.State
	fed     []int // tokens in the state, in order
	pending int   // the last sampled token, not yet in the state (-1: none)
	pendEOS bool  // pending is an EOS id
	msgs    []chattmpl.Message
}

// NewSession starts an empty sequence.
func (r *Runner) NewSession() *Session {
	return &Session{r: r, st: r.Model.NewState(), pending: -1}
}

// Tokens returns the tokens the state holds, in order.
func (s *Session) Tokens() []int { return slices.Clone(s.fed) }

// Messages returns the conversation so far (Chat turns).
func (s *Session) Messages() []chattmpl.Message { return slices.Clone(s.msgs) }

// Reset empties the session.
func (s *Session) Reset() {
	s.resetState()
	s.msgs = nil
}

// resetState empties the decode state, keeping the conversation's
// messages (the next Chat turn prefills them all again).
func (s *Session) resetState() {
	s.st.Reset()
	s.fed, s.pending, s.pendEOS = s.fed[:0], -1, false
}

// GenOptions control one generation.
type GenOptions struct {
	MaxNew int // tokens to generate at most (0: 64)
	Sample sample.Params
	Stop   []string // stop strings (EOS ids always stop)
	// OnText receives the text as it is produced (never a split UTF-8
	// character, never part of a stop string); an error aborts.
	OnText func(string) error
	// OnToken, if set, sees each sampled token with the logits it was
	// sampled from (valid during the call only). Having to keep the
	// logits, the decode then reads them all every step, even where the
	// device could select their top (see OnSampled).
	OnToken func(id int, logits []float32)
	// OnSampled, if set, sees each sampled token, without its logits:
	// unlike OnToken it leaves the decode free to have the device select
	// the top of the logits (runtime.TopRequest) instead of reading the
	// whole vector, so a caller that only counts or records the tokens
	// should use it.
	OnSampled func(id int)
}

// DefaultMaxNew is the token limit when GenOptions.MaxNew is 0.
const DefaultMaxNew = 64

// StopInterrupted is Result.StopReason when the context was cancelled:
// Generate and Chat then return the Result so far together with an error
// wrapping the context's error.
const StopInterrupted = "interrupted"

// Result describes one generation.
type Result struct {
	Text         string // the text produced (stop string excluded)
	Tokens       []int  // the sampled tokens (an EOS that ended it excluded)
	PromptTokens int    // tokens prefilled by this call
	StopReason   string // "eos", "stop" (a stop string), "length" or StopInterrupted

	Prefill       time.Duration
	Decode        time.Duration
	DecodeTokens  int // tokens run through the model one at a time
	PrefillChunks int

	PrefillCache expertcache.Stats // the expert cache during prefill
	DecodeCache  expertcache.Stats // and during decode
	PeakRSS      int64             // the process's peak resident set so far (0: unknown)
}

// PrefillTokPerSec is the prefill rate.
func (r *Result) PrefillTokPerSec() float64 { return rate(r.PromptTokens, r.Prefill) }

// DecodeTokPerSec is the decode rate (one-token forward passes and
// sampling).
func (r *Result) DecodeTokPerSec() float64 { return rate(r.DecodeTokens, r.Decode) }

// BytesReadPerToken is the expert bytes read per decoded token.
func (r *Result) BytesReadPerToken() float64 {
	if r.DecodeTokens == 0 {
		return 0
	}
	return float64(r.DecodeCache.BytesRead) / float64(r.DecodeTokens)
}

func rate(n int, d time.Duration) float64 {
	if n == 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Feed runs tokens through the model in chunks of the runner's prefill
// size and returns the logits after the last one (a pending sampled token
// is not fed: see Generate). Passes whose tokens route to at least half of
// a layer's experts (counting each routing once) run with the expert
// cache in scan mode (expertcache.Cache.SetScan), unless Options.NoScan.
func (s *Session) Feed(ctx context.Context, tokens []int) ([]float32, int, error) {
	var logits []float32
	chunks := 0
	// A pass whose tokens route to a large share of each layer's experts
	// sweeps the layers cyclically: the cache's scan policy keeps part of
	// the experts for the next pass instead of evicting them all.
	cfg := s.r.Model.Config
	defer s.r.Cache.SetScan(false)
	for i := 0; i < len(tokens); i += s.r.chunk {
		if err := ctx.Err(); err != nil {
			return nil, chunks, err
		}
		end := min(i+s.r.chunk, len(tokens))
		s.r.Cache.SetScan(!s.r.noScan && 2*(end-i)*cfg.TopK >= cfg.Experts)
		var err error
		logits, err = s.r.Model.Forward(s.st, tokens[i:end], &runtime.ForwardOptions{NoLogits: end < len(tokens)})
		chunks++
		if err != nil {
			s.Reset() // the state is inconsistent after a failed pass
			return nil, chunks, err
		}
		s.fed = append(s.fed, tokens[i:end]...)
	}
	return logits, chunks, nil
}

// ErrContextLimit is wrapped by the error of a generation that could run
// past the model's max_position_embeddings; nothing has been run then.
var ErrContextLimit = errors.New("context limit")

// checkContext refuses a generation whose held, prompt and new tokens
// together could exceed the model's max_position_embeddings (no limit when
// the config does not give it).
func (s *Session) checkContext(held, prompt, maxNew int) error {
	limit := s.r.Model.Config.MaxPositions
	if maxNew <= 0 {
		maxNew = DefaultMaxNew
	}
	if limit <= 0 || held+prompt+maxNew <= limit {
		return nil
	}
	return fmt.Errorf("%w: %d tokens already in the conversation + %d prompt tokens + %d new tokens = %d, more than the model's max_position_embeddings %d",
		ErrContextLimit, held, prompt, maxNew, held+prompt+maxNew, limit)
}

// Generate continues the sequence with prompt (after the token sampled
// last, if any) and samples a reply. It refuses (ErrContextLimit), before
// running anything, a generation that could exceed the model's
// max_position_embeddings. When ctx is cancelled it stops between forward
// passes and returns the Result so far (StopReason StopInterrupted) with
// an error wrapping ctx.Err(); an interruption during the prefill empties
// the decode state, one during decode keeps the tokens generated so far in
// it.
func (s *Session) Generate(ctx context.Context, prompt []int, g GenOptions) (*Result, error) {
	held := len(s.fed)
	if s.pending >= 0 {
		held++
	}
	if err := s.checkContext(held, len(prompt), g.MaxNew); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if s.pending >= 0 {
		prompt = append([]int{s.pending}, prompt...)
		s.pending, s.pendEOS = -1, false
	}
	return s.generate(ctx, prompt, g)
}

func (s *Session) generate(ctx context.Context, prompt []int, g GenOptions) (*Result, error) {
	if len(prompt) == 0 {
		return nil, errors.New("generate: empty prompt")
	}
	if g.MaxNew <= 0 {
		g.MaxNew = DefaultMaxNew
	}
	sm, err := sample.New(g.Sample)
	if err != nil {
		return nil, err
	}
	sm.Observe(s.fed...)
	sm.Observe(prompt...)
	stop := sample.NewStopper(s.r.EOS, g.Stop)
	dec := s.r.Tokenizer.NewStreamDecoder(true)
	res := &Result{PromptTokens: len(prompt)}
	cache := s.r.Cache

	cache.ResetStats()
	t0 := time.Now()
	logits, chunks, err := s.Feed(ctx, prompt)
	res.Prefill, res.PrefillChunks = time.Since(t0), chunks
	res.PrefillCache = cache.Stats()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			// Part of the prompt is in the state: drop it all.
			s.resetState()
			res.StopReason = StopInterrupted
			res.Tokens = []int{}
			res.PeakRSS = PeakRSS()
			return res, fmt.Errorf("prefill interrupted after %d of %d tokens: %w", min(chunks*s.r.chunk, len(prompt)), len(prompt), err)
		}
		return nil, err
	}

	cache.ResetStats()
	var text strings.Builder
	emit := func(t string) error {
		if t == "" {
			return nil
		}
		text.WriteString(t)
		if g.OnText != nil {
			return g.OnText(t)
		}
		return nil
	}
	t1 := time.Now()
	var interrupted error
	// Each step's logits go into pinned memory where the backend has it,
	// else into the last slice Forward returned (sampled and seen by
	// OnToken already): prev, which a step whose top the device selected
	// (no logits) leaves as it was.
	into := s.r.logits.take()
	defer s.r.logits.give(into)
	prev := logits
	// A step's logits are nil when the device selected their top instead
	// (top.C): the first token comes from the prefill's logits.
	top := s.topRequest(sm, g)
	fwd := &runtime.ForwardOptions{Speculate: s.r.spec, Top: top}
	for {
		var tok int
		s.r.Model.Mark("the runner draws")
		if logits == nil && top != nil {
			// The device selected the top of the logits (fwd.Top), and
			// Accept checked that the sampler draws from it.
			tok, err = sampleTop(sm, &top.C)
		} else {
			tok, err = sm.Sample(logits)
		}
		if err != nil {
			return nil, err
		}
		s.r.Model.Mark("the runner's draw returns")
		if g.OnToken != nil {
			g.OnToken(tok, logits)
		}
		if g.OnSampled != nil {
			g.OnSampled(tok)
		}
		if stop.IsEOS(tok) {
			s.pending, s.pendEOS = tok, true
			res.StopReason = "eos"
			break
		}
		res.Tokens = append(res.Tokens, tok)
		out, stopped := stop.Push(dec.Add(tok))
		if err := emit(out); err != nil {
			s.pending = tok
			return nil, err
		}
		if stopped {
			s.pending = tok
			res.StopReason = "stop"
			break
		}
		if len(res.Tokens) >= g.MaxNew {
			s.pending = tok
			res.StopReason = "length"
			break
		}
		if err := ctx.Err(); err != nil {
			s.pending = tok
			res.StopReason = StopInterrupted
			interrupted = fmt.Errorf("decode interrupted after %d tokens: %w", len(res.Tokens), err)
			break
		}
		fwd.Into = into
		if fwd.Into == nil {
			fwd.Into = prev
		}
		s.r.Model.Mark("the runner calls Forward")
		logits, err = s.r.Model.Forward(s.st, []int{tok}, fwd)
		if err != nil {
			s.Reset()
			return nil, err
		}
		if logits != nil {
			prev = logits
		}
		s.fed = append(s.fed, tok)
		res.DecodeTokens++
	}
	if res.StopReason != "stop" {
		out, stopped := stop.Push(dec.Flush())
		if !stopped {
			out += stop.Flush()
		}
		if err := emit(out); err != nil {
			return nil, err
		}
	}
	res.Decode = time.Since(t1)
	res.DecodeCache = cache.Stats()
	res.Text = text.String()
	res.PeakRSS = PeakRSS()
	return res, interrupted
}

// topRequest returns the request for the top of each decode step's logits
// (runtime.TopRequest: a device that selects it brings back a few
// candidates instead of the whole vector) when sm draws its tokens from
// such a top (Sampler.TopK) and nobody needs the whole logits (OnToken
// sees them, e.g. for the server's logprobs); else nil. One request serves
// the whole generation: Forward refills its C each step.
func (s *Session) topRequest(sm *sample.Sampler, g GenOptions) *runtime.TopRequest {
	if g.OnToken != nil {
		return nil
	}
	k := sm.TopK(s.r.Model.Config.Vocab)
	if k <= 0 {
		return nil
	}
	return &runtime.TopRequest{K: k, Accept: func(c *nn.TopLogits) bool {
		return sm.AcceptsTop(c.IDs, c.Logits, c.N)
	}}
}

// sampleTop draws the next token from a selected top. Accept let Forward
// give up the logits only when sm.AcceptsTop, which is SampleTop's own
// check on the same candidates, so SampleTop always draws; were it to
// decline, the whole logits are gone and no token can be drawn as Sample
// would: an error, never a different token.
func sampleTop(sm *sample.Sampler, c *nn.TopLogits) (int, error) {
	tok, ok, err := sm.SampleTop(c.IDs, c.Logits, c.N)
	if err == nil && !ok {
		err = fmt.Errorf("generate: the sampler declined the top %d of the logits it accepted (%d candidates)", c.K, len(c.IDs))
	}
	return tok, err
}

// ChatOptions control one conversation turn.
type ChatOptions struct {
	GenOptions
	// System is the system prompt, used on the first turn only.
	System string
	// EnableThinking is passed to the template as enable_thinking when not
	// nil (Qwen3: false asks for no reasoning block).
	EnableThinking *bool
}

// sentinel stands in for the last reply when the template renders the
// next turn, to find where that turn's new text begins.
const sentinel = "\u27e6qpack-turn-boundary-5f1c\u27e7"

// ChatPrompt returns the tokens the next turn with user's message would
// prefill and whether they continue the state (false: the state must be
// reset and the whole conversation prefilled). It changes nothing.
func (s *Session) ChatPrompt(user string, c ChatOptions) (tokens []int, continues bool) {
	opts := chattmpl.Options{AddGenerationPrompt: true, EnableThinking: c.EnableThinking}
	tok := s.r.Tokenizer
	if len(s.msgs) > 0 && s.msgs[len(s.msgs)-1].Role == "assistant" && len(s.fed) > 0 {
		// Render the conversation with the last reply replaced by the
		// sentinel: what follows it is the end of that reply and the new
		// turn. The reply itself is in the state as generated.
		msgs := slices.Clone(s.msgs)
		msgs[len(msgs)-1] = chattmpl.Message{Role: "assistant", Content: sentinel}
		msgs = append(msgs, chattmpl.Message{Role: "user", Content: user})
		text, err := chattmpl.Render(s.r.Template, msgs, opts)
		if err != nil && s.r.Template != nil {
			s.r.log.Warn("chat template failed; using ChatML", "template", s.r.Template.Name(), "err", err)
		}
		if strings.Count(text, sentinel) == 1 {
			delta := text[strings.Index(text, sentinel)+len(sentinel):]
			ids := tok.Encode(delta)
			if s.pending >= 0 && !s.pendEOS {
				ids = append([]int{s.pending}, ids...)
			}
			return ids, true
		}
		s.r.log.Warn("the chat template does not render the last reply verbatim: prefilling the whole conversation again")
	}
	msgs := slices.Clone(s.msgs)
	if len(msgs) == 0 && c.System != "" {
		msgs = append(msgs, chattmpl.Message{Role: "system", Content: c.System})
	}
	msgs = append(msgs, chattmpl.Message{Role: "user", Content: user})
	text, err := chattmpl.Render(s.r.Template, msgs, opts)
	if err != nil && s.r.Template != nil {
		s.r.log.Warn("chat template failed; using ChatML", "template", s.r.Template.Name(), "err", err)
	}
	return tok.Encode(text), len(s.fed) == 0 && s.pending < 0
}

// Chat adds a user turn to the conversation and generates the reply. It
// refuses (ErrContextLimit), leaving the session as it was, a turn that
// could take the conversation past the model's max_position_embeddings.
// Cancelled, it returns the Result so far with the error (see Generate): a
// reply interrupted during decode stays in the conversation as far as it
// got, so the next turn follows it.
func (s *Session) Chat(ctx context.Context, user string, c ChatOptions) (*Result, error) {
	ids, continues := s.ChatPrompt(user, c)
	held := 0
	if continues {
		held = len(s.fed)
	}
	if err := s.checkContext(held, len(ids), c.MaxNew); err != nil {
		return nil, fmt.Errorf("chat turn %d: %w", countUser(s.msgs)+1, err)
	}
	if !continues {
		msgs := s.msgs
		s.Reset()
		s.msgs = msgs
	}
	if len(s.msgs) == 0 && c.System != "" {
		s.msgs = append(s.msgs, chattmpl.Message{Role: "system", Content: c.System})
	}
	s.pending, s.pendEOS = -1, false
	res, err := s.generate(ctx, ids, c.GenOptions)
	if err != nil {
		err = fmt.Errorf("chat turn %d: %w", countUser(s.msgs)+1, err)
		if res == nil {
			return nil, err
		}
		// Interrupted: a reply cut short during decode stays in the
		// conversation as far as it got; one cut during the prefill left
		// an empty state and no turn.
		if len(s.fed) > 0 || s.pending >= 0 {
			s.msgs = append(s.msgs, chattmpl.Message{Role: "user", Content: user},
				chattmpl.Message{Role: "assistant", Content: res.Text})
		}
		return res, err
	}
	s.msgs = append(s.msgs, chattmpl.Message{Role: "user", Content: user},
		chattmpl.Message{Role: "assistant", Content: res.Text})
	return res, nil
}

func countUser(msgs []chattmpl.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == "user" {
			n++
		}
	}
	return n
}
