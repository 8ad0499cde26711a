// Package sample picks the next token from a logits vector: greedy or
// seeded random sampling with temperature, top-k, top-p and min-p, after
// repetition and presence penalties; and it decides when generation stops
// (EOS ids, stop strings matched on the decoded text stream).
//
// The filters follow the Hugging Face transformers logits processors, in
// their order: repetition penalty (a seen token's logit l becomes l/p when
// l > 0, else l*p), then presence penalty (a seen token's logit minus the
// penalty, once per distinct token), frequency penalty (minus the penalty
// times the token's count, as OpenAI's API defines it), then temperature, top-k (keep every
// token whose logit is at least the k-th largest), top-p (drop the
// least likely tokens whose cumulative probability is at most 1-top_p, never
// the most likely one), min-p (drop tokens whose probability is below min_p
// times the largest). Temperature 0 is greedy: the largest penalised logit,
// the lowest id on ties.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Params configures a Sampler. The zero value is greedy decoding.
type Params struct {
	Temperature       float64 // 0: greedy
	TopK              int     // 0: off
	TopP              float64 // 0 or 1: off
	MinP              float64 // 0: off
	RepetitionPenalty float64 // 0 or 1: off
	PresencePenalty   float64 // 0: off
	FrequencyPenalty  float64 // 0: off
	Seed              uint64
}

// Validate reports parameters out of range.
func (p Params) Validate() error {
	switch {
	case math.IsNaN(p.Temperature) || p.Temperature < 0 || math.IsInf(p.Temperature, 0):
		return fmt.Errorf("sample: temperature %v must be finite and >= 0", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sample: top_k %d must be >= 0", p.TopK)
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("sample: top_p %v must be in [0, 1]", p.TopP)
	case math.IsNaN(p.MinP) || p.MinP < 0 || p.MinP > 1:
		return fmt.Errorf("sample: min_p %v must be in [0, 1]", p.MinP)
	case math.IsNaN(p.RepetitionPenalty) || p.RepetitionPenalty < 0 || math.IsInf(p.RepetitionPenalty, 0):
		return fmt.Errorf("sample: repetition_penalty %v must be finite and > 0 (0 means off)", p.RepetitionPenalty)
	case math.IsNaN(p.PresencePenalty) || math.IsInf(p.PresencePenalty, 0):
		return fmt.Errorf("sample: presence_penalty %v must be finite", p.PresencePenalty)
	case math.IsNaN(p.FrequencyPenalty) || math.IsInf(p.FrequencyPenalty, 0):
		return fmt.Errorf("sample: frequency_penalty %v must be finite", p.FrequencyPenalty)
	}
	return nil
}

// Sampler draws tokens. It remembers the tokens it has seen (Observe, and
// every token it returns) for the penalties. Not safe for concurrent use.
type Sampler struct {
	p    Params
	rng  *rand.Rand
	seen map[int]struct{}
	freq map[int]int // counts of seen tokens (only with FrequencyPenalty)

	scores  []float64
	cands   []int
	weights []float64 // the draw's exp(score - max) per candidate
	topP    topPScratch
	heap    []float64 // scanTopK's

	accepted acceptedTop // AcceptsTop's last yes (top.go)
}

// New returns a Sampler whose random stream is fixed by p.Seed.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{
		p:    p,
		rng:  rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15)),
		seen: map[int]struct{}{},
		freq: map[int]int{},
	}, nil
}

// Params returns the parameters the sampler was made with.
func (s *Sampler) Params() Params { return s.p }

// Observe records tokens as seen (typically the prompt) for the penalties.
func (s *Sampler) Observe(ids ...int) {
	for _, id := range ids {
		s.see(id)
	}
	s.count(ids...)
}

// see records id as seen, where a penalty reads the seen tokens
// (penalised): without one the set stays empty, and a decode step's draw
// adds nothing to a map that would grow with every new token.
func (s *Sampler) see(id int) {
	if s.readsSeen() {
		s.seen[id] = struct{}{}
	}
}

// readsSeen reports whether a penalty reads the seen tokens (the
// repetition and presence penalties; the frequency penalty reads counts).
func (s *Sampler) readsSeen() bool {
	rp := s.p.RepetitionPenalty
	return (rp != 0 && rp != 1) || s.p.PresencePenalty != 0
}

