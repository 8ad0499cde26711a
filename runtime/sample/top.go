package sample

import (
	"math"
	"slices"
)

// Drawing from the top of the logits: a device that selects the largest
// logits itself (runtime/nn's TopLogits and TopSelector) brings back a few
// candidates instead of the whole vector. When nothing penalises the
// logits, Sample's draw reads only those candidates (argmax32's maximum
// for greedy decoding, scanTopK32's kept ids for a top-k), so the draw
// from the candidates is Sample's, bit for bit, and consumes the random
// stream the same way.

// TopK returns the k a device should select the top of a vocab-entry
// logits vector with (nn.TopSelector.SelectTop) for SampleTop to draw this
// sampler's next token from it, or 0 when the draw needs the whole vector:
// with a penalty (it changes logits outside the top), without a top-k or
// with one of at least vocab (every finite logit is a candidate), or with a
// temperature scanTopK32 does not take (at 2^870 and above the quotients
// may be subnormal and merge logits). Greedy decoding (temperature 0) is
// 1: the maximum and every id tied with it.
func (s *Sampler) TopK(vocab int) int {
	if vocab < 1 || s.penalises() {
		return 0
	}
	k, T := s.p.TopK, s.p.Temperature
	switch {
	case T == 0:
		return 1
	case k <= 0 || k >= vocab || !(T > 0 && T < 0x1p870):
		return 0
	}
	return k
}

// AcceptsTop reports whether SampleTop draws from these candidates: the
// check SampleTop makes, without drawing. A forward pass asks it before it
// gives up the whole logits (runtime.TopRequest.Accept), so that once it
// said true, SampleTop on the same candidates reports ok.
func (s *Sampler) AcceptsTop(ids []int32, logits []float32, vocab int) bool {
	th, ok := s.topThreshold(ids, logits, vocab)
	s.accepted.keep(ok, ids, logits, vocab, th)
	return ok
}

// acceptedTop is AcceptsTop's last yes: copies of the candidates it
// checked and their threshold, which SampleTop takes instead of finding it
// again when it is given the same candidates (a decode step asks both,
// back to back). Compared by value, so candidates changed in between are
// checked anew.
type acceptedTop struct {
	ok    bool
	vocab int
	ids   []int32
	bits  []uint32 // the logits' bits (NaN compares by its bits)
	th    float64
}

func (a *acceptedTop) keep(ok bool, ids []int32, logits []float32, vocab int, th float64) {
	a.ok, a.vocab, a.th = ok, vocab, th
	if !ok {
		return
	}
	a.ids = append(a.ids[:0], ids...)
	a.bits = a.bits[:0]
	for _, l := range logits {
		a.bits = append(a.bits, math.Float32bits(l))
	}
}

// same reports whether ids, logits and vocab are the kept candidates.
func (a *acceptedTop) same(ids []int32, logits []float32, vocab int) bool {
	if !a.ok || vocab != a.vocab || !slices.Equal(ids, a.ids) || len(logits) != len(a.bits) {
		return false
	}
	for i, l := range logits {
		if math.Float32bits(l) != a.bits[i] {
			return false
		}
	}
	return true
}

// SampleTop chooses the next token from the top of a vocab-entry logits
// vector, as Sample on the whole vector would (the same token, the same
// advance of the random stream), and records it as seen. ids (ascending,
// below vocab) and logits (logits[j] the logit of ids[j]) must list every
// id whose logit is at least some threshold, as nn.TopLogits does, for a k
// of at least TopK(vocab) or with at least that many of them neither NaN
// nor -Inf. ok is false, with nothing drawn or recorded, when the
// candidates cannot give Sample's draw: TopK(vocab) is 0, the candidates
// are malformed or too few, or dividing the largest or the k-th largest
// logit by the temperature overflows (Sample then leaves scanTopK32 for
// the general path, which reads the whole vector). The caller then samples
// the whole logits with Sample.
func (s *Sampler) SampleTop(ids []int32, logits []float32, vocab int) (tok int, ok bool, err error) {
	var th float64
	if s.accepted.same(ids, logits, vocab) {
		th, ok = s.accepted.th, true
	} else {
		th, ok = s.topThreshold(ids, logits, vocab)
	}
	s.accepted.ok = false
	if !ok {
		return -1, false, nil
	}
	// j is the drawn candidate's position.
	var j int
	if T := s.p.Temperature; T == 0 {
		// argmax32's first largest: the largest candidate is the largest
		// logit of the vector, and the ids are ascending.
		j, err = argmax32(logits)
	} else {
		// scanTopK32's candidates and scores, at the candidates' positions
		// instead of their ids: the filters and the draw depend on the ids
		// only through their order (ascending; ties broken by the lower
		// id), which the positions keep, so no vocab-long score buffer is
		// needed.
		sc := slices.Grow(s.scores[:0], len(logits))[:len(logits)]
		s.scores = sc
		cands := s.cands[:0]
		for i, l := range logits {
			if v := float64(l); v >= th { // NaN never is
				sc[i] = v / T
				cands = append(cands, i)
			}
		}
		j, err = s.filterDraw(sc, cands)
	}
	if err != nil {
		return -1, false, err // cannot happen: th is a candidate's logit
	}
	tok = int(ids[j])
	s.see(tok)
	s.count(tok)
	return tok, true, nil
}

// topThreshold checks candidates for SampleTop and returns the k-th largest
// of their logits (k = TopK(vocab)), which is the k-th largest of the whole
// vector since the candidates are every id at least some threshold and
// there are k of them: what scanTopK32 (or, for k = 1, argmax32) finds.
// false when SampleTop cannot draw from them (see there).
func (s *Sampler) topThreshold(ids []int32, logits []float32, vocab int) (float64, bool) {
	k := s.TopK(vocab)
	if k == 0 || len(ids) != len(logits) || len(ids) < k {
		return 0, false
	}
	prev := int32(-1)
	for _, id := range ids {
		if id <= prev || int(id) >= vocab {
			return 0, false // not ascending, or out of range
		}
		prev = id
	}
	// scanTopK32's heap over the candidates: NaN and -Inf never enter.
	h := topHeap{h: s.heap[:0], k: k}
	th := math.Inf(-1)
	for _, l := range logits {
		if v := float64(l); v > th {
			th = h.push(v)
		}
	}
	s.heap = h.h
	if len(h.h) < k {
		return 0, false
	}
	if T := s.p.Temperature; T > 0 {
		if top := slices.Max(h.h); math.IsInf(top/T, 1) || math.IsInf(th/T, -1) {
			return 0, false // Sample's general path handles +Inf and -Inf scores
		}
	}
	return th, true
}
