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

// The tiled attention (31_attention_tile.qk): query rows per group
// (QK_AT_ROWS), the largest head and value dims (QK_AT_MAXD), and the
// shortest chunk that takes it.
const (
	AttnTileRows      = 16
	AttnTileMaxDim    = 256
	AttnTileMinTokens = 4
)

// AttnTiled reports whether a chunk of T tokens with head dim hd and value
// dim vd, not split (AttnSplits 1), runs attention_tile (each block of keys
// and values shared by AttnTileRows query rows of a KV head) instead of
// attention (a group per token and head, each reading its keys alone).
func AttnTiled(T, hd, vd int) bool {
	return T >= AttnTileMinTokens && hd <= AttnTileMaxDim && vd <= AttnTileMaxDim
}

// AttnTileGroups is attention_tile's grid: a group per AttnTileRows of each
// KV head's (token, query head) pairs.
func AttnTileGroups(T, heads, kvheads int) int {
	return kvheads * ((T*(heads/kvheads) + AttnTileRows - 1) / AttnTileRows)
}

// The attention with a KV head's query heads scored together
// (32_attention_gqa.qk): at most AttnGQAMaxHeads query heads a KV head,
// head and value dims at most AttnGQAMaxDim. Its groups are (token, KV
// head, run): a decode step at the 35B's dims has 2 of them unsplit, so it
// splits further than the per-head kernel, into runs of at least
// AttnGQARunKeys keys (a chunk of its scores: each of the 8 simdgroups
// scores 4 keys at a time), at most AttnGQASplitMax of them.
const (
	AttnGQAMaxHeads = 8
	AttnGQAMaxDim   = 256
	AttnGQARunKeys  = 32
	AttnGQASplitMax = 128
)

// AttnGQA reports whether attention_gqa takes a chunk of T tokens of heads
// query heads over kvheads KV heads of head dim hd and value dim vd: chunks
// too short for attention_tile (AttnTileMinTokens: decode), dims it holds.
func AttnGQA(T, heads, kvheads, hd, vd int) bool {
	return T >= 1 && T < AttnTileMinTokens && kvheads >= 1 && heads >= kvheads && heads%kvheads == 0 && heads/kvheads <= AttnGQAMaxHeads &&
		hd >= 1 && hd <= AttnGQAMaxDim && vd >= 1 && vd <= AttnGQAMaxDim
}

// AttnGQASplits is AttnSplits for attention_gqa: runs of a chunk of T
// tokens over kvheads KV heads whose last token sees maxKeys keys, until
// the chunk has about busy groups or the runs reach AttnGQARunKeys keys.
func AttnGQASplits(T, kvheads, maxKeys, busy int) int {
	groups := T * kvheads
	n := 1
	for n < AttnGQASplitMax && n*AttnGQARunKeys < maxKeys && groups*n < busy {
		n *= 2
	}
	return n
}
