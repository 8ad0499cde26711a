package sample

import (
	"math"
	"testing"
	"time"
)

// BenchmarkSample measures one draw over a Qwen-sized vocabulary with the
// Qwen3 defaults (T 0.6, top-k 20, top-p 0.95) with top-p alone and with temperature alone, and
// reports each as a multiple of greedy decoding timed in the same run.
func BenchmarkSample(b *testing.B) {
	const vocab = 151936
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(8 * math.Sin(float64(i)*0.7)) // spread-out scores
	}
	timeIt := func(p Params) time.Duration {
		s, err := New(p)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for range b.N {
			if _, err := s.Sample(logits); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	greedy := timeIt(Params{})
	qwen := timeIt(Params{Temperature: 0.6, TopK: 20, TopP: 0.95, Seed: 1})
	topp := timeIt(Params{Temperature: 0.6, TopP: 0.95, Seed: 1})
	temp := timeIt(Params{Temperature: 1, Seed: 1})
	b.ReportMetric(float64(greedy.Nanoseconds())/float64(b.N), "greedy-ns/op")
	b.ReportMetric(float64(qwen)/float64(greedy), "qwen-defaults/greedy")
	b.ReportMetric(float64(topp)/float64(greedy), "top-p-only/greedy")
	b.ReportMetric(float64(temp)/float64(greedy), "temperature-only/greedy")
}
