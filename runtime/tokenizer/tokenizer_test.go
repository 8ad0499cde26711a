package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// tinyJSON builds a tokenizer.json whose vocab holds the 256 byte-level
// symbols (id = byte value) followed by extra tokens (ids 256, 257, ...) and
// the given merges. extra tokens are written in plain text and byte-level
// encoded here; merges are written as "a b" strings unless pairs is set.
type tinySpec struct {
	extra      []string
	merges     [][2]string
	pairs      bool
	added      string // raw JSON array, "" for none
	normalizer string // raw JSON, "" for null
	pre        string // raw JSON, "" for the Qwen-style Split + ByteLevel
	model      string // extra raw model fields, e.g. `"ignore_merges":true,`
}

func (s tinySpec) json() []byte {
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
	}
	for i, e := range s.extra {
		vocab[byteLevelEncode(e)] = 256 + i
	}
	var merges []any
	for _, m := range s.merges {
		a, b := byteLevelEncode(m[0]), byteLevelEncode(m[1])
		if s.pairs {
			merges = append(merges, []string{a, b})
		} else {
			merges = append(merges, a+" "+b)
		}
	}
	vj, _ := json.Marshal(vocab)
	mj, _ := json.Marshal(merges)
	added := s.added
	if added == "" {
		added = "[]"
	}
	normalizer := s.normalizer
	if normalizer == "" {
		normalizer = "null"
	}
	pre := s.pre
	if pre == "" {
		pre = fmt.Sprintf(`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":%q},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]}`, QwenPattern)
	}
	return fmt.Appendf(nil, `{"version":"1.0","added_tokens":%s,"normalizer":%s,"pre_tokenizer":%s,"decoder":{"type":"ByteLevel"},"model":{"type":"BPE",%s"vocab":%s,"merges":%s}}`,
		added, normalizer, pre, s.model, vj, mj)
}

func mustParse(t *testing.T, s tinySpec) *Tokenizer {
	t.Helper()
	tok, err := Parse("tiny.json", s.json())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestByteLevelAlphabet(t *testing.T) {
	// Known points of the GPT-2 table: space -> U+0120 'Ġ', newline -> U+010A 'Ċ',
	// '!' -> itself, 0x00 -> U+0100, 0xAD (soft hyphen) -> U+0143 'Ń', 0xFF -> 'ÿ'.
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', '!': '!', 0: 'Ā', 0xAD: 'Ń', 0xFF: 'ÿ', 0x7F: 'ġ', 0xA0: 'ł'} {
		if got := byteToRune[b]; got != want {
			t.Errorf("byte %#x -> %U, want %U", b, got, want)
		}
	}
	if len(runeToByte) != 256 {
		t.Fatalf("inverse map has %d entries", len(runeToByte))
	}
	if got := byteLevelEncode("a b\n"); got != "aĠbĊ" {
		t.Errorf("byteLevelEncode = %q", got)
	}
	if got := string(byteLevelDecode("aĠbĊ")); got != "a b\n" {
		t.Errorf("byteLevelDecode = %q", got)
	}
	// A rune outside the alphabet makes the whole token decode as its UTF-8.
	if got := string(byteLevelDecode("Ġ€")); got != "Ġ€" {
		t.Errorf("byteLevelDecode outside alphabet = %q", got)
	}
}

func TestMergePriority(t *testing.T) {
	// "abc" with merges ab (rank 0) then bc: a+b wins -> [ab, c].
	tok := mustParse(t, tinySpec{extra: []string{"ab", "bc"}, merges: [][2]string{{"a", "b"}, {"b", "c"}}})
	if got := tok.Encode("abc"); !slices.Equal(got, []int{256, 'c'}) {
		t.Errorf("ab first: %v", got)
	}
	// Same with the ranks swapped -> [a, bc].
	tok = mustParse(t, tinySpec{extra: []string{"ab", "bc"}, merges: [][2]string{{"b", "c"}, {"a", "b"}}, pairs: true})
	if got := tok.Encode("abc"); !slices.Equal(got, []int{'a', 257}) {
		t.Errorf("bc first: %v", got)
	}
	// Equal ranks: the leftmost pair merges first: "aaa" -> [aa, a]; "aaaa" -> [aa, aa].
	tok = mustParse(t, tinySpec{extra: []string{"aa", "aaaa"}, merges: [][2]string{{"a", "a"}, {"aa", "aa"}}})
	if got := tok.Encode("aaa"); !slices.Equal(got, []int{256, 'a'}) {
		t.Errorf("aaa: %v", got)
	}
	if got := tok.Encode("aaaaa"); !slices.Equal(got, []int{257, 'a'}) {
		t.Errorf("aaaaa: %v", got)
	}
	// A chain: h e -> he, l l -> ll, he ll -> hell, hell o -> hello; a space
	// joins the next word through the regex " ?..." piece.
	tok = mustParse(t, tinySpec{
		extra:  []string{"he", "ll", "hell", "hello", " w", " wo"},
		merges: [][2]string{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {" w", "o"}},
	})
	if got := tok.Encode("hello world"); !slices.Equal(got, []int{259, 261, 'r', 'l', 'd'}) {
		t.Errorf("hello world: %v", got)
	}
	if got := tok.Decode([]int{259, 261, 'r', 'l', 'd'}, false); got != "hello world" {
		t.Errorf("decode: %q", got)
	}
}

