package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestAppendLossy(t *testing.T) {
	const R = "\uFFFD"
	// Expectations follow the maximal-subpart rule (Unicode ch. 3, "U+FFFD
	// substitution of maximal subparts"), worked out by hand.
	cases := []struct{ in, want string }{
		{"abc", "abc"},
		{"\xe2\x82\xac", "€"},
		{"\xe2\x82", R},        // truncated 3-byte sequence: one U+FFFD
		{"\xe2\x82A", R + "A"}, // broken by an ASCII byte
		{"\xe2\x82\xe2\x82\xac", R + "€"},
		{"\xff", R},
		{"\xc0\xaf", R + R},         // C0 can never start a sequence
		{"\xed\xa0\x80", R + R + R}, // surrogate: ED then A0 out of range
		{"\xf4\x90\x80\x80", R + R + R + R},
		{"\xf0\x9f\x98", R},
		{"\xf0\x9f\x98\x80", "😀"},
		{"\x80\x80", R + R},
		{"\xe0\x80", R + R}, // E0 needs A0..BF second
	}
	for _, c := range cases {
		got, n := appendLossy(nil, []byte(c.in), true)
		if string(got) != c.want || n != len(c.in) {
			t.Errorf("appendLossy(%q, final) = %q, %d; want %q, %d", c.in, got, n, c.want, len(c.in))
		}
	}
	// Not final: an incomplete tail is held back; a broken one is not.
	for _, c := range []struct {
		in, want string
		n        int
	}{
		{"a\xf0\x9f\x98", "a", 1},
		{"a\xe2", "a", 1},
		{"a\xe2\x41", "a" + R + "A", 3},
		{"\xf0\x9f\x98\x80\xc3", "😀", 4},
		{"\xc3\xa9", "é", 2},
	} {
		got, n := appendLossy(nil, []byte(c.in), false)
		if string(got) != c.want || n != c.n {
			t.Errorf("appendLossy(%q) = %q, %d; want %q, %d", c.in, got, n, c.want, c.n)
		}
	}
}

// The stream decoder over single-byte tokens: a 4-byte emoji fed one byte at
// a time comes out only when complete.
func TestStreamDecoderHoldsIncomplete(t *testing.T) {
	tok := mustParse(t, tinySpec{})
	d := tok.NewStreamDecoder(false)
	var outs []string
	for _, b := range []byte("a😀b") {
		outs = append(outs, d.Add(int(b)))
	}
	if want := []string{"a", "", "", "", "😀", "b"}; !slices.Equal(outs, want) {
		t.Errorf("outputs %q, want %q", outs, want)
	}
	// A broken sequence comes out as U+FFFD once it can no longer complete.
	d.Add(0xe2)
	if d.Pending() != 1 {
		t.Errorf("pending %d", d.Pending())
	}
	if got := d.Add('x'); got != "\uFFFDx" {
		t.Errorf("got %q", got)
	}
	d.Add(0xf0)
	d.Add(0x9f)
	if got := d.Flush(); got != "\uFFFD" {
		t.Errorf("Flush = %q", got)
	}
	if d.Pending() != 0 || d.Flush() != "" {
		t.Error("Flush did not empty the decoder")
	}
}

func TestStreamDecoderSkipSpecial(t *testing.T) {
	tok := mustParse(t, tinySpec{added: `[{"id":256,"content":"<s>","special":true},{"id":257,"content":"<t>"}]`})
	ids := []int{'a', 256, 257, 'b'}
	for _, skip := range []bool{false, true} {
		d := tok.NewStreamDecoder(skip)
		var sb strings.Builder
		for _, id := range ids {
			sb.WriteString(d.Add(id))
		}
		sb.WriteString(d.Flush())
		if want := tok.Decode(ids, skip); sb.String() != want {
			t.Errorf("skip=%v: stream %q, Decode %q", skip, sb.String(), want)
		}
	}
	if got := tok.Decode(ids, true); got != "a<t>b" {
		t.Errorf("Decode skip = %q", got)
	}
}

