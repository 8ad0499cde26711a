package tokenizer

import (
	"container/heap"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/dlclark/regexp2"
)

// Tokenizer is a loaded byte-level BPE tokenizer. It is safe for concurrent use.
type Tokenizer struct {
	name string

	vocab   map[string]int // model vocab, byte-level token string -> id
	nVocab  int
	idToken []string // id -> token string (byte-level form, or added content)
	idBytes [][]byte // id -> the bytes it decodes to
	present []bool   // id -> in use
	special []bool   // id -> special added token
	count   int      // ids in use

	merges       map[uint64]mergeVal
	unkID        int
	fuseUnk      bool
	ignoreMerges bool

	added   []addedToken
	addedID map[string]int
	byFirst [256][]int // first byte -> indices into added, longest content first

	norm []normStep
	pre  []preStep

	byteFallback bool
	byteIDs      [256]int32 // byte -> id of its <0xNN> token, with byteFallback

	dec *decoder
	pt  *pieceTables // chain decoders only

	cache *bpeCache
}

// AddedToken describes one entry of tokenizer.json's added_tokens.
type AddedToken struct {
	ID      int
	Content string
	Special bool
}

type addedToken struct {
	content        string
	id             int
	lstrip, rstrip bool
	special        bool
}

type mergeVal struct {
	rank int32
	id   int32
}

func pairKey(a, b int) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

type stepKind uint8

const (
	stepSplit stepKind = iota
	stepByteLevel
	stepMetaspace
)

type splitBehavior uint8

const (
	isolated splitBehavior = iota
	removed
	mergedWithPrevious
	mergedWithNext
)

type preStep struct {
	kind           stepKind
	re             *regexp2.Regexp // Split pattern; ByteLevel: GPT-2 pattern or nil
	literal        string          // Split with a String pattern (then re is nil)
	behavior       splitBehavior
	addPrefixSpace bool
	meta           metaspace
}

func (t *Tokenizer) indexAdded() {
	for i, a := range t.added {
		c := a.content[0]
		t.byFirst[c] = append(t.byFirst[c], i)
	}
	for c := range t.byFirst {
		l := t.byFirst[c]
		sort.SliceStable(l, func(i, j int) bool { return len(t.added[l[i]].content) > len(t.added[l[j]].content) })
	}
}

// Name returns the name the tokenizer was loaded under (its file path).
func (t *Tokenizer) Name() string { return t.name }

// NumIDs returns one more than the largest id in use; ids below it may still
// be unused (see Known).
func (t *Tokenizer) NumIDs() int { return len(t.present) }

// Known reports whether id is a token of this tokenizer.
func (t *Tokenizer) Known(id int) bool { return id >= 0 && id < len(t.present) && t.present[id] }

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int) bool { return t.Known(id) && t.special[id] }

// TokenID returns the id of an added token's content or of a vocab entry
// (in its byte-level form, e.g. "Ġthe").
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	if id, ok := t.addedID[tok]; ok {
		return id, true
	}
	id, ok := t.vocab[tok]
	return id, ok
}

// TokenString returns the stored string of id: the byte-level form for a
// vocab token, the content for an added token.
func (t *Tokenizer) TokenString(id int) (string, bool) {
	if !t.Known(id) {
		return "", false
	}
	return t.idToken[id], true
}

// TokenBytes returns the bytes id decodes to (not necessarily valid UTF-8 on
// its own). The slice must not be modified.
func (t *Tokenizer) TokenBytes(id int) []byte {
	if !t.Known(id) {
		return nil
	}
	return t.idBytes[id]
}

// AddedTokens lists the added tokens in file order.
func (t *Tokenizer) AddedTokens() []AddedToken {
	out := make([]AddedToken, len(t.added))
	for i, a := range t.added {
		out[i] = AddedToken{ID: a.id, Content: a.content, Special: a.special}
	}
	return out
}

// Encode tokenizes text: added tokens (special or not) written literally in
// text become their ids; everything else is normalized, pre-tokenized and
// BPE-encoded. No BOS or EOS is added.
func (t *Tokenizer) Encode(text string) []int {
	return t.encode(text, true)
}

// EncodeOrdinary is Encode without added-token matching: "<|im_end|>" in
// text is encoded as plain text. Use it for untrusted message content.
func (t *Tokenizer) EncodeOrdinary(text string) []int {
	return t.encode(text, false)
}

