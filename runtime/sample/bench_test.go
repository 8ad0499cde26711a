package sample

import (
	"cmp"
	"math"
	"slices"
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

// BenchmarkSampleTop is a decode step's draw from a device's selection
// (bench/gpu's resident decode: top-k 64, top-p 0.95, temperature 1): 80
// candidates of 32,768 (the k-th largest and its ties, and the slack the
// select kernels bring back), AcceptsTop's check and SampleTop's draw,
// reported per draw and against Sample's draw over the whole vector.
func BenchmarkSampleTop(b *testing.B) {
	const vocab, n = 32768, 80
	full := make([]float32, vocab)
	for i := range full {
		full[i] = float32(3 * math.Sin(float64(i)*0.37))
	}
	p := Params{Temperature: 1, TopK: 64, TopP: 0.95, Seed: 42}
	s, err := New(p)
	if err != nil {
		b.Fatal(err)
	}
	// The n largest, ascending by id, as the select kernels list them.
	idx := make([]int, vocab)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, c int) int { return cmp.Compare(full[c], full[a]) })
	top := slices.Clone(idx[:n])
	slices.Sort(top)
	ids, logits := make([]int32, n), make([]float32, n)
	for i, id := range top {
		ids[i], logits[i] = int32(id), full[id]
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if !s.AcceptsTop(ids, logits, vocab) {
			b.Fatal("declined")
		}
		if _, ok, err := s.SampleTop(ids, logits, vocab); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
