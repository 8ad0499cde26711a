package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// FuzzLoad: Parse never panics on arbitrary bytes, and a tokenizer it
// accepts encodes and decodes without panicking, producing known ids and
// valid UTF-8.
func FuzzLoad(f *testing.F) {
	f.Add(tinySpec{extra: []string{"ab"}, merges: [][2]string{{"a", "b"}}}.json())
	f.Add(tinySpec{extra: []string{"ab", "abc"}, merges: [][2]string{{"a", "b"}, {"ab", "c"}}, pairs: true,
		added: `[{"id":300,"content":"<s>","special":true,"lstrip":true}]`, pre: `{"type":"ByteLevel","add_prefix_space":true}`,
		normalizer: `{"type":"Sequence","normalizers":[{"type":"NFKC"}]}`}.json())
	f.Add([]byte(`{"model":{"vocab":{"a":0},"merges":[]},"decoder":{"type":"ByteLevel"}}`))
	f.Add(pieceSpec{normalizer: gemmaNorm, pre: gemmaPre, decoder: gemmaDecoder}.json())
	f.Add(pieceSpec{pre: `{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true}`,
		decoder: `{"type":"Sequence","decoders":[{"type":"Metaspace","prepend_scheme":"first"},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":2,"stop":0}]}`}.json())
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse("fuzz.json", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.json") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, s := range []string{"", "ab c", "héllo <s> 12\n\n", "\xff\xfe", strings.Repeat("ab", 50)} {
			ids := tok.Encode(s)
			for _, id := range ids {
				if !tok.Known(id) {
					t.Fatalf("Encode(%q) gave unknown id %d", s, id)
				}
			}
			if out := tok.Decode(ids, false); !utf8.ValidString(out) {
				t.Fatalf("Decode gave invalid UTF-8 %q", out)
			}
		}
	})
}

// FuzzEncode: on a cut-down Qwen tokenizer, decoding the ordinary encoding
// gives back the NFC form of the (UTF-8-repaired) input, Encode with added
// tokens round-trips too, and the stream decoder agrees with Decode.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"hello world", "<|im_start|>user\nhi<|im_end|>", "e\u0301 ñ 中文 😀", "\xf0\x9f", "  \n\n\t x  ", "it's 12345"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		tok := smallQwenTokenizer(t)
		want := norm.NFC.String(toValidUTF8(s))
		ids := tok.EncodeOrdinary(s)
		if got := tok.Decode(ids, false); got != want {
			t.Fatalf("Decode(EncodeOrdinary(%q)) = %q, want %q", s, got, want)
		}
		ids = tok.Encode(s)
		full := tok.Decode(ids, false)
		if !strings.Contains(s, "<") && full != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, full, want)
		}
		d := tok.NewStreamDecoder(false)
		var sb strings.Builder
		for _, id := range ids {
			sb.WriteString(d.Add(id))
		}
		sb.WriteString(d.Flush())
		if sb.String() != full {
			t.Fatalf("stream %q != Decode %q", sb.String(), full)
		}
		// Encoding is deterministic (and the cache returns what was computed).
		if again := tok.Encode(s); !slices.Equal(again, ids) {
			t.Fatalf("Encode not deterministic for %q", s)
		}
	})
}
