package sample

import (
	"math"
	"testing"
)

// Hand-computed: token 0 seen three times, token 1 once, penalty 0.5 on
// logits {2, 1.6, 1}: scores {0.5, 1.1, 1}, so greedy picks token 1; with
// the penalty off it picks token 0.
func TestFrequencyPenalty(t *testing.T) {
	logits := []float32{2, 1.6, 1}
	s, err := New(Params{FrequencyPenalty: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	s.Observe(0, 0, 1, 0)
	if got, _ := s.Sample(logits); got != 1 {
		t.Fatalf("picked %d, want 1", got)
	}
	// Token 1 now counts twice: scores {0.5, 0.6, 1}.
	if got, _ := s.Sample(logits); got != 2 {
		t.Fatalf("picked %d, want 2", got)
	}
	off, _ := New(Params{})
	off.Observe(0, 0, 1, 0)
	if got, _ := off.Sample(logits); got != 0 {
		t.Fatalf("no penalty: picked %d, want 0", got)
	}
	s.Reset()
	if got, _ := s.Sample(logits); got != 0 {
		t.Fatalf("after Reset: picked %d, want 0", got)
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		if _, err := New(Params{FrequencyPenalty: bad}); err == nil {
			t.Fatalf("frequency_penalty %v accepted", bad)
		}
	}
}

// With presence and repetition penalties the frequency penalty comes last:
// logit 3 of a token seen twice, repetition 1.5, presence 0.5, frequency
// 0.25: 3/1.5 - 0.5 - 2·0.25 = 1, below the unseen token's 1.2.
func TestFrequencyAfterOtherPenalties(t *testing.T) {
	s, _ := New(Params{RepetitionPenalty: 1.5, PresencePenalty: 0.5, FrequencyPenalty: 0.25})
	s.Observe(0, 0)
	if got, _ := s.Sample([]float32{3, 1.2}); got != 1 {
		t.Fatalf("picked %d, want 1", got)
	}
	s2, _ := New(Params{RepetitionPenalty: 1.5, PresencePenalty: 0.5, FrequencyPenalty: 0.25})
	s2.Observe(0, 0)
	if got, _ := s2.Sample([]float32{3, 0.9}); got != 0 {
		t.Fatalf("picked %d, want 0", got)
	}
}