func TestIgnoreMergesAndUnk(t *testing.T) {
	// ignore_merges: a piece that is itself a token is used whole, even
	// without a merge path to it.
	spec := tinySpec{extra: []string{"xyz"}, model: `"ignore_merges":true,`}
	if got := mustParse(t, spec).Encode("xyz"); !slices.Equal(got, []int{256}) {
		t.Errorf("ignore_merges: %v", got)
	}
	spec.model = ""
	if got := mustParse(t, spec).Encode("xyz"); !slices.Equal(got, []int{'x', 'y', 'z'}) {
		t.Errorf("without ignore_merges: %v", got)
	}
	// Runes missing from the vocab: with no ByteLevel step "€" is looked up
	// as itself ("€" is not in the byte-level alphabet). Without unk it is dropped; with unk (fused) it becomes one unk.
	noBL := `{"type":"Split","pattern":{"String":" "},"behavior":"Removed","invert":false}`
	spec = tinySpec{extra: []string{"<unk>"}, pre: noBL}
	if got := mustParse(t, spec).Encode("a€€ b"); !slices.Equal(got, []int{'a', 'b'}) {
		t.Errorf("no unk: %v", got)
	}
	spec.model = `"unk_token":"<unk>","fuse_unk":true,`
	if got := mustParse(t, spec).Encode("a€€ b"); !slices.Equal(got, []int{'a', 256, 'b'}) {
		t.Errorf("fused unk: %v", got)
	}
	spec.model = `"unk_token":"<unk>",`
	if got := mustParse(t, spec).Encode("a€€"); !slices.Equal(got, []int{'a', 256, 256}) {
		t.Errorf("unfused unk: %v", got)
	}
}

