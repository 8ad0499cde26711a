package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/synthetic"
)

// fixture is one synthetic tiny model written both as an MLX checkpoint
// directory (sharded) and as a .qpack container, each with the tokenizer,
// template and generation config of the committed tiny model.
type fixture struct {
	gen       *synthetic.Model
	raw, pack string
}

func newFixture(t testing.TB, typ string, bits, group int, tiny string) *fixture {
	t.Helper()
	d := synthetic.Tiny(typ)
	d.Bits, d.Group = bits, group
	g, err := synthetic.Generate(d, 7)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	f := &fixture{gen: g, raw: filepath.Join(root, "raw"), pack: filepath.Join(root, "model.qpack")}
	if err := g.WriteCheckpoint(f.raw, 3); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteContainer(f.pack); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join("..", "..", "testdata", "tiny", tiny)
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{f.raw, f.pack} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

func open(t testing.TB, dir string, opt Options) *Runner {
	t.Helper()
	r, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// run records every sampled token and the logits it came from.
type run struct {
	tokens []int
	logits [][]float32
	res    *Result
}

func generate(t testing.TB, s *Session, prompt []int, g GenOptions) run {
	t.Helper()
	var out run
	g.OnToken = func(id int, l []float32) {
		out.tokens = append(out.tokens, id)
		out.logits = append(out.logits, slices.Clone(l))
	}
	res, err := s.Generate(context.Background(), prompt, g)
	if err != nil {
		t.Fatal(err)
	}
	out.res = res
	return out
}

var prompt = []int{12, 200, 31, 7, 99, 340, 5, 5, 61, 123, 250, 17, 88, 3, 290, 45, 11, 300, 72, 9, 150, 2}

// reference runs the same chunking and greedy decoding over the in-memory
// synthetic model (experts viewed straight from the generated tensors),
// independently of the runner and its cache.
func reference(t testing.TB, g *synthetic.Model, prompt []int, chunk, n int) run {
	t.Helper()
	m, err := g.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	st := m.NewState()
	var logits []float32
	for i := 0; i < len(prompt); i += chunk {
		end := min(i+chunk, len(prompt))
		if logits, err = m.Forward(st, prompt[i:end], nil); err != nil {
			t.Fatal(err)
		}
	}
	var out run
	for range n {
		best := 0
		for j, v := range logits {
			if v > logits[best] {
				best = j
			}
		}
		out.tokens = append(out.tokens, best)
		out.logits = append(out.logits, slices.Clone(logits))
		if logits, err = m.Forward(st, []int{best}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// Whatever the cache size, and whether experts come from a .qpack or the
// raw checkpoint, read buffered or direct, with or without speculative
// reads, the tokens and logits are the same, bit for bit, and equal to the
// in-memory model's.
func TestOutputIndependentOfCacheAndSource(t *testing.T) {
	for _, v := range []struct {
		typ         string
		bits, group int
		tiny        string
	}{
		{runtime.TypeQwen3Next, 4, 64, "qwen3_next-q4g64"},
		{runtime.TypeQwen35MoE, 4, 32, "qwen3_5_moe-q4g32"},
	} {
		t.Run(v.tiny, func(t *testing.T) {
			f := newFixture(t, v.typ, v.bits, v.group, v.tiny)
			const chunk, n = 8, 12
			want := reference(t, f.gen, prompt, chunk, n)
			for _, c := range []struct {
				name   string
				dir    string
				budget int64
				io     expertcache.IOMode
				spec   int
			}{
				{"raw-tiny", f.raw, 1, expertcache.Buffered, -1},
				{"raw-unlimited", f.raw, 1 << 30, expertcache.Buffered, -1},
				{"qpack-tiny", f.pack, 1, expertcache.Buffered, -1},
				{"qpack-3slots", f.pack, 3 * 16384, expertcache.Direct, -1},
				{"qpack-unlimited", f.pack, 1 << 30, expertcache.Direct, -1},
				{"qpack-tiny-speculate", f.pack, 1, expertcache.Buffered, DefaultSpeculate},
				{"qpack-3slots-speculate", f.pack, 3 * 16384, expertcache.Direct, DefaultSpeculate},
				{"raw-6slots-speculate-all", f.raw, 6 * 8192, expertcache.Buffered, 100},
				{"qpack-unlimited-speculate", f.pack, 1 << 30, expertcache.Direct, 3},
			} {
				r := open(t, c.dir, Options{ExpertCache: c.budget, IO: c.io, PrefillChunk: chunk, Speculate: c.spec})
				got := generate(t, r.NewSession(), prompt, GenOptions{MaxNew: n})
				if !slices.Equal(got.tokens, want.tokens) {
					t.Fatalf("%s: tokens %v, want %v", c.name, got.tokens, want.tokens)
				}
				for i := range want.logits {
					if !sameBits(got.logits[i], want.logits[i]) {
						t.Fatalf("%s: logits of step %d differ from the in-memory model's", c.name, i)
					}
				}
				st := r.Cache.Stats()
				if st.PeakAllocated > st.Budget {
					t.Fatalf("%s: peak %d over budget %d", c.name, st.PeakAllocated, st.Budget)
				}
				pre, dec := got.res.PrefillCache, got.res.DecodeCache
				if pre.SpecNamed != 0 {
					t.Errorf("%s: prefill speculated: %+v", c.name, pre)
				}
				if c.spec < 0 {
					if dec.SpecNamed != 0 {
						t.Errorf("%s: speculation off, yet %+v", c.name, dec)
					}
				} else if dec.SpecNamed == 0 || dec.SpecCorrect == 0 || dec.SpecUseful > dec.SpecReads || dec.SpecCorrect > dec.SpecTargets {
					t.Errorf("%s: decode speculation stats %+v", c.name, dec)
				}
				switch {
				case c.budget == 1 && c.spec < 0: // one slot: every request misses
					if dec.Hits != 0 || dec.Evicted == 0 || dec.Misses != dec.Requests {
						t.Errorf("%s: decode stats %+v, want every request to miss", c.name, dec)
					}
				case c.budget == 1<<30: // everything fits: nothing is ever evicted
					if pre.Evicted+dec.Evicted != 0 || dec.Hits == 0 {
						t.Errorf("%s: stats %+v %+v, want no eviction and decode hits", c.name, pre, dec)
					}
				}
			}
		})
	}
}

// Prefill in chunks gives the logits of token-by-token prefill (to float
// round-off) while requesting each expert once per chunk and layer, so it
// reads far less.
func TestChunkedPrefillReadsLess(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen35MoE, 4, 32, "qwen3_5_moe-q4g32")
	long := slices.Concat(prompt, prompt) // 44 tokens
	c := f.gen.Config
	results := map[int]*Result{}
	var last [][]float32
	for _, chunk := range []int{1, 16} {
		r := open(t, f.pack, Options{ExpertCache: 1, PrefillChunk: chunk})
		got := generate(t, r.NewSession(), long, GenOptions{MaxNew: 1})
		results[chunk] = got.res
		last = append(last, got.logits[0])
	}
	var d float64
	for i := range last[0] {
		d = max(d, math.Abs(float64(last[0][i]-last[1][i])))
	}
	if d > 1e-4 {
		t.Errorf("chunked prefill logits differ from token-by-token by %g", d)
	}
	tok, ch := results[1].PrefillCache, results[16].PrefillCache
	// Token by token: every token asks for its top-k experts in every layer.
	if want := int64(len(long) * c.Layers * c.TopK); tok.Requests != want {
		t.Errorf("token-by-token prefill made %d requests, want %d", tok.Requests, want)
	}
	// In chunks: at most each expert once per chunk and layer.
	chunks := (len(long) + 15) / 16
	if results[16].PrefillChunks != chunks || ch.Requests > int64(chunks*c.Layers*c.Experts) {
		t.Errorf("chunked prefill: %d chunks, %d requests; want %d chunks, at most %d requests",
			results[16].PrefillChunks, ch.Requests, chunks, chunks*c.Layers*c.Experts)
	}
	if ch.Loads*2 > tok.Loads || ch.BytesRead*2 > tok.BytesRead {
		t.Errorf("chunked prefill read %d experts (%d B), token by token %d (%d B): want less than half",
			ch.Loads, ch.BytesRead, tok.Loads, tok.BytesRead)
	}
	t.Logf("prefill of %d tokens with a one-slot cache: %d expert reads token by token, %d in chunks of 16",
		len(long), tok.Loads, ch.Loads)
}

// In prefill the expert cache's scan policy keeps some experts from one
// chunk's sweep of the layers to the next (recency would evict each
// layer's experts before the next chunk wants them): fewer reads, the same
// logits.
func TestPrefillScanReadsLess(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen35MoE, 4, 32, "qwen3_5_moe-q4g32")
	long := slices.Concat(prompt, prompt, prompt, prompt) // 88 tokens
	res := map[bool]run{}
	for _, noScan := range []bool{true, false} {
		r := open(t, f.pack, Options{ExpertCache: 20 * 16384, PrefillChunk: 16, NoScan: noScan})
		res[noScan] = generate(t, r.NewSession(), long, GenOptions{MaxNew: 1})
	}
	if !sameBits(res[true].logits[0], res[false].logits[0]) {
		t.Fatal("the cache policy changed the logits")
	}
	on, off := res[false].res.PrefillCache, res[true].res.PrefillCache
	t.Logf("prefill of %d tokens, 20 of 64 experts cached: %d reads (hit rate %.1f%%) in scan mode, %d (%.1f%%) by recency",
		len(long), on.Loads, 100*on.HitRate(), off.Loads, 100*off.HitRate())
	if on.Requests != off.Requests || on.Loads >= off.Loads || on.Hits <= off.Hits {
		t.Errorf("scan mode: %d requests, %d reads, %d hits; recency: %d, %d, %d: want fewer reads in scan mode",
			on.Requests, on.Loads, on.Hits, off.Requests, off.Loads, off.Hits)
	}
}

// A second chat turn prefills only its own tokens, and what it generates
// equals a fresh run over the whole conversation's tokens.
func TestChatReusesState(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen3Next, 4, 64, "qwen3_next-q4g64")
	r := open(t, f.pack, Options{ExpertCache: 1 << 30, PrefillChunk: 16})
	s := r.NewSession()
	ctx := context.Background()
	no := false
	res1, err := s.Chat(ctx, "hello there", ChatOptions{GenOptions: GenOptions{MaxNew: 6}, System: "be brief", EnableThinking: &no})
	if err != nil {
		t.Fatal(err)
	}
	// The template of the tiny model (tokenizer_config.json) renders this.
	want1 := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if got := r.Tokenizer.Decode(s.Tokens()[:res1.PromptTokens], false); got != want1 {
		t.Fatalf("turn 1 prompt %q, want %q", got, want1)
	}
	before := len(s.Tokens())
	var turn2 run
	gen := GenOptions{MaxNew: 8, OnToken: func(id int, l []float32) {
		turn2.tokens = append(turn2.tokens, id)
		turn2.logits = append(turn2.logits, slices.Clone(l))
	}}
	res2, err := s.Chat(ctx, "and again", ChatOptions{GenOptions: gen, EnableThinking: &no})
	if err != nil {
		t.Fatal(err)
	}
	all := s.Tokens()
	inState := all[:before+res2.PromptTokens]
	delta := r.Tokenizer.Decode(inState[before:], false)
	// The new turn: the last reply's own last token if it was cut by the
	// token limit, then the end of that reply and the new user turn.
	wantDelta := "<|im_end|>\n<|im_start|>user\nand again<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	if res1.StopReason == "length" {
		last := res1.Tokens[len(res1.Tokens)-1]
		if inState[before] != last {
			t.Fatalf("turn 2 does not start with the pending token %d of turn 1", last)
		}
		delta = r.Tokenizer.Decode(inState[before+1:], false)
	}
	if delta != wantDelta {
		t.Fatalf("turn 2 prefilled %q, want %q", delta, wantDelta)
	}
	if res2.PromptTokens >= len(inState)/2 {
		t.Errorf("turn 2 prefilled %d of %d tokens", res2.PromptTokens, len(inState))
	}

	// A fresh session over the same tokens (prefilled in one go).
	fresh := open(t, f.raw, Options{ExpertCache: 1 << 30, PrefillChunk: 64})
	got := generate(t, fresh.NewSession(), inState, GenOptions{MaxNew: 8})
	if !slices.Equal(got.tokens, turn2.tokens) {
		t.Fatalf("fresh run: %v, reused state: %v", got.tokens, turn2.tokens)
	}
	for i := range got.logits {
		var d float64
		for j := range got.logits[i] {
			d = max(d, math.Abs(float64(got.logits[i][j]-turn2.logits[i][j])))
		}
		if d > 1e-4 {
			t.Fatalf("step %d: logits differ by %g", i, d)
		}
	}
	if n := len(s.Messages()); n != 5 {
		t.Errorf("%d messages, want system, 2 user and 2 assistant", n)
	}
}

func TestStopAtEOSAndStopStrings(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen35MoE, 4, 32, "qwen3_5_moe-q4g32")
	r := open(t, f.pack, Options{ExpertCache: 1 << 30})
	r.EOS = nil
	var streamed strings.Builder
	base := generate(t, r.NewSession(), prompt, GenOptions{MaxNew: 16, OnText: func(s string) error {
		streamed.WriteString(s)
		return nil
	}})
	if base.res.StopReason != "length" || len(base.res.Tokens) != 16 {
		t.Fatalf("stop %q after %d tokens, want length after 16", base.res.StopReason, len(base.res.Tokens))
	}
	if streamed.String() != base.res.Text || base.res.Text != r.Tokenizer.Decode(base.res.Tokens, true) {
		t.Fatalf("streamed %q, result %q, decoded %q", streamed.String(), base.res.Text, r.Tokenizer.Decode(base.res.Tokens, true))
	}
	if base.res.DecodeTokens != 15 || base.res.PromptTokens != len(prompt) {
		t.Errorf("decode tokens %d prompt %d", base.res.DecodeTokens, base.res.PromptTokens)
	}

	// EOS: make the 5th greedy token an EOS id.
	r.EOS = []int{base.tokens[4]}
	first := slices.Index(base.tokens, base.tokens[4])
	eos := generate(t, r.NewSession(), prompt, GenOptions{MaxNew: 16})
	if eos.res.StopReason != "eos" || !slices.Equal(eos.res.Tokens, base.tokens[:first]) {
		t.Fatalf("EOS %d: stop %q tokens %v, want eos after %v", base.tokens[4], eos.res.StopReason, eos.res.Tokens, base.tokens[:first])
	}
	r.EOS = nil

	// A stop string from the middle of the text: output ends right before
	// it. Generate until the text is long enough to cut (it always is,
	// well before the limit, with this model and prompt).
	long, n := base, 16
	for len([]rune(long.res.Text)) < 8 && n < 512 {
		n *= 2
		long = generate(t, r.NewSession(), prompt, GenOptions{MaxNew: n})
	}
	text := []rune(long.res.Text)
	if len(text) < 8 {
		t.Fatalf("greedy text of %d tokens %q too short to take a stop string from", n, long.res.Text)
	}
	stopStr := string(text[len(text)/2 : len(text)/2+3])
	cut := strings.Index(long.res.Text, stopStr)
	st := generate(t, r.NewSession(), prompt, GenOptions{MaxNew: n, Stop: []string{stopStr}})
	if st.res.StopReason != "stop" || st.res.Text != long.res.Text[:cut] {
		t.Fatalf("stop %q: %q (%s), want %q", stopStr, st.res.Text, st.res.StopReason, long.res.Text[:cut])
	}
}