// Random byte tokens: the streamed text always equals Decode, and every
// chunk is valid UTF-8.
func TestStreamEqualsDecodeRandom(t *testing.T) {
	tok := mustParse(t, tinySpec{})
	rng := rand.New(rand.NewPCG(1, 2))
	pool := []byte("ab\x80\xbf\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xed\xa0\xff\xc0")
	for range 2000 {
		ids := make([]int, rng.IntN(12))
		for i := range ids {
			ids[i] = int(pool[rng.IntN(len(pool))])
		}
		d := tok.NewStreamDecoder(false)
		var sb strings.Builder
		for _, id := range ids {
			chunk := d.Add(id)
			if !utf8.ValidString(chunk) {
				t.Fatalf("invalid chunk %q", chunk)
			}
			sb.WriteString(chunk)
		}
		sb.WriteString(d.Flush())
		if want := tok.Decode(ids, false); sb.String() != want {
			t.Fatalf("ids %v: stream %q, Decode %q", ids, sb.String(), want)
		}
	}
}

// naiveRankBPE is the tiktoken rule written independently of merge(): merge
// the adjacent pair whose concatenation has the lowest rank until none is a
// token. It works on raw bytes with the tiktoken ranks.
func naiveRankBPE(rank map[string]int, piece []byte) []int {
	parts := make([]string, len(piece))
	for i := range piece {
		parts[i] = string(piece[i : i+1])
	}
	for {
		best, bestRank := -1, 0
		for i := 0; i+1 < len(parts); i++ {
			if r, ok := rank[parts[i]+parts[i+1]]; ok && (best < 0 || r < bestRank) {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		parts[best] += parts[best+1]
		parts = slices.Delete(parts, best+1, best+2)
	}
	ids := make([]int, len(parts))
	for i, p := range parts {
		ids[i] = rank[p]
	}
	return ids
}

// TestQwenMergeMatchesRankRule checks the heap-based merge (which follows the
// merges list) against the naive rank rule on random text.
func TestQwenMergeMatchesRankRule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the full Qwen vocabulary")
	}
	tok, _ := qwenTokenizer(t)
	rank := map[string]int{}
	for id := 0; id < 151643; id++ {
		rank[string(tok.TokenBytes(id))] = id
	}
	re, err := compileSplit(QwenPattern)
	if err != nil {
		t.Fatal(err)
	}
	alphabet := []rune("aaaeeeiinnorsstt  \n\t.,'0123-_ABCTHéüß中文的是한국😀🙂\u0301")
	rng := rand.New(rand.NewPCG(7, 11))
	pieces := 0
	for range 3000 {
		n := 1 + rng.IntN(40)
		rs := make([]rune, n)
		for i := range rs {
			rs[i] = alphabet[rng.IntN(len(alphabet))]
		}
		text := norm.NFC.String(string(rs))
		var want []int
		for _, p := range splitRegex(re, text, isolated, nil) {
			want = append(want, naiveRankBPE(rank, []byte(p))...)
			pieces++
		}
		if got := tok.EncodeOrdinary(text); !slices.Equal(got, want) {
			t.Fatalf("%q: merge %v, rank rule %v", text, got, want)
		}
	}
	// Long pieces exercise the heap (no cache beyond 256 bytes).
	long := strings.Repeat("ab", 700) + strings.Repeat("中", 300)
	for _, p := range splitRegex(re, long, isolated, nil) {
		if got, want := tok.EncodeOrdinary(p), naiveRankBPE(rank, []byte(p)); !slices.Equal(got, want) {
			t.Fatalf("long piece: %d ids vs %d", len(got), len(want))
		}
	}
	t.Logf("%d random pieces agree", pieces)
}

// Encode from several goroutines gives the same ids as one at a time (the
// BPE cache and the regex are shared).
func TestConcurrentEncode(t *testing.T) {
	tok := smallQwenTokenizer(t)
	texts := []string{"hello world", "中文 text 12345", "  spaces  \n\n", "<|im_start|>user\nhi<|im_end|>", "ünïcödé 😀"}
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s)
	}
	errs := make(chan string, 8)
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for r := range 200 {
				i := (g + r) % len(texts)
				if got := tok.Encode(texts[i]); !slices.Equal(got, want[i]) {
					errs <- texts[i]
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode(%q) differs", s)
	}
}
