package sample

// count records occurrences for the frequency penalty.
func (s *Sampler) count(ids ...int) {
	if s.p.FrequencyPenalty == 0 {
		return
	}
	for _, id := range ids {
		s.freq[id]++
	}
}

// frequencyPenalty subtracts FrequencyPenalty times each seen token's count
// from its score (after the repetition and presence penalties, as OpenAI's
// logit adjustment l - c·frequency - [c > 0]·presence does).
func (s *Sampler) frequencyPenalty(sc []float64) {
	fp := s.p.FrequencyPenalty
	if fp == 0 {
		return
	}
	for id, n := range s.freq {
		if id >= 0 && id < len(sc) {
			sc[id] -= fp * float64(n)
		}
	}
}
