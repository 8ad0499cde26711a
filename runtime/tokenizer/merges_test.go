package tokenizer

import (
	"slices"
	"testing"
)

// A pair listed twice takes the rank of its last entry, as in tokenizers
// (models/bpe/model.rs collects the merges into a HashMap): with merges
// [a b, b c, a b], "abc" becomes [a, bc], not [ab, c].
func TestRepeatedMergeTakesLastRank(t *testing.T) {
	tok := mustParse(t, tinySpec{extra: []string{"ab", "bc"}, merges: [][2]string{{"a", "b"}, {"b", "c"}, {"a", "b"}}})
	if got := tok.Encode("abc"); !slices.Equal(got, []int{'a', 257}) {
		t.Errorf("Encode(abc) = %v, want [a bc] = [97 257]", got)
	}
}