// Reset forgets the seen tokens; the random stream continues.
func (s *Sampler) Reset() { clear(s.seen); clear(s.freq) }

// ErrNoCandidate is returned when no logit is a finite number (after
// penalties and temperature), so no token can be chosen.
var ErrNoCandidate = errors.New("sample: no finite logit")

// Sample chooses the next token from logits (not modified) and records it
// as seen.
func (s *Sampler) Sample(logits []float32) (int, error) {
	id, err := s.pick(logits)
	if err != nil {
		return -1, err
	}
	s.see(id)
	s.count(id)
	return id, nil
}

func (s *Sampler) pick(logits []float32) (int, error) {
	if len(logits) == 0 {
		return -1, errors.New("sample: empty logits")
	}
	if !s.penalises() {
		if s.p.Temperature == 0 {
			return argmax32(logits)
		}
		sc := slices.Grow(s.scores[:0], len(logits))[:len(logits)]
		s.scores = sc
		if cands, ok := s.scanTopK32(logits, sc); ok {
			return s.filterDraw(sc, cands)
		}
	}
	sc := s.penalised(logits)

	if s.p.Temperature == 0 {
		best := -1
		for i, v := range sc {
			if math.IsInf(v, -1) {
				continue
			}
			if best < 0 || v > sc[best] {
				best = i
			}
		}
		if best < 0 {
			return -1, ErrNoCandidate
		}
		return best, nil
	}

	// With a top-k, one pass divides by the temperature and finds the k-th
	// largest score, a second keeps the scores at least that large: the
	// general path's candidates exactly, without listing the whole
	// vocabulary first (at 248K entries the draw took 1.2 ms that way).
	cands, ok := s.scanTopK(sc)
	if !ok {
		var err error
		if cands, err = s.topKCands(sc); err != nil {
			return -1, err
		}
	}
	return s.filterDraw(sc, cands)
}

// filterDraw applies top-p and min-p to the candidates (their scores in
// sc, divided by the temperature) and draws one.
func (s *Sampler) filterDraw(sc []float64, cands []int) (int, error) {
	// kept: top-p's weights of the candidates it kept, in their order
	// (nil when top-p is off).
	var kept []float64
	if s.p.TopP > 0 && s.p.TopP < 1 {
		cands, kept = topPInto(sc, cands, s.p.TopP, &s.topP)
	}
	if s.p.MinP > 0 {
		cands = minP(sc, cands, s.p.MinP)
		kept = nil // fewer candidates than kept's
	}
	s.cands = cands

	// Draw from the softmax of the kept scores, walking ids in ascending
	// order so that a seed gives the same token whatever order the filters
	// left the candidates in. (The filters keep the candidates' order, so
	// ascending candidates need no sort.)
	if !slices.IsSorted(cands) {
		slices.Sort(cands)
		kept = nil // in the order before the sort
	}
	// Each weight is computed once (the walk below adds the same values in
	// the same order as the total): top-p's own when it was the only
	// filter, the same bits (exp(sc - max), and the largest score is
	// always kept).
	w := kept
	if w == nil {
		maxv := math.Inf(-1)
		for _, i := range cands {
			maxv = max(maxv, sc[i])
		}
		w = expWeights(s.weights, sc, cands, maxv)
		s.weights = w
	}
	var total float64
	for _, v := range w {
		total += v
	}
	u := s.rng.Float64() * total
	var acc float64
	for j, i := range cands {
		acc += w[j]
		if u < acc {
			return i, nil
		}
	}
	return cands[len(cands)-1], nil // rounding left u at the very top
}

// penalised copies logits to float64 scores (NaN becomes -Inf) and applies
// the repetition and presence penalties to the seen tokens.
func (s *Sampler) penalised(logits []float32) []float64 {
	sc := slices.Grow(s.scores[:0], len(logits))[:len(logits)]
	s.scores = sc
	for i, v := range logits {
		f := float64(v)
		if math.IsNaN(f) {
			f = math.Inf(-1)
		}
		sc[i] = f
	}
	if !s.readsSeen() {
		s.frequencyPenalty(sc)
		return sc
	}
	rp := s.p.RepetitionPenalty
	pp := s.p.PresencePenalty
	for id := range s.seen {
		if id < 0 || id >= len(sc) {
			continue
		}
		v := sc[id]
		if rp != 0 && rp != 1 {
			if v > 0 {
				v /= rp
			} else {
				v *= rp
			}
		}
		v -= pp
		sc[id] = v
	}
	s.frequencyPenalty(sc)
	return sc
}

