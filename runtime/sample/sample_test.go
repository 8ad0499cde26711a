package sample

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func mustNew(t *testing.T, p Params) *Sampler {
	t.Helper()
	s, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// draws samples n tokens from logits with s, in order.
func draws(t *testing.T, s *Sampler, logits []float32, n int) []int {
	t.Helper()
	out := make([]int, 0, n)
	for range n {
		id, err := s.Sample(logits)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func logf(ps ...float64) []float32 {
	out := make([]float32, len(ps))
	for i, p := range ps {
		out[i] = float32(math.Log(p))
	}
	return out
}

func TestGreedy(t *testing.T) {
	s := mustNew(t, Params{})
	for _, c := range []struct {
		logits []float32
		want   int
	}{
		{[]float32{1, 3, 3, 2}, 1}, // tie: lowest id
		{[]float32{5}, 0},
		{[]float32{float32(math.NaN()), -1}, 1},
		{[]float32{float32(math.Inf(-1)), -100, float32(math.Inf(1))}, 2},
	} {
		if got, err := s.Sample(c.logits); err != nil || got != c.want {
			t.Errorf("%v: %d %v, want %d", c.logits, got, err, c.want)
		}
	}
	if _, err := s.Sample([]float32{float32(math.Inf(-1)), float32(math.NaN())}); !errors.Is(err, ErrNoCandidate) {
		t.Errorf("no finite logit: %v", err)
	}
	if _, err := s.Sample(nil); err == nil {
		t.Error("empty logits accepted")
	}
	// Greedy does not touch the random stream or the caller's logits.
	l := []float32{1, 2}
	s.Sample(l)
	if l[0] != 1 || l[1] != 2 {
		t.Error("logits modified")
	}
}

func TestRepetitionPenalty(t *testing.T) {
	// HF rule: seen logit l -> l/p if l > 0 else l*p.
	s := mustNew(t, Params{RepetitionPenalty: 2})
	s.Observe(0)
	// [3, -1, 2] -> [1.5, -1, 2]: id 2 wins.
	if got, _ := s.Sample([]float32{3, -1, 2}); got != 2 {
		t.Errorf("positive logit: got %d, want 2", got)
	}
	// Negative logits are multiplied: [-1, -1.5] with 0 seen -> [-2, -1.5].
	s = mustNew(t, Params{RepetitionPenalty: 2})
	s.Observe(0)
	if got, _ := s.Sample([]float32{-1, -1.5}); got != 1 {
		t.Errorf("negative logit: got %d, want 1", got)
	}
	// The chosen token counts as seen: [3, 2] picks 0, then 3/2 < 2 picks 1.
	s = mustNew(t, Params{RepetitionPenalty: 2})
	a, _ := s.Sample([]float32{3, 2})
	b, _ := s.Sample([]float32{3, 2})
	if a != 0 || b != 1 {
		t.Errorf("sequence %d %d, want 0 1", a, b)
	}
	// Penalty applies once per distinct token, however often it was seen.
	s = mustNew(t, Params{RepetitionPenalty: 2})
	s.Observe(0, 0, 0)
	if got, _ := s.Sample([]float32{3.9, 2}); got != 1 { // 1.95 < 2
		t.Errorf("got %d, want 1", got)
	}
	s = mustNew(t, Params{RepetitionPenalty: 2})
	s.Observe(0, 0, 0)
	if got, _ := s.Sample([]float32{4.2, 2}); got != 0 { // 2.1 > 2
		t.Errorf("got %d, want 0", got)
	}
	s.Reset()
	s.Observe(99, -5) // out of range ids are ignored
	if got, _ := s.Sample([]float32{4.2, 2}); got != 0 {
		t.Errorf("after reset: %d", got)
	}
}

func TestPresencePenalty(t *testing.T) {
	s := mustNew(t, Params{PresencePenalty: 0.5})
	s.Observe(0)
	if got, _ := s.Sample([]float32{1.0, 0.8}); got != 1 { // 0.5 < 0.8
		t.Errorf("got %d, want 1", got)
	}
	s = mustNew(t, Params{PresencePenalty: 0.1})
	s.Observe(0)
	if got, _ := s.Sample([]float32{1.0, 0.8}); got != 0 { // 0.9 > 0.8
		t.Errorf("got %d, want 0", got)
	}
	// Both penalties: (3/2) - 1 = 0.5 < 0.6.
	s = mustNew(t, Params{RepetitionPenalty: 2, PresencePenalty: 1})
	s.Observe(0)
	if got, _ := s.Sample([]float32{3, 0.6}); got != 1 {
		t.Errorf("got %d, want 1", got)
	}
}

func sortedCopy(x []int) []int {
	y := slices.Clone(x)
	slices.Sort(y)
	return y
}

func TestTopP(t *testing.T) {
	// probabilities 0.5, 0.3, 0.15, 0.05 (in a shuffled id order).
	logits := logf(0.15, 0.5, 0.05, 0.3)
	sc := make([]float64, 4)
	for i, v := range logits {
		sc[i] = float64(v)
	}
	for _, c := range []struct {
		p    float64
		want []int
	}{
		{0.4, []int{1}},           // 0.5 alone reaches 0.4
		{0.7, []int{1, 3}},        // 0.5 + 0.3
		{0.85, []int{0, 1, 3}},    // + 0.15
		{0.97, []int{0, 1, 2, 3}}, // needs all
	} {
		kept, _ := topPInto(sc, []int{0, 1, 2, 3}, c.p, &topPScratch{})
		got := sortedCopy(kept)
		if !slices.Equal(got, c.want) {
			t.Errorf("top_p %v: kept %v, want %v", c.p, got, c.want)
		}
	}
	// Through Sample: only kept ids come out, and each kept id does.
	s := mustNew(t, Params{Temperature: 1, TopP: 0.7, Seed: 3})
	counts := map[int]int{}
	for range 2000 {
		id, err := s.Sample(logits)
		if err != nil {
			t.Fatal(err)
		}
		counts[id]++
	}
	if len(counts) != 2 || counts[1] == 0 || counts[3] == 0 {
		t.Errorf("top_p 0.7 drew %v, want only ids 1 and 3", counts)
	}
	// Renormalised: 0.5/0.8 = 0.625 for id 1.
	if f := float64(counts[1]) / 2000; math.Abs(f-0.625) > 0.04 {
		t.Errorf("id 1 frequency %v, want about 0.625", f)
	}
}

func TestTopK(t *testing.T) {
	sc := []float64{1, 5, 3, 5, 2}
	all := []int{0, 1, 2, 3, 4}
	for _, c := range []struct {
		k    int
		want []int
	}{
		{1, []int{1, 3}}, // ties with the k-th largest are kept
		{2, []int{1, 3}},
		{3, []int{1, 2, 3}},
		{5, all},
		{0, all},
	} {
		if got := sortedCopy(topK(sc, slices.Clone(all), c.k)); !slices.Equal(got, c.want) {
			t.Errorf("top_k %d: %v, want %v", c.k, got, c.want)
		}
	}
	s := mustNew(t, Params{Temperature: 1, TopK: 2, Seed: 1})
	for range 500 {
		id, _ := s.Sample([]float32{1, 5, 3, 4.9, 2})
		if id != 1 && id != 3 {
			t.Fatalf("top_k 2 drew %d", id)
		}
	}
}

func TestMinP(t *testing.T) {
	logits := logf(0.5, 0.3, 0.15, 0.05)
	sc := make([]float64, 4)
	for i, v := range logits {
		sc[i] = float64(v)
	}
	// min_p 0.25: threshold 0.125 keeps 0.5, 0.3, 0.15; min_p 0.5: 0.25 keeps 0.5, 0.3.
	if got := sortedCopy(minP(sc, []int{0, 1, 2, 3}, 0.25)); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("min_p 0.25: %v", got)
	}
	if got := sortedCopy(minP(sc, []int{0, 1, 2, 3}, 0.5)); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("min_p 0.5: %v", got)
	}
	if got := minP(sc, []int{0, 1, 2, 3}, 1); !slices.Equal(got, []int{0}) {
		t.Errorf("min_p 1: %v", got)
	}
}

func TestTemperatureDistribution(t *testing.T) {
	// logits [0, ln 3]: p(1) = 3/4 at T=1; at T=0.5 the logits double, p(1) = 9/10;
	// at T=2 they halve, p(1) = sqrt3/(1+sqrt3).
	logits := []float32{0, float32(math.Log(3))}
	for _, c := range []struct{ temp, want float64 }{{1, 0.75}, {0.5, 0.9}, {2, math.Sqrt(3) / (1 + math.Sqrt(3))}} {
		s := mustNew(t, Params{Temperature: c.temp, Seed: 42})
		n, ones := 20000, 0
		for range n {
			id, _ := s.Sample(logits)
			ones += id
		}
		if f := float64(ones) / float64(n); math.Abs(f-c.want) > 0.015 {
			t.Errorf("T=%v: p(1) measured %v, want %v", c.temp, f, c.want)
		}
	}
}

func TestSeedReproducible(t *testing.T) {
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	run := func(seed uint64) []int {
		s := mustNew(t, Params{Temperature: 0.9, TopK: 50, TopP: 0.9, MinP: 0.01, RepetitionPenalty: 1.1, Seed: seed})
		return draws(t, s, logits, 64)
	}
	a, b, c := run(7), run(7), run(8)
	if !slices.Equal(a, b) {
		t.Error("same seed, different sequences")
	}
	if slices.Equal(a, c) {
		t.Error("different seeds, same sequence")
	}
}

func TestValidate(t *testing.T) {
	bad := []Params{
		{Temperature: -1}, {Temperature: math.NaN()}, {TopK: -1}, {TopP: 1.5}, {TopP: -0.1},
		{MinP: 2}, {RepetitionPenalty: -1}, {PresencePenalty: math.Inf(1)},
	}
	for _, p := range bad {
		if _, err := New(p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

func TestStopper(t *testing.T) {
	s := NewStopper([]int{151645, 151643}, []string{"</s>", "STOP", ""})
	if !s.IsEOS(151643) || s.IsEOS(0) || !slices.Equal(s.EOSIDs(), []int{151643, 151645}) {
		t.Error("EOS ids")
	}
	steps := []struct {
		in, emit string
		stopped  bool
	}{
		{"Hello </", "Hello ", false}, // "</" could start "</s>"
		{"b> and S", "</b> and ", false},
		{"T", "", false},
		{"OX", "STOX", false},
		{"ok STO", "ok ", false},
		{"P tail", "", true},
		{"more", "", true},
	}
	for i, st := range steps {
		emit, stopped := s.Push(st.in)
		if emit != st.emit || stopped != st.stopped {
			t.Errorf("step %d Push(%q) = %q %v, want %q %v", i, st.in, emit, stopped, st.emit, st.stopped)
		}
	}
	if !s.Stopped() || s.Flush() != "" {
		t.Error("after stop")
	}

	// Overlapping prefixes and the earliest match.
	s = NewStopper(nil, []string{"abc"})
	if e, _ := s.Push("aab"); e != "a" {
		t.Errorf("aab: %q", e)
	}
	if e, st := s.Push("c"); e != "" || !st {
		t.Errorf("c: %q %v", e, st)
	}
	// Several stop strings: the one completed first wins, however the text
	// is cut: "bc" ends before "abcd" does.
	s = NewStopper(nil, []string{"bc", "abcd"})
	if e, st := s.Push("xabcd"); e != "xa" || !st {
		t.Errorf("first completed: %q %v", e, st)
	}
	s = NewStopper(nil, []string{"1", "0100"})
	if e, _ := s.Push("00"); e != "0" {
		t.Errorf("00: %q", e)
	}
	if e, st := s.Push("100"); e != "0" || !st {
		t.Errorf("earliest: %q %v", e, st)
	}
	// Held text is released by Flush; multi-byte stop strings hold whole characters.
	s = NewStopper(nil, []string{"终止"})
	if e, _ := s.Push("好终"); e != "好" {
		t.Errorf("held: %q", e)
	}
	if f := s.Flush(); f != "终" {
		t.Errorf("Flush = %q", f)
	}
	// Without stop strings everything passes at once.
	s = NewStopper(nil, nil)
	if e, st := s.Push("anything </s>"); e != "anything </s>" || st {
		t.Errorf("no stops: %q", e)
	}
}

func TestEOSFromJSON(t *testing.T) {
	for _, c := range []struct {
		data string
		want []int
	}{
		{`{"eos_token_id": 151645}`, []int{151645}},
		{`{"eos_token_id": [151645, 151643]}`, []int{151645, 151643}},
		{`{"eos_token_id": null}`, nil},
		{`{"bos_token_id": 1}`, nil},
		// Qwen3.5/3.6 keep it in text_config; both places are read.
		{`{"text_config": {"eos_token_id": 248044}}`, []int{248044}},
		{`{"eos_token_id": [5, 7], "text_config": {"eos_token_id": [7, 9]}}`, []int{5, 7, 9}},
		{`{"text_config": null}`, nil},
	} {
		got, err := EOSFromJSON("g.json", []byte(c.data))
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v %v", c.data, got, err)
		}
	}
	for _, bad := range []string{`{"eos_token_id": "x"}`, `{"eos_token_id": -1}`, `{"eos_token_id": [1, 99999999999]}`, `{`, `{"eos_token_id": 1.5}`,
		`{"text_config": {"eos_token_id": "x"}}`, `{"text_config": 3}`} {
		if _, err := EOSFromJSON("g.json", []byte(bad)); err == nil || !strings.Contains(err.Error(), "g.json") {
			t.Errorf("%s: %v", bad, err)
		}
	}
	dir := t.TempDir()
	if ids, err := LoadEOS(dir); err != nil || len(ids) != 0 {
		t.Errorf("empty dir: %v %v", ids, err)
	}
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95}`), 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"eos_token_id": 151645, "vocab_size": 151936}`), 0o644)
	if ids, err := LoadEOS(dir); err != nil || !slices.Equal(ids, []int{151643, 151645}) {
		t.Errorf("LoadEOS = %v %v", ids, err)
	}
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"eos_token_id": "bad"}`), 0o644)
	if _, err := LoadEOS(dir); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("bad config: %v", err)
	}
}

// Without generation_config.json the EOS ids come from config.json's
// text_config: the committed tiny qwen3_5_moe model and the real Qwen3.6
// config (248044 is <|im_end|> in its vocabulary).
func TestLoadEOSTextConfig(t *testing.T) {
	for _, c := range []struct {
		config string
		want   []int
	}{
		{"../../testdata/tiny/qwen3_5_moe-q4g32/config.json", []int{356}},
		{"../testdata/configs/qwen3_6_35b_hf.json", []int{248044}},
	} {
		data, err := os.ReadFile(c.config)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if ids, err := LoadEOS(dir); err != nil || !slices.Equal(ids, c.want) {
			t.Errorf("%s without generation_config.json: LoadEOS = %v %v, want %v", c.config, ids, err, c.want)
		}
	}
}

func TestParamsFromGenerationConfig(t *testing.T) {
	qwen := `{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"}`
	p, err := ParamsFromGenerationConfig("g.json", []byte(qwen), Params{Seed: 9})
	if err != nil || p != (Params{Temperature: 0.6, TopK: 20, TopP: 0.95, Seed: 9}) {
		t.Errorf("%+v %v", p, err)
	}
	p, err = ParamsFromGenerationConfig("g.json", []byte(`{"temperature": 0.7}`), Params{})
	if err != nil || p.Temperature != 0 {
		t.Errorf("without do_sample: %+v %v", p, err)
	}
	if _, err := ParamsFromGenerationConfig("g.json", []byte(`{"do_sample": true, "top_p": 7}`), Params{}); err == nil || !strings.Contains(err.Error(), "g.json") {
		t.Errorf("bad top_p: %v", err)
	}
}

