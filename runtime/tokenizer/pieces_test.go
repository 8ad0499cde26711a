package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// pieceSpec builds a small ▁-style tokenizer.json: <unk> = 0, the byte
// tokens <0x00>..<0xFF> = 1..256, then the tokens below in order, the merges
// that make them, and the added token <s> (special).
type pieceSpec struct {
	normalizer, pre, decoder string // raw JSON
	model                    string // extra model fields
	added                    string // raw added_tokens, "" for the default
}

var pieceTokens = []string{"▁", "h", "e", "l", "o", "a", "b", "he", "ll", "llo", "hello", "▁hello", "▁a", "ab", "▁ab"}

var pieceMerges = [][2]string{{"h", "e"}, {"l", "l"}, {"ll", "o"}, {"he", "llo"}, {"▁", "hello"}, {"▁", "a"}, {"a", "b"}, {"▁a", "b"}}

const (
	gemmaNorm    = `{"type":"Replace","pattern":{"String":" "},"content":"▁"}`
	gemmaPre     = `{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithPrevious","invert":false}`
	gemmaDecoder = `{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"}]}`
)

func (s pieceSpec) json() []byte {
	vocab := map[string]int{"<unk>": 0}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = 1 + b
	}
	for i, tok := range pieceTokens {
		vocab[tok] = 257 + i
	}
	vj, _ := json.Marshal(vocab)
	mj, _ := json.Marshal(pieceMerges)
	orNull := func(s string) string {
		if s == "" {
			return "null"
		}
		return s
	}
	added := s.added
	if added == "" {
		added = `[{"id":300,"content":"<s>","special":true}]`
	}
	return fmt.Appendf(nil, `{"added_tokens":%s,"normalizer":%s,"pre_tokenizer":%s,"decoder":%s,"model":{"type":"BPE","unk_token":"<unk>","fuse_unk":true,"byte_fallback":true,%s"vocab":%s,"merges":%s}}`,
		added, orNull(s.normalizer), orNull(s.pre), orNull(s.decoder), s.model, vj, mj)
}

func (s pieceSpec) parse(t *testing.T) *Tokenizer {
	t.Helper()
	tok, err := Parse("pieces.json", s.json())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// ids maps token strings to ids.
func (pieceSpec) ids(t *testing.T, tok *Tokenizer, toks ...string) []int {
	t.Helper()
	var out []int
	for _, s := range toks {
		id, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		out = append(out, id)
	}
	return out
}

func TestGemmaStylePieces(t *testing.T) {
	spec := pieceSpec{normalizer: gemmaNorm, pre: gemmaPre, decoder: gemmaDecoder}
	tok := spec.parse(t)
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"hello", []string{"hello"}},
		{" hello ab", []string{"▁hello", "▁ab"}},
		{"é", []string{"<0xC3>", "<0xA9>"}},
		{"a<s>  b", []string{"a", "<s>", "▁", "▁", "b"}},
		{"z", []string{"<0x7A>"}},
	} {
		if got, want := tok.Encode(c.in), spec.ids(t, tok, c.want...); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v %v", c.in, got, c.want, want)
		}
	}
	for _, s := range []string{"hello world", "  x  ", "中文 é 😀", "\xff\xfe", "a<s>b"} {
		if got, want := tok.Decode(tok.Encode(s), false), toValidUTF8(s); got != want {
			t.Errorf("round trip %q: %q", s, got)
		}
	}
	bad := spec.ids(t, tok, "<0xE4>", "<0xB8>", "<0xAD>", "<0xFF>")
	if got := tok.Decode(bad, false); got != strings.Repeat("\uFFFD", 4) {
		t.Errorf("invalid byte run: %q, want one U+FFFD per byte", got)
	}
	// The stream decoder holds a byte run until it ends.
	d := tok.NewStreamDecoder(true)
	var out []string
	for _, id := range spec.ids(t, tok, "<0xE4>", "<0xB8>", "<s>", "<0xAD>", "▁hello") {
		out = append(out, d.Add(id))
		if out[len(out)-1] == "" && d.Pending() == 0 && len(out) < 5 {
			t.Errorf("byte run not held at step %d", len(out))
		}
	}
	out = append(out, d.Flush())
	if want := []string{"", "", "", "", "中 hello", ""}; !slices.Equal(out, want) {
		t.Errorf("stream %q, want %q", out, want)
	}
	if got := string(tok.TokenBytes(spec.ids(t, tok, "<0x41>")[0])); got != "A" {
		t.Errorf("TokenBytes(<0x41>) = %q", got)
	}
}