func TestGenerateFunction(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen3Next, 4, 64, "qwen3_next-q4g64")
	var out strings.Builder
	res, err := Generate(context.Background(), f.raw, GenerateOptions{
		Options:    Options{ExpertCache: 64 << 10},
		GenOptions: GenOptions{MaxNew: 5, OnText: func(s string) error { out.WriteString(s); return nil }},
		Prompt:     "hi", Chat: true, NoThink: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) == 0 || out.String() != res.Text || res.PeakRSS <= 0 || res.PrefillTokPerSec() <= 0 {
		t.Fatalf("result %+v, streamed %q", res, out.String())
	}
	none := filepath.Join(t.TempDir(), "none")
	if _, err := Generate(context.Background(), none, GenerateOptions{Prompt: "x"}); !errors.Is(err, ErrNoModel) ||
		err.Error() != "model directory "+none+" does not exist" {
		t.Fatalf("a missing model: %v", err)
	}

}

// A generation that could run past max_position_embeddings is refused
// before anything runs, and the session is left as it was.
func TestContextLimit(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen35MoE, 4, 32, "qwen3_5_moe-q4g32")
	r := open(t, f.pack, Options{ExpertCache: 1 << 30})
	r.Model.Config.MaxPositions = len(prompt) + 10
	ctx := context.Background()
	s := r.NewSession()
	_, err := s.Generate(ctx, prompt, GenOptions{MaxNew: 11})
	want := fmt.Sprintf("0 tokens already in the conversation + %d prompt tokens + 11 new tokens = %d, more than the model's max_position_embeddings %d",
		len(prompt), len(prompt)+11, len(prompt)+10)
	if !errors.Is(err, ErrContextLimit) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want ErrContextLimit saying %q", err, want)
	}
	if len(s.Tokens()) != 0 {
		t.Fatalf("a refused generation fed %d tokens", len(s.Tokens()))
	}
	// The default token limit counts too.
	r.Model.Config.MaxPositions = len(prompt) + DefaultMaxNew - 1
	if _, err := s.Generate(ctx, prompt, GenOptions{}); !errors.Is(err, ErrContextLimit) {
		t.Fatalf("MaxNew 0 (%d) past the limit: err = %v", DefaultMaxNew, err)
	}
	// Exactly at the limit it runs.
	r.Model.Config.MaxPositions = len(prompt) + 10
	res, err := s.Generate(ctx, prompt, GenOptions{MaxNew: 10})
	if err != nil || len(res.Tokens) != 10 {
		t.Fatalf("at the limit: %v %v", res, err)
	}
	// Continuing counts what the state holds (and the pending token).
	held := len(s.Tokens()) + 1
	if _, err := s.Generate(ctx, []int{5}, GenOptions{MaxNew: 1}); !errors.Is(err, ErrContextLimit) ||
		!strings.Contains(err.Error(), fmt.Sprintf("%d tokens already in the conversation", held)) {
		t.Fatalf("continuing past the limit: err = %v", err)
	}
	if len(s.Tokens()) != held-1 {
		t.Fatalf("a refused continuation changed the state: %d tokens, want %d", len(s.Tokens()), held-1)
	}

	// Chat: a second turn past the limit is refused, the first kept.
	r.Model.Config.MaxPositions = 0
	c := r.NewSession()
	no := false
	if _, err := c.Chat(ctx, "hello", ChatOptions{GenOptions: GenOptions{MaxNew: 4}, EnableThinking: &no}); err != nil {
		t.Fatal(err)
	}
	state, msgs := c.Tokens(), c.Messages()
	r.Model.Config.MaxPositions = len(state) + 20
	_, err = c.Chat(ctx, "and a second turn", ChatOptions{GenOptions: GenOptions{MaxNew: 16}, EnableThinking: &no})
	if !errors.Is(err, ErrContextLimit) || !strings.Contains(err.Error(), "chat turn 2") ||
		!strings.Contains(err.Error(), fmt.Sprintf("max_position_embeddings %d", len(state)+20)) {
		t.Fatalf("chat past the limit: err = %v", err)
	}
	if !slices.Equal(c.Tokens(), state) || len(c.Messages()) != len(msgs) {
		t.Fatal("a refused chat turn changed the session")
	}
	// The one-call form on the committed tiny model (max_position_embeddings
	// 4096 in its config.json) refuses too.
	_, err = Generate(ctx, "../../testdata/tiny/qwen3_5_moe-q4g32", GenerateOptions{GenOptions: GenOptions{MaxNew: 4096}, Prompt: "hi"})
	if !errors.Is(err, ErrContextLimit) || !strings.Contains(err.Error(), "max_position_embeddings 4096") {
		t.Fatalf("Generate past the tiny model's 4096 positions: err = %v", err)
	}
}

