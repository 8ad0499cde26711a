package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

var gemmaStyleOnce struct {
	sync.Once
	tok *Tokenizer
	err error
}

// FuzzEncodePieces: on a small Gemma-style tokenizer (Replace normalizer,
// byte fallback, Replace/ByteFallback/Fuse decoder) every input round-trips
// through Encode and EncodeOrdinary to its UTF-8-repaired self (▁ read as a
// space), and the
// stream decoder agrees with Decode, with and without special tokens.
func FuzzEncodePieces(f *testing.F) {
	for _, s := range []string{"hello ab", "<s> hello<s>", "  \u2581 é 中文 😀", "\xe4\xb8", "\xff ab", strings.Repeat("ab ", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		gemmaStyleOnce.Do(func() {
			gemmaStyleOnce.tok, gemmaStyleOnce.err = Parse("gemma-style.json", pieceSpec{normalizer: gemmaNorm, pre: gemmaPre, decoder: gemmaDecoder}.json())
		})
		tok := gemmaStyleOnce.tok
		if gemmaStyleOnce.err != nil {
			t.Fatal(gemmaStyleOnce.err)
		}
		// A ▁ written in the input decodes as a space, as with tokenizers.
		want := strings.ReplaceAll(toValidUTF8(s), "\u2581", " ")
		for _, ids := range [][]int{tok.EncodeOrdinary(s), tok.Encode(s)} {
			for _, id := range ids {
				if !tok.Known(id) {
					t.Fatalf("unknown id %d for %q", id, s)
				}
			}
			if got := tok.Decode(ids, false); got != want {
				t.Fatalf("Decode(Encode(%q)) = %q", s, got)
			}
			for _, skip := range []bool{false, true} {
				if got, w := streamDecode(tok, ids, skip), tok.Decode(ids, skip); got != w {
					t.Fatalf("stream %q != Decode %q (skip %v)", got, w, skip)
				}
			}
			if again := tok.EncodeOrdinary(s); !slices.Equal(again, tok.EncodeOrdinary(s)) {
				t.Fatalf("not deterministic for %q", s)
			}
		}
	})
}
