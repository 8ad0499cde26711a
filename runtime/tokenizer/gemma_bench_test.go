package tokenizer

import (
	"strings"
	"testing"
)

// go test -run XXX -bench Gemma4 ./runtime/tokenizer (needs ../shared/refdata)

func BenchmarkGemma4Parse(b *testing.B) {
	raw, _ := gemmaJSON(b)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Parse("gemma4/tokenizer.json", raw); err != nil {
			b.Fatal(err)
		}
	}
}

// Encoding 4 KB of English prose: Gemma's pre-tokenizer leaves it one piece.
func BenchmarkGemma4Encode4KB(b *testing.B) {
	_, tok := gemmaJSON(b)
	para := "The quick brown fox jumps over the lazy dog, and then it runs far away into the hills. "
	text := strings.Repeat(para, 4096/len(para)+1)[:4096]
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.cache = newCache() // measure the merges, not the piece cache
		tok.Encode(text)
	}
}