// topKCands is the general path to the candidates of the scores (divided
// by the temperature already): every finite one, or the +Inf ones alone
// (their scores set to 0), then topK's cut.
func (s *Sampler) topKCands(sc []float64) ([]int, error) {
	cands := s.cands[:0]
	for i, v := range sc {
		if !math.IsInf(v, -1) && !math.IsNaN(v) {
			cands = append(cands, i)
		}
	}
	// v/T can overflow to +Inf for tiny T: such tokens are the only
	// candidates, as in the limit.
	var inf []int
	for _, i := range cands {
		if math.IsInf(sc[i], 1) {
			inf = append(inf, i)
		}
	}
	if len(inf) > 0 {
		cands = append(cands[:0], inf...)
		for _, i := range cands {
			sc[i] = 0
		}
	}
	if len(cands) == 0 {
		return nil, ErrNoCandidate
	}
	return topK(sc, cands, s.p.TopK), nil
}

// scanTopK divides the scores by the temperature in place and, with a
// top-k, returns the ids (ascending) whose score is at least the k-th
// largest finite one: what the general path's candidates and topK keep. It
// reports false (the scores divided all the same) without a top-k, when
// fewer than k scores are finite (topK keeps them all), and when a score
// is +Inf (those tokens alone are candidates): the general path then runs.
func (s *Sampler) scanTopK(sc []float64) ([]int, bool) {
	k, T := s.p.TopK, s.p.Temperature
	if k <= 0 || k >= len(sc) {
		for i := range sc {
			sc[i] /= T
		}
		return nil, false
	}
	h := topHeap{h: s.heap[:0], k: k}
	th := math.Inf(-1) // what a score must beat to enter the heap
	posInf := false
	for i, v := range sc {
		v /= T
		sc[i] = v
		if v > th { // never NaN
			posInf = posInf || math.IsInf(v, 1)
			th = h.push(v)
		}
	}
	s.heap = h.h
	if posInf || len(h.h) < k {
		return nil, false
	}
	out := s.cands[:0]
	for i, v := range sc {
		if v >= th {
			out = append(out, i)
		}
	}
	return out, true
}

// scanTopK32 is scanTopK straight over the logits when nothing penalises
// them (the scores are float64(logit)/T, NaN as -Inf), ranking by the
// logits themselves: dividing by T > 0 keeps their order and, while every
// quotient is a normal float64 (T below 2^870, no overflow), it merges no
// two float32 values (their spacing is 2^-24 relative, the division's error
// 2^-53), so the k-th largest score is the k-th largest logit divided by T
// and a logit is kept exactly when its score is. One pass finds that logit,
// a second lists the ids at least that large and writes only their scores
// into sc, the only entries the filters and the draw read; the divisions
// are the candidates' alone. false: sc is left to the general path.
func (s *Sampler) scanTopK32(logits []float32, sc []float64) ([]int, bool) {
	k, T := s.p.TopK, s.p.Temperature
	if k <= 0 || k >= len(logits) || !(T > 0 && T < 0x1p870) {
		return nil, false
	}
	// th is -Inf or a logit converted to float64, so comparing in float32
	// against th32 is exact; a block of 8 is pushed element by element only
	// when one of them beats th (as in argmax32). NaN never enters.
	h := topHeap{h: s.heap[:0], k: k}
	th := math.Inf(-1)
	th32 := float32(th)
	push := func(b []float32) {
		for _, l := range b {
			if v := float64(l); v > th {
				th = h.push(v)
			}
		}
		th32 = float32(th)
	}
	i := 0
	for ; i+8 <= len(logits); i += 8 {
		b := logits[i : i+8 : i+8]
		if anyAbove(b, th32) {
			push(b)
		}
	}
	push(logits[i:])
	s.heap = h.h
	if len(h.h) < k {
		return nil, false
	}
	top := slices.Max(h.h)
	if math.IsInf(top/T, 1) || math.IsInf(th/T, -1) {
		return nil, false // overflow: the general path handles +Inf and -Inf scores
	}
	out := s.cands[:0]
	keep := func(i0 int, b []float32) {
		for j, l := range b {
			if v := float64(l); v >= th {
				sc[i0+j] = v / T
				out = append(out, i0+j)
			}
		}
	}
	i = 0
	for ; i+8 <= len(logits); i += 8 {
		b := logits[i : i+8 : i+8]
		if anyAtLeast(b, th32) {
			keep(i, b)
		}
	}
	keep(i, logits[i:])
	return out, true
}