func (t *Tokenizer) encode(text string, matchAdded bool) []int {
	text = toValidUTF8(text)
	var out []int
	if !matchAdded || len(t.added) == 0 {
		return t.encodeText(text, true, out)
	}
	start, pos := 0, 0
	for pos < len(text) {
		a := t.matchAdded(text[pos:])
		if a == nil {
			pos++
			continue
		}
		seg := text[start:pos]
		if a.lstrip {
			seg = strings.TrimRightFunc(seg, unicode.IsSpace)
		}
		out = t.encodeText(seg, start == 0, out)
		out = append(out, a.id)
		pos += len(a.content)
		if a.rstrip {
			rest := strings.TrimLeftFunc(text[pos:], unicode.IsSpace)
			pos = len(text) - len(rest)
		}
		start = pos
	}
	return t.encodeText(text[start:], start == 0, out)
}

// matchAdded returns the longest added token that s starts with.
func (t *Tokenizer) matchAdded(s string) *addedToken {
	for _, i := range t.byFirst[s[0]] {
		if strings.HasPrefix(s, t.added[i].content) {
			return &t.added[i]
		}
	}
	return nil
}

// encodeText encodes text that holds no added token; atStart says that it
// begins the input (Metaspace's prepend_scheme first).
func (t *Tokenizer) encodeText(text string, atStart bool, out []int) []int {
	if text == "" {
		return out
	}
	text = applyNormalizers(t.norm, text)
	pieces := []string{text}
	for i := range t.pre {
		pieces = t.pre[i].apply(pieces, atStart)
	}
	for _, p := range pieces {
		out = t.bpe(p, out)
	}
	return out
}

func (s *preStep) apply(pieces []string, atStart bool) []string {
	out := make([]string, 0, len(pieces))
	for i, p := range pieces {
		switch s.kind {
		case stepMetaspace:
			out = s.meta.apply(p, atStart && i == 0, out)
		case stepSplit:
			if s.literal != "" {
				out = splitLiteral(s.literal, p, s.behavior, out)
			} else {
				out = splitRegex(s.re, p, s.behavior, out)
			}
		case stepByteLevel:
			if s.addPrefixSpace && !strings.HasPrefix(p, " ") {
				p = " " + p
			}
			start := len(out)
			if s.re != nil {
				out = splitRegex(s.re, p, isolated, out)
			} else if p != "" {
				out = append(out, p)
			}
			for i := start; i < len(out); i++ {
				out[i] = byteLevelEncode(out[i])
			}
		}
	}
	return out
}

// splitRegex splits s around the non-empty matches of re and appends the
// pieces to out as behavior says. regexp2 reports rune positions; they are
// mapped to byte offsets through the rune start table.
func splitRegex(re *regexp2.Regexp, s string, behavior splitBehavior, out []string) []string {
	if s == "" {
		return out
	}
	runes := []rune(s)
	offs := make([]int, 0, len(runes)+1)
	for i := range s {
		offs = append(offs, i)
	}
	offs = append(offs, len(s))

	var spans []span
	last := 0
	m, err := re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Length > 0 {
			a, b := offs[m.Index], offs[m.Index+m.Length]
			if a > last {
				spans = append(spans, span{last, a, false})
			}
			spans = append(spans, span{a, b, true})
			last = b
		}
		m, err = re.FindNextMatch(m)
	}
	// err can only be a match timeout (see splitTimeout): the rest is one piece.
	if last < len(s) {
		spans = append(spans, span{last, len(s), false})
	}
	return applyBehavior(s, spans, behavior, out)
}

// span is a stretch of a piece: a match of the split pattern or a gap.
type span struct {
	a, b  int
	match bool
}

// splitLiteral is splitRegex for a String pattern: its leftmost
// non-overlapping occurrences, found without a regex.
func splitLiteral(lit, s string, behavior splitBehavior, out []string) []string {
	if s == "" {
		return out
	}
	var spans []span
	last := 0
	for {
		i := strings.Index(s[last:], lit)
		if i < 0 {
			break
		}
		a := last + i
		if a > last {
			spans = append(spans, span{last, a, false})
		}
		spans = append(spans, span{a, a + len(lit), true})
		last = a + len(lit)
	}
	if last < len(s) {
		spans = append(spans, span{last, len(s), false})
	}
	return applyBehavior(s, spans, behavior, out)
}

// applyBehavior appends the pieces of s that behavior makes of its spans.
func applyBehavior(s string, spans []span, behavior splitBehavior, out []string) []string {
	switch behavior {
	case isolated:
		for _, sp := range spans {
			out = append(out, s[sp.a:sp.b])
		}
	case removed:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, s[sp.a:sp.b])
			}
		}
	case mergedWithPrevious:
		prevGap := false // the last piece is a gap a match may join
		for _, sp := range spans {
			if sp.match && prevGap {
				out[len(out)-1] += s[sp.a:sp.b]
				prevGap = false
				continue
			}
			out = append(out, s[sp.a:sp.b])
			prevGap = !sp.match
		}
	case mergedWithNext:
		pendingMatch := false // the last piece is a match the next gap joins
		for _, sp := range spans {
			if !sp.match && pendingMatch {
				out[len(out)-1] += s[sp.a:sp.b]
				pendingMatch = false
				continue
			}
			out = append(out, s[sp.a:sp.b])
			pendingMatch = sp.match
		}
	}
	return out
}