// Open names what is wrong with the model path before reading anything,
// and a damaged container's error names the container once, without the
// qpack package's own prefix.
func TestOpenErrors(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "f.txt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(root, "missing"), "model directory " + filepath.Join(root, "missing") + " does not exist"},
		{root, root + " is neither a .qpack container (no manifest.json) nor an MLX checkpoint (no config.json)"},
		{file, file + " is a file, not a .qpack container or an MLX checkpoint directory"},
	} {
		_, err := Open(c.path, Options{})
		if !errors.Is(err, ErrNoModel) || err.Error() != c.want {
			t.Errorf("Open(%s): %v, want %q", c.path, err, c.want)
		}
	}

	f := newFixture(t, runtime.TypeQwen3Next, 4, 64, "qwen3_next-q4g64")
	if err := os.Remove(filepath.Join(f.pack, "packed_experts", "layer_01.bin")); err != nil {
		t.Fatal(err)
	}
	_, err := Open(f.pack, Options{})
	want := f.pack + ": packed_experts/layer_01.bin: listed in manifest.json but missing"
	if err == nil || err.Error() != want || errors.Is(err, ErrNoModel) {
		t.Fatalf("damaged container: %v, want %q", err, want)
	}
	// A checkpoint's errors name their files already: no second path.
	if err := os.WriteFile(filepath.Join(f.raw, "config.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(f.raw, Options{})
	if err == nil || strings.Count(err.Error(), f.raw) != 1 {
		t.Fatalf("bad checkpoint config: %v, want one naming %s once", err, f.raw)
	}
}

// Direct I/O on a checkpoint directory (experts at unaligned offsets in
// the shards) falls back to buffered reads with a warning that says why;
// on a container it warns only where the file system refuses direct reads.
func TestDirectIOFallbackWarns(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen3Next, 4, 64, "qwen3_next-q4g64")
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	open(t, f.raw, Options{IO: expertcache.Direct, Logger: log})
	if s := logs.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, "page cache") ||
		!strings.Contains(s, "not multiples of 4096 bytes") || !strings.Contains(s, f.raw) {
		t.Fatalf("checkpoint with direct I/O logged:\n%s", s)
	}
	logs.Reset()
	open(t, f.raw, Options{IO: expertcache.Buffered, Logger: log})
	if strings.Contains(logs.String(), "page cache") {
		t.Fatalf("buffered I/O warned:\n%s", logs.String())
	}
	logs.Reset()
	open(t, f.pack, Options{IO: expertcache.Direct, Logger: log})
	layer := filepath.Join(f.pack, "packed_experts", "layer_00.bin")
	warned := strings.Contains(logs.String(), "page cache")
	if avail := expertcache.DirectAvailable(layer); warned == avail {
		t.Fatalf("container, direct reads available %v, warned %v:\n%s", avail, warned, logs.String())
	}
}

