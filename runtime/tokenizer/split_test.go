package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// FuzzSplitLiteral: a Split with a String pattern, done without a regex,
// gives the pieces the escaped regex gives, for every behavior (the
// seed with U+0381 is a pattern regexp2.Escape cannot make a regex of, which
// the regex path refused to load).
func FuzzSplitLiteral(f *testing.F) {
	for _, c := range [][2]string{{"a b  c ", " "}, {"▁▁x▁", "▁"}, {"aaaa", "aa"}, {"xyz", "q"}, {"é\u0301é", "\u0301"}} {
		f.Add(c[0], c[1], uint8(0))
		f.Add(c[0], c[1], uint8(2))
	}
	f.Fuzz(func(t *testing.T, s, lit string, b uint8) {
		if lit == "" || len(s) > 512 || len(lit) > 8 || !utf8.ValidString(s) || !utf8.ValidString(lit) {
			return
		}
		beh := splitBehavior(b % 4)
		got := splitLiteral(lit, s, beh, nil)
		if beh != removed && strings.Join(got, "") != s {
			t.Fatalf("split %q on %q (%d): pieces %q do not cover it", s, lit, beh, got)
		}
		re, err := compileSplit(regexp2.Escape(lit))
		if err != nil {
			return // regexp2.Escape writes some characters as a short \u escape it cannot compile
		}
		want := splitRegex(re, s, beh, nil)
		if !slices.Equal(got, want) {
			t.Fatalf("split %q on %q (%d): %q, regex %q", s, lit, beh, got, want)
		}
	})
}
