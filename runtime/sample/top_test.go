package sample

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// topDraws runs two samplers of the same parameters over the same
// sequence of logit vectors: one draws with Sample on the whole vector,
// the other from the top nn.SelectTopRef selects (of extra more than
// TopK asks for, as a device that brings back more may) with SampleTop,
// falling back to Sample where the selection or SampleTop declines. The
// tokens (and errors), the seen tokens, the counts and the random streams
// must end up the same. It returns how many draws came from the top.
func topDraws(t testing.TB, p Params, steps [][]float32, extra int) (fast int) {
	t.Helper()
	a, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(p)
	var c nn.TopLogits
	for i, logits := range steps {
		want, werr := a.Sample(logits)
		vocab := len(logits)
		got, ok, gerr := -1, false, error(nil)
		if k := b.TopK(vocab); k > 0 && nn.SelectTopRef(&c, logits, min(k+extra, vocab), 0) {
			accepts := b.AcceptsTop(c.IDs, c.Logits, c.N)
			got, ok, gerr = b.SampleTop(c.IDs, c.Logits, c.N)
			if ok != accepts {
				t.Fatalf("%+v step %d: AcceptsTop %v but SampleTop ok %v (%v)", p, i, accepts, ok, logits)
			}
			if !ok && (got != -1 || gerr != nil) {
				t.Fatalf("%+v step %d: not ok, yet token %d err %v", p, i, got, gerr)
			}
			if ok {
				fast++
			}
		}
		if !ok {
			got, gerr = b.Sample(logits)
		}
		if got != want || (gerr == nil) != (werr == nil) {
			t.Fatalf("%+v step %d (top %v, k %d, candidates %v %v): drew %d (%v), Sample %d (%v); logits %v",
				p, i, ok, b.TopK(vocab), c.IDs, c.Logits, got, gerr, want, werr, logits)
		}
	}
	if !maps.Equal(a.seen, b.seen) || !maps.Equal(a.freq, b.freq) {
		t.Fatalf("%+v: seen %v %v, counts %v %v", p, a.seen, b.seen, a.freq, b.freq)
	}
	if x, y := a.rng.Uint64(), b.rng.Uint64(); x != y {
		t.Fatalf("%+v: the random streams diverged", p)
	}
	return fast
}

// topLogits returns n logits of one of topKinds kinds.
func topLogits(r *rand.Rand, n, kind int) []float32 {
	specials := []float32{
		float32(math.NaN()), float32(math.Inf(-1)), float32(math.Copysign(0, -1)), 0,
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Inf(1)),
	}
	x := make([]float32, n)
	for i := range x {
		switch kind {
		case 0: // distinct, spread
			x[i] = float32(r.NormFloat64() * 3)
		case 1: // many ties
			x[i] = float32(r.IntN(9)-4) / 4
		case 2: // specials among ties (+Inf rarely: it sends Sample to the general path)
			if r.IntN(5) == 0 {
				x[i] = specials[r.IntN(len(specials)-1)]
				if r.IntN(40) == 0 {
					x[i] = specials[len(specials)-1]
				}
			} else {
				x[i] = float32(r.IntN(5) - 2)
			}
		case 3: // all equal, -0 and +0 mixed
			x[i] = specials[2+r.IntN(2)]
		case 4: // mostly NaN and -Inf: often fewer than k candidates
			if r.IntN(4) == 0 {
				x[i] = float32(r.NormFloat64())
			} else {
				x[i] = specials[r.IntN(2)]
			}
		case 5: // huge and tiny magnitudes (quotients overflow or underflow)
			x[i] = float32(math.Ldexp(r.Float64()+0.5, r.IntN(250)-125))
			if r.IntN(2) == 0 {
				x[i] = -x[i]
			}
		}
	}
	return x
}

const topKinds = 6

// topParams are the sampling parameters of the equality tests.
func topParams() []Params {
	ps := []Params{{}, {TopK: 20, TopP: 0.9, MinP: 0.1}} // greedy ignores the filters
	for _, T := range []float64{0.7, 1, 1.5} {
		for _, k := range []int{1, 20, 64} {
			for _, f := range [][2]float64{{0, 0}, {0.95, 0}, {0, 0.05}, {0.95, 0.05}} {
				ps = append(ps, Params{Temperature: T, TopK: k, TopP: f[0], MinP: f[1]})
			}
		}
	}
	// Extreme temperatures: quotients that overflow (SampleTop declines),
	// underflow, and the bounds of scanTopK32's range.
	for _, T := range []float64{5e-324, 1e-300, 1e-30, 1e30, 1e300, 0x1p869, 0x1p870} {
		ps = append(ps, Params{Temperature: T, TopK: 3}, Params{Temperature: T, TopK: 20, TopP: 0.95, MinP: 0.05})
	}
	return ps
}