// The transformers semantics of generation_config.json: do_sample false or
// absent is greedy whatever the other fields say (the repetition penalty
// still applies); do_sample true samples with the file's values and
// transformers' defaults (temperature 1, top_k 50, top_p 1) for the rest;
// null is absent.
func TestGenerationConfigSemantics(t *testing.T) {
	for _, c := range []struct {
		file string
		want Params
	}{
		{`{}`, Params{Seed: 3}},
		{`{"do_sample": false, "temperature": 0.7, "top_k": 5, "top_p": 0.5}`, Params{Seed: 3}},
		{`{"temperature": 0.7, "repetition_penalty": 1.1}`, Params{RepetitionPenalty: 1.1, Seed: 3}},
		{`{"do_sample": true}`, Params{Temperature: 1, TopK: 50, TopP: 1, Seed: 3}},
		{`{"do_sample": true, "temperature": null, "top_k": null}`, Params{Temperature: 1, TopK: 50, TopP: 1, Seed: 3}},
		{`{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "min_p": 0.05}`, Params{Temperature: 0.6, TopK: 20, TopP: 0.95, MinP: 0.05, Seed: 3}},
		{`{"do_sample": true, "top_k": 0, "top_p": 0.8, "repetition_penalty": 1.05}`, Params{Temperature: 1, TopP: 0.8, RepetitionPenalty: 1.05, Seed: 3}},
		{`{"do_sample": true, "top_k": 20.0}`, Params{Temperature: 1, TopK: 20, TopP: 1, Seed: 3}},
	} {
		g, err := ParseGenerationConfig("generation_config.json", []byte(c.file))
		if err != nil {
			t.Errorf("%s: %v", c.file, err)
			continue
		}
		if got := g.Params(Params{Seed: 3, TopK: 9, Temperature: 2}); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.file, got, c.want)
		}
	}
	var none *GenerationConfig
	if got := none.Params(Params{Temperature: 1, Seed: 4}); got != (Params{Seed: 4}) || none.Sampling() {
		t.Errorf("no file: %+v, want greedy", got)
	}
	for _, c := range []struct{ file, field string }{
		{`{"do_sample": true, "top_k": -1}`, "top_k"},
		{`{"top_k": 2.5}`, "top_k"},
		{`{"temperature": -1}`, "temperature"},
		{`{"top_p": 1.5}`, "top_p"},
		{`{"min_p": -0.1}`, "min_p"},
		{`{"repetition_penalty": -2}`, "repetition_penalty"},
		{`{"do_sample": "yes"}`, "do_sample"},
	} {
		_, err := ParseGenerationConfig("dir/generation_config.json", []byte(c.file))
		if err == nil || !strings.Contains(err.Error(), "dir/generation_config.json") || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming the file and %s", c.file, err, c.field)
		}
	}
	dir := t.TempDir()
	if g, err := LoadGenerationConfig(dir); g != nil || err != nil {
		t.Errorf("no file: %v %v", g, err)
	}
	os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"do_sample": true, "top_p": 0.9}`), 0o644)
	if g, err := LoadGenerationConfig(dir); err != nil || !g.Sampling() || *g.TopP != 0.9 || g.Temperature != nil {
		t.Errorf("file: %+v %v", g, err)
	}
}

// kthLargest against a full sort on random data.
func TestKthLargest(t *testing.T) {
	rng := newTestRand()
	for trial := range 200 {
		n := 1 + rng.IntN(300)
		sc := make([]float64, n)
		cands := make([]int, n)
		for i := range sc {
			sc[i] = float64(rng.IntN(50)) // many ties
			cands[i] = i
		}
		k := 1 + rng.IntN(n)
		sorted := slices.Clone(sc)
		slices.Sort(sorted)
		if got, want := kthLargest(sc, cands, k), sorted[n-k]; got != want {
			t.Fatalf("trial %d: k=%d got %v want %v", trial, k, got, want)
		}
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(5, 6)) }

// topPInto against a direct implementation of the transformers rule (sort
// ascending, drop tokens whose cumulative probability is <= 1-p, keep the
// most likely) on random scores, including ties and many tokens.
func TestTopPMatchesSortRule(t *testing.T) {
	rng := newTestRand()
	for trial := range 300 {
		n := 1 + rng.IntN(3000)
		sc := make([]float64, n)
		cands := make([]int, n)
		for i := range sc {
			sc[i] = float64(rng.IntN(200)) / 10 * float64(1+trial%3)
			cands[i] = i
		}
		p := 0.05 + 0.9*rng.Float64()
		// Reference: ascending by score (ties: higher id first, the mirror
		// of our descending order with lower ids first).
		order := slices.Clone(cands)
		slices.SortFunc(order, func(a, b int) int {
			if sc[a] != sc[b] {
				if sc[a] < sc[b] {
					return -1
				}
				return 1
			}
			return b - a
		})
		maxv := slices.Max(sc)
		var total float64
		for _, v := range sc {
			total += math.Exp(v - maxv)
		}
		var want []int
		var cum float64
		for j, i := range order {
			cum += math.Exp(sc[i]-maxv) / total
			if cum > 1-p || j == len(order)-1 {
				want = append(want, i)
			}
		}
		got, kw := topPInto(sc, slices.Clone(cands), p, &topPScratch{})
		// The kept stay in cands' (ascending) order, with their weights.
		if !slices.IsSorted(got) || len(kw) != len(got) {
			t.Fatalf("trial %d: kept %d candidates out of order or with %d weights", trial, len(got), len(kw))
		}
		for j, i := range got {
			if w := math.Exp(sc[i] - maxv); kw[j] != w {
				t.Fatalf("trial %d: kept weight %d = %v, want exp(sc - max) = %v", trial, j, kw[j], w)
			}
		}
		if !slices.Equal(sortedCopy(got), sortedCopy(want)) {
			// Rounding can move a token that sits exactly on the boundary.
			if d := len(got) - len(want); d < -1 || d > 1 {
				t.Fatalf("trial %d n=%d p=%v: kept %d, rule keeps %d", trial, n, p, len(got), len(want))
			}
		}
	}
}

// The weights of a whole vocabulary are computed on several cores: the
// draws must not depend on how many (the same exps, summed in order).
func TestParallelWeightsSameDraws(t *testing.T) {
	const V = 3 * parallelExpMin
	r := rand.New(rand.NewPCG(7, 8))
	logits := make([]float32, V)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	draw := func(procs int, p Params) []int {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		return draws(t, mustNew(t, p), logits, 64)
	}
	for _, p := range []Params{{Temperature: 1, Seed: 3}, {Temperature: 0.7, TopP: 0.9, Seed: 4}, {Temperature: 1.3, TopP: 0.5, MinP: 0.01, Seed: 5}} {
		one, many := draw(1, p), draw(4, p)
		if !slices.Equal(one, many) {
			t.Fatalf("%+v: draws on 1 core %v, on 4 %v", p, one[:8], many[:8])
		}
		if slices.Min(one) == slices.Max(one) {
			t.Fatalf("%+v: every draw the same token: the test would not see a difference", p)
		}
	}
}

// Greedy without penalties takes the float32 fast path: the same token as
// the reference argmax over float64 scores (NaN skipped, ties to the first).
func TestGreedyFastPath(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	s, err := New(Params{})
	if err != nil {
		t.Fatal(err)
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for round := range 200 {
		n := 1 + r.IntN(100) // several blocks of argmax32 and a tail
		logits := make([]float32, n)
		for i := range logits {
			switch r.IntN(10) {
			case 0:
				logits[i] = nan
			case 1:
				logits[i] = -inf
			case 2:
				logits[i] = 3 // ties
			case 3:
				if round%7 == 0 {
					logits[i] = inf
				}
			default:
				logits[i] = float32(r.NormFloat64())
			}
		}
		want := -1
		for i, v := range logits {
			f := float64(v)
			if math.IsNaN(f) || math.IsInf(f, -1) {
				continue
			}
			if want < 0 || f > float64(logits[want]) {
				want = i
			}
		}
		got, err := s.Sample(logits)
		if want < 0 {
			if !errors.Is(err, ErrNoCandidate) {
				t.Fatalf("%v: got %d, %v; want ErrNoCandidate", logits, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Fatalf("%v: got %d (%v), want %d", logits, got, err, want)
		}
	}
}

// probBucket reads the exponent from the bits: the same bucket as
// math.Frexp's exponent gives, for normal numbers, zero, subnormals and
// the values no probability should be.
func TestProbBucketFrexp(t *testing.T) {
	vals := []float64{0, 1, 0.5, 0.4999999999, 0.75, 0.25, 1e-3, 1e-300, 5e-324, 2.2250738585072014e-308,
		2.225073858507201e-308, math.Inf(1), math.NaN(), 2, 3.5, math.SmallestNonzeroFloat64 * 7}
	r := newTestRand()
	for range 2000 {
		vals = append(vals, math.Ldexp(r.Float64(), -r.IntN(80)))
	}
	for _, v := range vals {
		_, e := math.Frexp(v)
		want := min(63, max(0, 1-e))
		if got := probBucket(v, 64); got != want {
			t.Errorf("probBucket(%g) = %d, want %d", v, got, want)
		}
	}
}