func TestLlamaStylePieces(t *testing.T) {
	spec := pieceSpec{
		normalizer: `{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},` + gemmaNorm + `]}`,
		decoder:    `{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}`,
	}
	tok := spec.parse(t)
	// Prepend applies to each stretch between added tokens.
	if got, want := tok.Encode("hello<s>ab"), spec.ids(t, tok, "▁hello", "<s>", "▁ab"); !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	ids := spec.ids(t, tok, "▁", "▁hello", "▁ab")
	if got := tok.Decode(ids, false); got != " hello ab" {
		t.Errorf("Decode = %q: the Strip removes one leading space", got)
	}
	if got := streamDecode(tok, ids, false); got != " hello ab" {
		t.Errorf("stream = %q", got)
	}
}

func TestMetaspacePieces(t *testing.T) {
	pre := func(scheme string, split bool) string {
		return fmt.Sprintf(`{"type":"Metaspace","replacement":"▁","prepend_scheme":%q,"split":%v}`, scheme, split)
	}
	first := pieceSpec{pre: pre("first", true), decoder: `{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true}`}
	tok := first.parse(t)
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"hello ab", []string{"▁hello", "▁ab"}},
		{"<s>hello", []string{"<s>", "hello"}}, // first: only at the start of the input
		{"ab  ab", []string{"▁ab", "▁", "▁ab"}},
	} {
		if got, want := tok.Encode(c.in), first.ids(t, tok, c.want...); !slices.Equal(got, want) {
			t.Errorf("first: Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	// The Metaspace decoder drops every ▁ of the first token.
	if got := tok.Decode(first.ids(t, tok, "▁", "▁hello"), false); got != " hello" {
		t.Errorf("Decode = %q", got)
	}
	always := pieceSpec{pre: pre("always", false), decoder: gemmaDecoder}
	tok = always.parse(t)
	if got, want := tok.Encode("<s>hello"), always.ids(t, tok, "<s>", "▁hello"); !slices.Equal(got, want) {
		t.Errorf("always: Encode = %v, want %v", got, want)
	}
	if got, want := tok.Encode("ab ab"), always.ids(t, tok, "▁ab", "▁ab"); !slices.Equal(got, want) {
		t.Errorf("always, no split: Encode = %v, want %v (one piece, merged by BPE)", got, want)
	}
}

func TestPieceLoadErrors(t *testing.T) {
	base := pieceSpec{normalizer: gemmaNorm, pre: gemmaPre, decoder: gemmaDecoder}
	dec := func(d string) pieceSpec { s := base; s.decoder = d; return s }
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"missing byte token", []byte(strings.Replace(string(base.json()), `"\u003c0x7F\u003e":128`, `"q":128`, 1)), `no "<0x7F>"`},
		{"replace regex", pieceSpec{normalizer: `{"type":"Replace","pattern":{"Regex":" +"},"content":"▁"}`, decoder: gemmaDecoder}.json(), "Regex pattern is not supported"},
		{"replace no content", pieceSpec{normalizer: `{"type":"Replace","pattern":{"String":" "}}`, decoder: gemmaDecoder}.json(), "without content"},
		{"metaspace scheme", pieceSpec{pre: `{"type":"Metaspace","replacement":"▁","prepend_scheme":"sometimes"}`, decoder: gemmaDecoder}.json(), "prepend_scheme"},
		{"metaspace repl", pieceSpec{pre: `{"type":"Metaspace","replacement":"__"}`, decoder: gemmaDecoder}.json(), "not one character"},
		{"metaspace after removed", pieceSpec{pre: `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"String":"x"},"behavior":"Removed"},{"type":"Metaspace","prepend_scheme":"first"}]}`, decoder: gemmaDecoder}.json(), "Removed"},
		{"replace after fuse", dec(`{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Replace","pattern":{"String":"▁"},"content":" "}]}`).json(), "after ByteFallback or Fuse"},
		{"strip stop", dec(`{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Strip","content":" ","start":0,"stop":1}]}`).json(), "stop 1 after Fuse"},
		{"two byte fallbacks", dec(`{"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"ByteFallback"}]}`).json(), "ByteFallback after"},
		{"strip content", dec(`{"type":"Strip","content":"ab","start":1}`).json(), "one character"},
		{"wordpiece in seq", dec(`{"type":"Sequence","decoders":[{"type":"WordPiece"}]}`).json(), `"WordPiece" is not supported`},
		{"ctc", dec(`{"type":"CTC"}`).json(), `"CTC" is not supported`},
		{"normalized added", pieceSpec{normalizer: gemmaNorm, decoder: gemmaDecoder, added: `[{"id":300,"content":"<s>","normalized":true}]`}.json(), "normalized true"},
	}
	if _, err := Parse("good.json", base.json()); err != nil {
		t.Fatalf("the base case fails: %v", err)
	}
	for _, c := range cases {
		_, err := Parse("bad.json", c.data)
		if err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want the file name and %q", c.name, err, c.want)
		}
	}
}