// Drawing from the device's top (here nn.SelectTopRef) gives Sample's
// tokens, bit for bit, with the same random stream and bookkeeping, over
// vocabularies of 1 to 70, 1000 and 32768 entries, distinct values, ties,
// NaN, ±Inf, ±0, extreme magnitudes and temperatures, greedy and top-k
// with and without top-p and min-p; and the draws do come from the top.
func TestSampleTopEqualsSample(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	sizes := []int{1000, 32768}
	for n := 1; n <= 70; n++ {
		sizes = append(sizes, n)
	}
	var fast, total, fastGreedy, fastFiltered int
	for _, n := range sizes {
		for _, p := range topParams() {
			kinds := topKinds
			if n >= 1000 && p.Temperature != 1 && p.Temperature != 0 {
				kinds = 2 // the largest vocabulary: fewer combinations
			}
			for kind := range kinds {
				for seed := range uint64(2) {
					p.Seed = seed
					steps := make([][]float32, 4)
					for i := range steps {
						steps[i] = topLogits(r, n, kind)
					}
					f := topDraws(t, p, steps, int(seed)*5)
					fast += f
					total += len(steps)
					if p.Temperature == 0 {
						fastGreedy += f
					} else if p.TopP > 0 && p.MinP > 0 {
						fastFiltered += f
					}
				}
			}
		}
	}
	t.Logf("%d of %d draws from the top (greedy %d, with top-p and min-p %d)", fast, total, fastGreedy, fastFiltered)
	if fast < total/3 || fastGreedy == 0 || fastFiltered == 0 {
		t.Fatalf("only %d of %d draws from the top (greedy %d, filtered %d): the test does not test SampleTop", fast, total, fastGreedy, fastFiltered)
	}
}

// The same over many draws from one vector with a top-k and top-p: the
// random draws themselves (not only the first token) agree.
func TestSampleTopLongSequence(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	logits := topLogits(r, 1000, 0)
	steps := make([][]float32, 2000)
	for i := range steps {
		steps[i] = logits
	}
	p := Params{Temperature: 1.5, TopK: 64, TopP: 0.95, Seed: 9}
	if f := topDraws(t, p, steps, 0); f != len(steps) {
		t.Fatalf("%d of %d draws from the top", f, len(steps))
	}
	// The draws vary (a constant token would hide a broken stream).
	distinct := map[int]bool{}
	for _, id := range draws(t, mustNew(t, p), logits, 50) {
		distinct[id] = true
	}
	if len(distinct) < 5 {
		t.Fatalf("50 draws gave %d distinct tokens", len(distinct))
	}
}

// TopK asks for the top exactly where SampleTop can draw from it.
func TestTopKParams(t *testing.T) {
	for _, c := range []struct {
		p     Params
		vocab int
		want  int
	}{
		{Params{}, 1000, 1},
		{Params{}, 1, 1},
		{Params{TopK: 5, TopP: 0.5}, 1000, 1}, // greedy ignores the filters
		{Params{Temperature: 1}, 1000, 0},     // no top-k: every logit is a candidate
		{Params{Temperature: 1, TopK: 20}, 1000, 20},
		{Params{Temperature: 1, TopK: 20, TopP: 0.9, MinP: 0.1}, 1000, 20},
		{Params{Temperature: 1, TopK: 999}, 1000, 999},
		{Params{Temperature: 1, TopK: 1000}, 1000, 0},
		{Params{Temperature: 1, TopK: 20}, 20, 0},
		{Params{Temperature: 0x1p869, TopK: 20}, 1000, 20},
		{Params{Temperature: 0x1p870, TopK: 20}, 1000, 0},
		{Params{Temperature: 1, TopK: 20}, 0, 0},
		// Every penalty needs the whole vector.
		{Params{RepetitionPenalty: 1.1}, 1000, 0},
		{Params{PresencePenalty: 0.5}, 1000, 0},
		{Params{FrequencyPenalty: -0.2}, 1000, 0},
		{Params{Temperature: 1, TopK: 20, RepetitionPenalty: 1.05}, 1000, 0},
		{Params{Temperature: 1, TopK: 20, PresencePenalty: 1}, 1000, 0},
		{Params{Temperature: 1, TopK: 20, FrequencyPenalty: 1}, 1000, 0},
		{Params{Temperature: 1, TopK: 20, RepetitionPenalty: 1}, 1000, 20}, // 1 is off
	} {
		if got := mustNew(t, c.p).TopK(c.vocab); got != c.want {
			t.Errorf("%+v vocab %d: TopK %d, want %d", c.p, c.vocab, got, c.want)
		}
	}
}