// A first chat turn that ends at an EOS id: the EOS is not kept in the
// state; the template's end-of-turn text is, and the second turn equals a
// fresh run over the whole conversation's tokens built here from the
// template's literal text.
func TestChatAfterEOS(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen3Next, 4, 64, "qwen3_next-q4g64")
	r := open(t, f.pack, Options{ExpertCache: 1 << 30, PrefillChunk: 16})
	ctx := context.Background()
	no := false
	opts := func(g GenOptions) ChatOptions {
		return ChatOptions{GenOptions: g, System: "be brief", EnableThinking: &no}
	}

	// The greedy reply without EOS ids; its 5th token becomes the EOS id.
	r.EOS = nil
	probe, err := r.NewSession().Chat(ctx, "hello there", opts(GenOptions{MaxNew: 8}))
	if err != nil {
		t.Fatal(err)
	}
	eos := probe.Tokens[4]
	first := slices.Index(probe.Tokens, eos)
	r.EOS = []int{eos}

	s := r.NewSession()
	res1, err := s.Chat(ctx, "hello there", opts(GenOptions{MaxNew: 8}))
	if err != nil {
		t.Fatal(err)
	}
	if res1.StopReason != "eos" || !slices.Equal(res1.Tokens, probe.Tokens[:first]) {
		t.Fatalf("turn 1: stop %q tokens %v, want eos after %v", res1.StopReason, res1.Tokens, probe.Tokens[:first])
	}
	prompt1 := s.Tokens()[:res1.PromptTokens]

	var turn2 run
	gen := GenOptions{MaxNew: 8, OnToken: func(id int, l []float32) {
		turn2.tokens = append(turn2.tokens, id)
		turn2.logits = append(turn2.logits, slices.Clone(l))
	}}
	res2, err := s.Chat(ctx, "and again", opts(gen))
	if err != nil {
		t.Fatal(err)
	}
	// The whole conversation: turn 1's prompt, the reply as sampled (the
	// EOS id not in it), then the template's end of turn and the new turn.
	endOfTurn := "<|im_end|>\n<|im_start|>user\nand again<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	want := slices.Concat(prompt1, res1.Tokens, r.Tokenizer.Encode(endOfTurn))
	held := len(prompt1) + len(res1.Tokens) + res2.PromptTokens
	if got := s.Tokens(); len(got) < held || !slices.Equal(got[:held], want) {
		t.Fatalf("state after turn 2's prefill:\n%q\nwant\n%q", r.Tokenizer.Decode(got[:min(held, len(got))], false), r.Tokenizer.Decode(want, false))
	}
	if slices.Contains(s.Tokens()[len(prompt1):held], eos) && !slices.Contains(r.Tokenizer.Encode(endOfTurn), eos) {
		t.Fatalf("the EOS id %d that ended turn 1 is in the state", eos)
	}

	fresh := open(t, f.raw, Options{ExpertCache: 1 << 30, PrefillChunk: 64})
	fresh.EOS = r.EOS
	got := generate(t, fresh.NewSession(), want, GenOptions{MaxNew: 8})
	if !slices.Equal(got.tokens, turn2.tokens) {
		t.Fatalf("fresh run over the conversation: %v, turn 2: %v", got.tokens, turn2.tokens)
	}
	// Prefilled in other chunks, the sums round differently (seen: up to
	// 3.4e-5 of the largest logit): compare relative to it.
	for i := range got.logits {
		var d, scale float64
		for j := range got.logits[i] {
			d = max(d, math.Abs(float64(got.logits[i][j]-turn2.logits[i][j])))
			scale = max(scale, math.Abs(float64(got.logits[i][j])))
		}
		if d > 1e-4*max(scale, 1) {
			t.Errorf("step %d: logits differ by %g (largest logit %g)", i, d, scale)
		}
	}
}

