package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkEncode encodes the check corpus with the Qwen tokenizer, with the
// BPE cache emptied before every pass (cold) and left filled (warm), and
// reports throughput and the cold/warm time ratio measured in the same run.
func BenchmarkEncode(b *testing.B) {
	tok, _ := qwenTokenizer(b)
	text := strings.Join(readJSONL[string](b, filepath.Join(tokcheckDir, "corpus.jsonl")), "\n")
	pass := func(cold bool) time.Duration {
		var d time.Duration
		for range b.N {
			if cold {
				tok.cache.mu.Lock()
				clear(tok.cache.m)
				tok.cache.mu.Unlock()
			}
			start := time.Now()
			tok.Encode(text)
			d += time.Since(start)
		}
		return d
	}
	b.ResetTimer()
	cold := pass(true)
	warm := pass(false)
	b.ReportMetric(float64(len(text))*float64(b.N)/cold.Seconds()/1e6, "cold-MB/s")
	b.ReportMetric(float64(len(text))*float64(b.N)/warm.Seconds()/1e6, "warm-MB/s")
	b.ReportMetric(float64(cold)/float64(warm), "cold/warm")
}