// topK keeps the candidates whose score is at least the k-th largest.
func topK(sc []float64, cands []int, k int) []int {
	if k <= 0 || k >= len(cands) {
		return cands
	}
	th := kthLargest(sc, cands, k)
	out := cands[:0]
	for _, i := range cands {
		if sc[i] >= th {
			out = append(out, i)
		}
	}
	return out
}

// kthLargest returns the k-th largest score among cands (1 <= k <= len),
// keeping the k largest seen so far in a min-heap.
func kthLargest(sc []float64, cands []int, k int) float64 {
	h := topHeap{h: make([]float64, 0, k), k: k}
	for _, i := range cands {
		h.push(sc[i])
	}
	return h.h[0]
}

// topHeap keeps the k largest values pushed, in a min-heap (h[0] the
// smallest of them).
type topHeap struct {
	h []float64
	k int
}

// push offers v and returns the value a later one must exceed to enter:
// -Inf while fewer than k are kept, else the k-th largest so far. A value
// not above it is dropped (ties with the root included).
func (t *topHeap) push(v float64) float64 {
	h, k := t.h, t.k
	if len(h) < k {
		h = append(h, v)
		for j := len(h) - 1; j > 0; { // sift up
			parent := (j - 1) / 2
			if h[parent] <= h[j] {
				break
			}
			h[parent], h[j] = h[j], h[parent]
			j = parent
		}
		t.h = h
		if len(h) < k {
			return math.Inf(-1)
		}
		return h[0]
	}
	if v <= h[0] {
		return h[0]
	}
	h[0] = v
	for j := 0; ; { // sift down
		l, r, m := 2*j+1, 2*j+2, j
		if l < k && h[l] < h[m] {
			m = l
		}
		if r < k && h[r] < h[m] {
			m = r
		}
		if m == j {
			break
		}
		h[j], h[m] = h[m], h[j]
		j = m
	}
	return h[0]
}

// topPScratch is topPInto's scratch, kept by a Sampler so that a decode
// loop's draws allocate nothing.
type topPScratch struct {
	w    []float64   // every candidate's weight, before the cut
	kept []float64   // the kept candidates' weights, in their order
	ord  []rankedPos // the candidates that can be kept, by rank
	keep []bool      // whether candidate j is kept
}

// rankedPos is a candidate for topPInto's order: its score and id held
// inline, so that the sort compares without indirection.
type rankedPos struct {
	s  float64
	id int
	j  int // its position in cands
}