// A qwen3_5_moe model directory without generation_config.json (a copy of
// the committed tiny model) gets its EOS id from config.json's
// text_config.
func TestEOSFromTextConfig(t *testing.T) {
	src := "../../testdata/tiny/qwen3_5_moe-q4g32"
	dir := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "generation_config.json" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := open(t, dir, Options{ExpertCache: 1 << 30})
	// 356 is text_config.eos_token_id in the tiny model's config.json.
	if !slices.Equal(r.EOS, []int{356}) {
		t.Fatalf("EOS ids %v, want [356] from text_config", r.EOS)
	}
}

// A cancelled context stops decode between tokens: the Result so far
// comes with an error wrapping context.Canceled, the tokens are those an
// uninterrupted run starts with, and the interrupted reply stays in the
// conversation, whose next turn continues from it as a fresh prefill of the
// same tokens would. Cancelled during the prefill: no tokens, an empty
// state, no turn recorded.
func TestInterrupt(t *testing.T) {
	f := newFixture(t, runtime.TypeQwen3Next, 4, 64, "qwen3_next-q4g64")
	r := open(t, f.pack, Options{ExpertCache: 1 << 30, PrefillChunk: 4})
	full := generate(t, r.NewSession(), prompt, GenOptions{MaxNew: 10})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	s := r.NewSession()
	res, err := s.Generate(ctx, prompt, GenOptions{MaxNew: 10, OnToken: func(int, []float32) {
		if n++; n == 3 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || res == nil || res.StopReason != StopInterrupted {
		t.Fatalf("decode interrupted: %+v, %v", res, err)
	}
	if !slices.Equal(res.Tokens, full.tokens[:3]) || res.DecodeTokens != 2 || res.PromptTokens != len(prompt) {
		t.Fatalf("interrupted run: tokens %v (%d passes), the full run starts %v", res.Tokens, res.DecodeTokens, full.tokens[:3])
	}
	if !strings.Contains(err.Error(), "decode interrupted after 3 tokens") {
		t.Errorf("error %q does not say where it stopped", err)
	}

	// During the prefill (chunks of 4): nothing generated, the state empty.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	s2 := r.NewSession()
	res, err = s2.Generate(ctx2, prompt, GenOptions{MaxNew: 10})
	if !errors.Is(err, context.Canceled) || res == nil || res.StopReason != StopInterrupted || len(res.Tokens) != 0 || len(s2.Tokens()) != 0 {
		t.Fatalf("prefill interrupted: %+v, %v, %d tokens in the state", res, err, len(s2.Tokens()))
	}

	// Chat: the interrupted reply stays, and the next turn follows it.
	no := false
	c := r.NewSession()
	ctx3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	n = 0
	res, err = c.Chat(ctx3, "hello there", ChatOptions{GenOptions: GenOptions{MaxNew: 10, OnToken: func(int, []float32) {
		if n++; n == 2 {
			cancel3()
		}
	}}, EnableThinking: &no})
	if !errors.Is(err, context.Canceled) || res == nil || len(res.Tokens) != 2 {
		t.Fatalf("chat interrupted: %+v, %v", res, err)
	}
	if m := c.Messages(); len(m) != 2 || m[1].Role != "assistant" || m[1].Content != res.Text {
		t.Fatalf("messages after the interrupted turn: %+v", m)
	}
	res2, err := c.Chat(context.Background(), "go on", ChatOptions{GenOptions: GenOptions{MaxNew: 4}, EnableThinking: &no})
	if err != nil {
		t.Fatal(err)
	}
	state := c.Tokens()
	wantDelta := "<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
	start := len(state) - res2.DecodeTokens - res2.PromptTokens
	if got := r.Tokenizer.Decode(state[start+1:start+res2.PromptTokens], false); got != wantDelta || state[start] != res.Tokens[1] {
		t.Fatalf("turn after the interrupted one prefilled %q (after token %d), want the pending token %d then %q", got, state[start], res.Tokens[1], wantDelta)
	}
	fresh := generate(t, r.NewSession(), state[:start+res2.PromptTokens], GenOptions{MaxNew: 4})
	if !slices.Equal(fresh.tokens, res2.Tokens) {
		t.Fatalf("fresh prefill of the same tokens gives %v, the continued conversation %v", fresh.tokens, res2.Tokens)
	}
}