// A penalising sampler declines any candidates (TopK is 0), and a
// declined SampleTop records nothing and consumes no random number.
func TestSampleTopDeclines(t *testing.T) {
	logits := []float32{1, 5, 3, 5, 2, 0, -1, 4}
	var c nn.TopLogits
	if !nn.SelectTopRef(&c, logits, 3, 0) {
		t.Fatal("SelectTopRef declined")
	}
	ids, ls := c.IDs, c.Logits // ids 1 3 7: 5, 5, 4
	for _, p := range []Params{
		{RepetitionPenalty: 1.3},
		{Temperature: 1, TopK: 3, PresencePenalty: 0.5},
		{Temperature: 1, TopK: 3, FrequencyPenalty: 0.5},
	} {
		s := mustNew(t, p)
		if k := s.TopK(len(logits)); k != 0 {
			t.Errorf("%+v: TopK %d, want 0", p, k)
		}
		if tok, ok, err := s.SampleTop(ids, ls, len(logits)); ok || err != nil || tok != -1 {
			t.Errorf("%+v: SampleTop %d %v %v", p, tok, ok, err)
		}
	}
	p := Params{Temperature: 1, TopK: 3, Seed: 4}
	for _, c := range []struct {
		name   string
		ids    []int32
		logits []float32
		vocab  int
	}{
		{"too few", ids[:2], ls[:2], 8},
		{"lengths differ", ids, ls[:2], 8},
		{"not ascending", []int32{1, 3, 2, 7}, []float32{5, 5, 3, 4}, 8},
		{"repeated id", []int32{1, 1, 3, 7}, []float32{5, 5, 5, 4}, 8},
		{"id past the vocabulary", []int32{1, 2, 3, 8}, []float32{5, 3, 5, 4}, 8},
		{"negative id", []int32{-1, 2, 3, 7}, []float32{5, 3, 5, 4}, 8},
		{"NaN and -Inf only", []int32{1, 2, 3}, []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.NaN())}, 8},
		{"top overflows", []int32{1, 2, 3}, []float32{float32(math.Inf(1)), 3, 5}, 8},
		{"vocab no larger than k", ids, ls, 3},
	} {
		s, ref := mustNew(t, p), mustNew(t, p)
		if s.AcceptsTop(c.ids, c.logits, c.vocab) {
			t.Errorf("%s: accepted", c.name)
		}
		if tok, ok, err := s.SampleTop(c.ids, c.logits, c.vocab); ok || err != nil || tok != -1 {
			t.Errorf("%s: SampleTop %d %v %v", c.name, tok, ok, err)
		}
		if len(s.seen) != 0 || s.rng.Uint64() != ref.rng.Uint64() {
			t.Errorf("%s: a declined draw recorded a token or consumed a random number", c.name)
		}
	}
	// Well formed, it draws (one of the three largest). Without a penalty
	// nothing reads the seen tokens, so none are kept.
	s := mustNew(t, Params{Temperature: 1, TopK: 3, FrequencyPenalty: 0, Seed: 4})
	tok, ok, err := s.SampleTop(ids, ls, len(logits))
	if !ok || err != nil || (tok != 1 && tok != 3 && tok != 7) {
		t.Fatalf("SampleTop %d %v %v", tok, ok, err)
	}
	if len(s.seen) != 0 {
		t.Fatalf("seen %v without a penalty", s.seen)
	}
}