// topPInto keeps each candidate while the probability mass of those before
// it, in descending order of score (ties: lower id first), is below p; the
// first is always kept. The kept candidates stay in their order in cands
// (filtered in place, so ascending ids stay ascending), and the second
// result holds their weights exp(sc[i] - max) in that order: the bits the
// draw's own expWeights would compute, since the largest score is always
// kept.
func topPInto(sc []float64, cands []int, p float64, t *topPScratch) ([]int, []float64) {
	maxv := math.Inf(-1)
	for _, i := range cands {
		maxv = max(maxv, sc[i])
	}
	w := expWeights(t.w, sc, cands, maxv) // exp(sc[cands[j]] - maxv)
	t.w = w
	var total float64
	for _, v := range w {
		total += v
	}
	// Only candidates that can be kept are sorted. Bucket them by the
	// binary exponent of their probability: once the buckets above hold mass
	// p, every token in a lower bucket has at least p of strictly more
	// likely tokens before it and is dropped. One bucket of slack covers
	// rounding in these sums.
	const nb = 64
	var mass [nb]float64
	for _, v := range w {
		prob := v / total
		mass[probBucket(prob, nb)] += prob
	}
	last, cum := nb-1, 0.0
	for b := range nb {
		cum += mass[b]
		if cum >= p {
			last = min(nb-1, b+1)
			break
		}
	}
	ord := t.ord[:0]
	for j, i := range cands {
		if probBucket(w[j]/total, nb) <= last {
			ord = append(ord, rankedPos{s: sc[i], id: i, j: j})
		}
	}
	t.ord = ord
	slices.SortFunc(ord, func(a, b rankedPos) int {
		switch {
		case a.s > b.s:
			return -1
		case a.s < b.s:
			return 1
		}
		return a.id - b.id
	})
	n := 0
	var before float64
	for _, r := range ord {
		if n > 0 && before >= p {
			break
		}
		n++
		before += w[r.j] / total
	}
	keep := slices.Grow(t.keep[:0], len(cands))[:len(cands)]
	clear(keep)
	t.keep = keep
	for _, r := range ord[:n] {
		keep[r.j] = true
	}
	kept := t.kept[:0]
	out := cands[:0]
	for j, i := range cands {
		if keep[j] {
			out = append(out, i)
			kept = append(kept, w[j])
		}
	}
	t.kept = kept
	return out, kept
}

// probBucket is the bucket of a probability by its binary exponent: 1-e
// for prob = f·2^e with f in [0.5, 1) (math.Frexp's e), clamped to [0,
// nb). Read from the bits for a normal number; zero, subnormals, Inf and
// NaN go through Frexp.
func probBucket(prob float64, nb int) int {
	exp := int(math.Float64bits(prob)>>52) & 0x7ff
	var e int
	if exp == 0 || exp == 0x7ff {
		_, e = math.Frexp(prob)
	} else {
		e = exp - 1022
	}
	return min(nb-1, max(0, 1-e))
}

// minP keeps candidates whose probability is at least m times the largest,
// that is whose score is at least max + ln(m).
func minP(sc []float64, cands []int, m float64) []int {
	maxv := math.Inf(-1)
	for _, i := range cands {
		maxv = max(maxv, sc[i])
	}
	out := cands[:0]
	for _, i := range cands {
		if math.Exp(sc[i]-maxv) >= m {
			out = append(out, i)
		}
	}
	return out
}

// penalises reports whether any penalty changes the scores.
func (s *Sampler) penalises() bool {
	rp := s.p.RepetitionPenalty
	return (rp != 0 && rp != 1) || s.p.PresencePenalty != 0 || s.p.FrequencyPenalty != 0
}

// argmax32 is greedy decoding without penalties, straight over the float32
// logits (the float64 scores order them the same way, exactly): the first
// largest, NaN and -Inf never chosen.
func argmax32(logits []float32) (int, error) {
	// NaN and -Inf are never greater than bv. A block of 8 is looked at
	// element by element only when one of them beats the best so far (a
	// new maximum is rare past the start): 3-5x faster than the plain loop.
	best, bv := -1, float32(math.Inf(-1))
	i := 0
	for ; i+8 <= len(logits); i += 8 {
		b := logits[i : i+8 : i+8]
		if anyAbove(b, bv) {
			for j, v := range b {
				if v > bv {
					best, bv = i+j, v
				}
			}
		}
	}
	for ; i < len(logits); i++ {
		if v := logits[i]; v > bv {
			best, bv = i, v
		}
	}
	if best < 0 {
		return -1, ErrNoCandidate
	}
	return best, nil
}

// anyAbove reports whether one of a block's 8 values is above t (NaN never
// is), anyAtLeast whether one is at least t: one test a block in the scans
// above.
func anyAbove(b []float32, t float32) bool {
	b = b[:8]
	return b[0] > t || b[1] > t || b[2] > t || b[3] > t || b[4] > t || b[5] > t || b[6] > t || b[7] > t
}

func anyAtLeast(b []float32, t float32) bool {
	b = b[:8]
	return b[0] >= t || b[1] >= t || b[2] >= t || b[3] >= t || b[4] >= t || b[5] >= t || b[6] >= t || b[7] >= t
}