// bpe appends the ids of one pre-tokenized piece.
func (t *Tokenizer) bpe(piece string, out []int) []int {
	if piece == "" {
		return out
	}
	if t.ignoreMerges {
		if id, ok := t.vocab[piece]; ok {
			return append(out, id)
		}
	}
	if ids, ok := t.cache.get(piece); ok {
		for _, id := range ids {
			out = append(out, int(id))
		}
		return out
	}
	ids := t.merge(piece)
	t.cache.put(piece, ids)
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

// merge runs BPE on piece: start from one symbol per rune, then repeatedly
// apply the merge of lowest rank among adjacent pairs, leftmost first.
func (t *Tokenizer) merge(piece string) []int32 {
	ids := make([]int32, 0, len(piece))
	lastUnk := false
	for _, r := range piece {
		id, ok := t.vocab[string(r)]
		if !ok && t.byteFallback {
			ids = t.appendByteTokens(ids, r)
			lastUnk = false
			continue
		}
		if !ok {
			if t.unkID < 0 {
				continue // dropped, as the reference does without an unk token
			}
			if t.fuseUnk && lastUnk {
				continue
			}
			ids = append(ids, int32(t.unkID))
			lastUnk = true
			continue
		}
		ids = append(ids, int32(id))
		lastUnk = false
	}
	n := len(ids)
	if n < 2 {
		return ids
	}
	prev := make([]int32, n)
	next := make([]int32, n)
	alive := make([]bool, n)
	for i := range n {
		prev[i] = int32(i - 1)
		next[i] = int32(i + 1)
		alive[i] = true
	}
	next[n-1] = -1

	h := make(candHeap, 0, n)
	push := func(pos int32) {
		nx := next[pos]
		if nx < 0 {
			return
		}
		if mv, ok := t.merges[pairKey(int(ids[pos]), int(ids[nx]))]; ok {
			heap.Push(&h, cand{rank: mv.rank, pos: pos, id: mv.id})
		}
	}
	for i := range n - 1 {
		push(int32(i))
	}
	for h.Len() > 0 {
		c := heap.Pop(&h).(cand)
		p := c.pos
		if !alive[p] || next[p] < 0 {
			continue
		}
		nx := next[p]
		mv, ok := t.merges[pairKey(int(ids[p]), int(ids[nx]))]
		if !ok || mv.rank != c.rank {
			continue // stale: one side changed since this was queued
		}
		ids[p] = mv.id
		alive[nx] = false
		next[p] = next[nx]
		if next[p] >= 0 {
			prev[next[p]] = p
		}
		if prev[p] >= 0 {
			push(prev[p])
		}
		push(p)
	}
	out := ids[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, ids[i])
	}
	return out
}

type cand struct {
	rank int32
	pos  int32
	id   int32
}

type candHeap []cand

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(cand)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Decode turns ids into text as the tokenizer.json's decoder says. Unknown
// ids contribute nothing; with skipSpecial, special added tokens are left
// out first. Bytes that do not form valid UTF-8 become U+FFFD: per maximal
// ill-formed subpart for ByteLevel, per byte of a byte-fallback run that is
// not valid UTF-8 as a whole for ByteFallback (as tokenizers does).
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	if t.pt != nil {
		return t.decodePieces(ids, skipSpecial)
	}
	var buf []byte
	for _, id := range ids {
		if !t.Known(id) || (skipSpecial && t.special[id]) {
			continue
		}
		buf = append(buf, t.idBytes[id]...)
	}
	out, _ := appendLossy(make([]byte, 0, len(buf)), buf, true)
	return string(out)
}

// bpeCache remembers the BPE result of recent pieces. It is bounded: when
// full it is emptied and refilled.
type bpeCache struct {
	mu sync.Mutex
	m  map[string][]int32
}

const (
	cacheEntries  = 1 << 16
	cacheMaxPiece = 256 // bytes; longer pieces are not cached
)

func newCache() *bpeCache { return &bpeCache{m: make(map[string][]int32)} }

func (c *bpeCache) get(piece string) ([]int32, bool) {
	if len(piece) > cacheMaxPiece {
		return nil, false
	}
	c.mu.Lock()
	ids, ok := c.m[piece]
	c.mu.Unlock()
	return ids, ok
}

func (c *bpeCache) put(piece string, ids []int32) {
	if len(piece) > cacheMaxPiece {
		return
	}
	c.mu.Lock()
	if len(c.m) >= cacheEntries {
		clear(c.m)
	}
	c.m[piece] = ids
	c.mu.Unlock()
}