// The seen tokens are kept exactly when a penalty reads them: a draw and
// Observe record them under a repetition or presence penalty, and a
// penalised draw reads them (the penalty changes which token comes next).
func TestSeenOnlyWithPenalty(t *testing.T) {
	for _, c := range []struct {
		p    Params
		keep bool
	}{
		{Params{Temperature: 0}, false},
		{Params{Temperature: 1, TopK: 4}, false},
		{Params{Temperature: 0, FrequencyPenalty: 0.5}, false},
		{Params{Temperature: 0, RepetitionPenalty: 1.3}, true},
		{Params{Temperature: 0, PresencePenalty: 0.5}, true},
	} {
		s := mustNew(t, c.p)
		s.Observe(3, 5)
		tok, err := s.Sample([]float32{0, 1, 2, 3, 4, 5, 6})
		if err != nil {
			t.Fatal(err)
		}
		_, s3 := s.seen[3]
		_, st := s.seen[tok]
		if s3 != c.keep || st != c.keep || (len(s.seen) > 0) != c.keep {
			t.Errorf("%+v: seen %v after Observe(3, 5) and drawing %d", c.p, s.seen, tok)
		}
	}
	// Greedy over logits where 6 leads 5 by little: a repetition penalty on
	// the seen 6 gives 5 instead.
	s := mustNew(t, Params{Temperature: 0, RepetitionPenalty: 2})
	logits := []float32{0, 1, 2, 3, 4, 5, 5.5}
	if tok, _ := s.Sample(logits); tok != 6 {
		t.Fatalf("first draw %d, want 6", tok)
	}
	if tok, _ := s.Sample(logits); tok != 5 {
		t.Fatalf("second draw %d, want 5 (6 penalised)", tok)
	}
}

// Greedy from the top of k = 1 is argmax32's first largest, ties, ±0 and
// +Inf included.
func TestSampleTopGreedy(t *testing.T) {
	for _, logits := range [][]float32{
		{1, 3, 3, 2},
		{float32(math.NaN()), -1},
		{float32(math.Copysign(0, -1)), 0, -1},
		{0, float32(math.Copysign(0, -1))},
		{float32(math.Inf(-1)), -100, float32(math.Inf(1)), float32(math.Inf(1))},
		{5},
	} {
		want, err := argmax32(logits)
		if err != nil {
			t.Fatal(err)
		}
		var c nn.TopLogits
		s := mustNew(t, Params{})
		if !nn.SelectTopRef(&c, logits, s.TopK(len(logits)), 0) {
			t.Fatalf("%v: SelectTopRef declined", logits)
		}
		if got, ok, err := s.SampleTop(c.IDs, c.Logits, c.N); !ok || err != nil || got != want {
			t.Errorf("%v: SampleTop %d %v %v, argmax32 %d", logits, got, ok, err, want)
		}
	}
}

// SampleTop takes the threshold AcceptsTop found only for the very
// candidates it checked: after AcceptsTop on others, or on the same
// storage changed in place since, it draws what a sampler that was never
// asked draws.
func TestSampleTopAfterOtherAccepts(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	p := Params{Temperature: 1, TopK: 8, TopP: 0.9, Seed: 3}
	const vocab = 200
	for i := range 200 {
		a, b := topLogits(r, vocab, 0), topLogits(r, vocab, 0)
		var ca, cb nn.TopLogits
		if !nn.SelectTopRef(&ca, a, 8+i%3, 0) || !nn.SelectTopRef(&cb, b, 8+i%5, 0) {
			t.Fatal("SelectTopRef declined")
		}
		fresh, _ := New(p)
		asked, _ := New(p)
		want, wok, _ := fresh.SampleTop(cb.IDs, cb.Logits, vocab)
		var got int
		var gok bool
		if i%2 == 0 {
			// Asked about other candidates.
			asked.AcceptsTop(ca.IDs, ca.Logits, vocab)
			got, gok, _ = asked.SampleTop(cb.IDs, cb.Logits, vocab)
		} else {
			// Asked about b's candidates with one logit since raised to
			// the top: the threshold must be found anew.
			ids, logits := slices.Clone(cb.IDs), slices.Clone(cb.Logits)
			asked.AcceptsTop(ids, logits, vocab)
			j := r.IntN(len(logits))
			logits[j] = slices.Max(logits) + 1
			fresh2, _ := New(p)
			want, wok, _ = fresh2.SampleTop(ids, logits, vocab)
			got, gok, _ = asked.SampleTop(ids, logits, vocab)
		}
		if got != want || gok != wok {
			t.Fatalf("case %d: drew %d (%v), a sampler never asked %d (%v)", i, got, gok, want, wok)
		}
	}
}
