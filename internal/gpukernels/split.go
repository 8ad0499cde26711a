package gpukernels

// Attention splits (flash-decoding; 30_attention.qk): a chunk with few
// (token, head) groups and a long context leaves most of a GPU idle while
// each group walks every key alone, so each group's keys are cut into runs,
// one group each, merged by attention_merge. Runs are never shorter than
// AttnSplitRunKeys keys (two steps of each simdgroup), their number is a
// power of two (the grid changes seldom, so recorded command graphs replay)
// and at most AttnSplitMax.
const (
	AttnSplitMinKeys = 128
	AttnSplitRunKeys = 64
	AttnSplitMax     = 32
)

// AttnKeys is the number of keys the last token of a chunk of T tokens at
// positions pos.. attends to: pos+T, or at most window on a sliding layer
// (window > 0). It bounds every token's keys, so a split's runs of
// ceil(AttnKeys/n) keys cover them all.
func AttnKeys(pos, T, window int) int {
	if window > 0 {
		return min(pos+T, window)
	}
	return pos + T
}

// AttnSplits is the number of runs for a chunk of T tokens of heads heads
// whose last token sees maxKeys keys, on a GPU that wants about busy groups
// in flight: 1 (no split) when the chunk has that many groups already or
// the context is short.
func AttnSplits(T, heads, maxKeys, busy int) int {
	groups := T * heads
	if groups >= busy || maxKeys < AttnSplitMinKeys {
		return 1
	}
	n := 1
	for n < AttnSplitMax && n*AttnSplitRunKeys < maxKeys && groups*n < 4*busy {
		n *= 2
	}
	return n
}