func TestAddedTokens(t *testing.T) {
	added := `[{"id":300,"content":"<a>","special":true},{"id":301,"content":"<a>b","special":false},
	{"id":302,"content":"[L]","lstrip":true},{"id":303,"content":"[R]","rstrip":true},{"id":304,"content":"ünï"}]`
	tok := mustParse(t, tinySpec{extra: []string{"ab"}, merges: [][2]string{{"a", "b"}}, added: added})
	cases := []struct {
		in   string
		want []int
	}{
		{"<a>", []int{300}},
		{"<a>bc", []int{301, 'c'}},       // longest match first
		{"x<a>ab", []int{'x', 300, 256}}, // "<a>a" is no token: <a> then "ab"
		{"<<a>>", []int{'<', 300, '>'}},
		{"a  [L]b", []int{'a', 302, 'b'}},    // lstrip eats the spaces before
		{"a[R]  \n b", []int{'a', 303, 'b'}}, // rstrip eats the whitespace after
		{"ünï", []int{304}},
		{"<a", []int{'<', 'a'}},
	}
	for _, c := range cases {
		if got := tok.Encode(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	// EncodeOrdinary treats them as text.
	if got := tok.EncodeOrdinary("<a>"); !slices.Equal(got, []int{'<', 'a', '>'}) {
		t.Errorf("EncodeOrdinary = %v", got)
	}
	if got := tok.Decode([]int{'x', 300, 301, 304}, false); got != "x<a><a>bünï" {
		t.Errorf("Decode = %q", got)
	}
	if got := tok.Decode([]int{'x', 300, 301, 304}, true); got != "x<a>bünï" {
		t.Errorf("Decode skip special = %q", got)
	}
	if !tok.IsSpecial(300) || tok.IsSpecial(301) || tok.IsSpecial('a') || tok.IsSpecial(-1) || tok.IsSpecial(1<<30) {
		t.Error("IsSpecial")
	}
	if id, ok := tok.TokenID("[R]"); !ok || id != 303 {
		t.Errorf("TokenID([R]) = %d %v", id, ok)
	}
	if id, ok := tok.TokenID("ab"); !ok || id != 256 {
		t.Errorf("TokenID(ab) = %d %v", id, ok)
	}
	if s, ok := tok.TokenString(' '); !ok || s != "Ġ" {
		t.Errorf("TokenString(' ') = %q", s)
	}
	// Unknown ids (a gap in the id space, negative, too large) decode to nothing.
	if got := tok.Decode([]int{-1, 280, 1 << 40, 'a'}, false); got != "a" {
		t.Errorf("Decode unknown = %q", got)
	}
	if tok.NumIDs() != 305 || tok.Known(280) || !tok.Known(304) {
		t.Errorf("NumIDs %d", tok.NumIDs())
	}
	if n := len(tok.AddedTokens()); n != 5 {
		t.Errorf("AddedTokens: %d", n)
	}
}

func TestSplitBehaviors(t *testing.T) {
	re, err := compileSplit("-")
	if err != nil {
		t.Fatal(err)
	}
	// The example of the Hugging Face documentation for these behaviours.
	in := "the-final--countdown"
	for beh, want := range map[splitBehavior][]string{
		isolated:           {"the", "-", "final", "-", "-", "countdown"},
		removed:            {"the", "final", "countdown"},
		mergedWithPrevious: {"the-", "final-", "-", "countdown"},
		mergedWithNext:     {"the", "-final", "-", "-countdown"},
	} {
		if got := splitRegex(re, in, beh, nil); !slices.Equal(got, want) {
			t.Errorf("behaviour %d: %q, want %q", beh, got, want)
		}
	}
}

func TestRegexRuneOffsets(t *testing.T) {
	re, err := compileSplit(QwenPattern)
	if err != nil {
		t.Fatal(err)
	}
	// Pieces worked out by hand from the pattern's alternatives.
	in := "héllo wörld 你好!! 12\n\n  x  "
	want := []string{"héllo", " wörld", " 你好", "!!", " ", "1", "2", "\n\n", " ", " x", "  "}
	if got := splitRegex(re, in, isolated, nil); !slices.Equal(got, want) {
		t.Errorf("pieces %q\nwant   %q", got, want)
	}
	gpt2, _ := compileSplit(GPT2Pattern)
	if got := splitRegex(gpt2, "I'm  fine123 ok", isolated, nil); !slices.Equal(got, []string{"I", "'m", " ", " fine", "123", " ok"}) {
		t.Errorf("gpt2 pieces %q", got)
	}
}

func TestByteLevelPreTokenizer(t *testing.T) {
	// Plain ByteLevel with use_regex (default true) and add_prefix_space.
	spec := tinySpec{
		extra:  []string{" a", " b"},
		merges: [][2]string{{" ", "a"}, {" ", "b"}},
		pre:    `{"type":"ByteLevel","add_prefix_space":true}`,
	}
	tok := mustParse(t, spec)
	if got := tok.Encode("a b"); !slices.Equal(got, []int{256, 257}) {
		t.Errorf("prefix space: %v", got)
	}
	spec.pre = `{"type":"ByteLevel","add_prefix_space":false,"use_regex":true}`
	if got := mustParse(t, spec).Encode("a b"); !slices.Equal(got, []int{'a', 257}) {
		t.Errorf("no prefix space: %v", got)
	}
	// use_regex false: the whole text is one piece, so " a" and " b" still
	// merge but nothing splits at the space.
	spec.pre = `{"type":"ByteLevel","use_regex":false}`
	if got := mustParse(t, spec).Encode("a a"); !slices.Equal(got, []int{'a', 256}) {
		t.Errorf("no regex: %v", got)
	}
}

func TestNormalizer(t *testing.T) {
	spec := tinySpec{extra: []string{"é"}, merges: [][2]string{{"\xc3", "\xa9"}}, normalizer: `{"type":"NFC"}`}
	tok := mustParse(t, spec)
	if got := tok.Encode("e\u0301"); !slices.Equal(got, []int{256}) {
		t.Errorf("NFC: %v", got)
	}
	spec.normalizer = `{"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"NFC"}]}`
	if got := mustParse(t, spec).Encode("e\u0301"); !slices.Equal(got, []int{256}) {
		t.Errorf("Sequence NFD,NFC: %v", got)
	}
	spec.normalizer = ""
	if got := mustParse(t, spec).Encode("e\u0301"); !slices.Equal(got, []int{'e', 0xcc, 0x81}) {
		t.Errorf("no normalizer: %v", got)
	}
}

func TestInvalidUTF8Input(t *testing.T) {
	tok := mustParse(t, tinySpec{})
	// 0xFF is replaced by U+FFFD (EF BF BD) before encoding.
	if got := tok.Encode("a\xffb"); !slices.Equal(got, []int{'a', 0xef, 0xbf, 0xbd, 'b'}) {
		t.Errorf("got %v", got)
	}
}

func TestLoadErrors(t *testing.T) {
	good := string(tinySpec{extra: []string{"ab"}, merges: [][2]string{{"a", "b"}}}.json())
	cases := []struct {
		name, data, want string
	}{
		{"not json", "{", "not a valid tokenizer.json"},
		{"no model", `{"decoder":{"type":"ByteLevel"}}`, "no model"},
		{"wordpiece", strings.Replace(good, `"type":"BPE"`, `"type":"WordPiece"`, 1), "WordPiece"},
		{"dup id", strings.Replace(good, `"ab":256`, `"ab":97`, 1), "id 97 is used by both"},
		{"neg id", strings.Replace(good, `"ab":256`, `"ab":-1`, 1), "outside"},
		{"huge id", strings.Replace(good, `"ab":256`, `"ab":99999999`, 1), "outside"},
		{"merge unknown", strings.Replace(good, `"merges":["a b"]`, `"merges":["a q\u0100"]`, 1), "is not in the vocab"},
		{"merge result", strings.Replace(good, `"merges":["a b"]`, `"merges":["a c"]`, 1), `merged token "ac" is not in the vocab`},
		{"merge 3 parts", strings.Replace(good, `"merges":["a b"]`, `"merges":["a b c"]`, 1), "two tokens"},
		{"merge 1 part", strings.Replace(good, `"merges":["a b"]`, `"merges":[["a"]]`, 1), "has 1 parts"},
		{"merge number", strings.Replace(good, `"merges":["a b"]`, `"merges":[7]`, 1), "neither a string"},
		{"normalizer", strings.Replace(good, `"normalizer":null`, `"normalizer":{"type":"Lowercase"}`, 1), "normalizer"},
		{"pre", strings.Replace(good, `"type":"Split"`, `"type":"Whitespace"`, 1), "pre_tokenizer"},
		{"bad regex", strings.Replace(good, `"Regex":"`, `"Regex":"(`, 1), "Split pattern"},
		{"behavior", strings.Replace(good, `"Isolated"`, `"Contiguous"`, 1), "Contiguous"},
		{"decoder", strings.Replace(good, `"decoder":{"type":"ByteLevel"}`, `"decoder":{"type":"WordPiece"}`, 1), "decoder"},
		{"no decoder", strings.Replace(good, `"decoder":{"type":"ByteLevel"}`, `"decoder":null`, 1), "decoder"},
		{"byte fallback", strings.Replace(good, `"type":"BPE",`, `"type":"BPE","byte_fallback":true,`, 1), "byte_fallback"},
		{"unk missing", strings.Replace(good, `"type":"BPE",`, `"type":"BPE","unk_token":"<nope>",`, 1), "unk_token"},
		{"added clash", strings.Replace(good, `"added_tokens":[]`, `"added_tokens":[{"id":97,"content":"<x>"}]`, 1), "already used by"},
		{"added other id", strings.Replace(good, `"added_tokens":[]`, `"added_tokens":[{"id":300,"content":"ab"}]`, 1), "the vocab gives it id 256"},
		{"added empty", strings.Replace(good, `"added_tokens":[]`, `"added_tokens":[{"id":300,"content":""}]`, 1), "empty content"},
		{"added no id", strings.Replace(good, `"added_tokens":[]`, `"added_tokens":[{"content":"<x>"}]`, 1), "no id"},
		{"added dup", strings.Replace(good, `"added_tokens":[]`, `"added_tokens":[{"id":300,"content":"<x>"},{"id":301,"content":"<x>"}]`, 1), "already added"},
		{"empty vocab", `{"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{},"merges":[]}}`, "vocab is empty"},
	}
	if _, err := Parse("good.json", []byte(good)); err != nil {
		t.Fatalf("the base case fails: %v", err)
	}
	for _, c := range cases {
		_, err := Parse("bad.json", []byte(c.data))
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want the file name and %q", c.name, err, c.want)
		}
	}
	big := make([]byte, MaxFileSize+1)
	if _, err := Parse("big.json", big); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("oversize: %v", err)
	}
	if _, err := Load("/nonexistent/tokenizer.json"); err == nil || !strings.Contains(err.Error(), "/nonexistent/tokenizer.json") {
		t.Errorf("missing file: %v", err)
	}
}

// A pattern with catastrophic backtracking gives up after splitTimeout and
// keeps the rest of the text as one piece instead of hanging.
func TestRegexTimeout(t *testing.T) {
	old := splitTimeout
	splitTimeout = 50 * time.Millisecond
	defer func() { splitTimeout = old }()
	re, err := compileSplit(`(a+)+b`)
	if err != nil {
		t.Fatal(err)
	}
	in := strings.Repeat("a", 60) + "c"
	got := splitRegex(re, in, isolated, nil) // without the timeout this would not return
	if !slices.Equal(got, []string{in}) {
		t.Errorf("pieces %q", got)
	}
}
