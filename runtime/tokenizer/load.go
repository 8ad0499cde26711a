package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/dlclark/regexp2"

	"github.com/qpack-go/qpack/internal/regfile"
)

// Limits on untrusted tokenizer.json input.
const (
	MaxFileSize  = 64 << 20 // bytes of tokenizer.json
	maxVocab     = 4 << 20  // entries in model.vocab
	maxMerges    = 4 << 20  // entries in model.merges
	maxAdded     = 1 << 16  // entries in added_tokens
	maxAddedLen  = 1 << 10  // bytes of one added token's content
	maxPreSteps  = 64       // pre-tokenizer steps after flattening sequences
	maxNestDepth = 8        // Sequence inside Sequence
)

// GPT2Pattern is the split regex the ByteLevel pre-tokenizer applies when its
// use_regex option is true.
const GPT2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// Load reads and validates a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	f, st, err := regfile.Open(path) // never blocks on a FIFO
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("tokenizer: %s: %d bytes, more than the %d allowed", path, st.Size(), MaxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return Parse(path, data)
}

// LoadDir loads dir/tokenizer.json.
func LoadDir(dir string) (*Tokenizer, error) {
	return Load(filepath.Join(dir, "tokenizer.json"))
}

// Parse validates and loads the contents of a tokenizer.json; name is used in
// error messages (normally the file's path).
func Parse(name string, data []byte) (*Tokenizer, error) {
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", name, err)
	}
	t.name = name
	return t, nil
}

type fileJSON struct {
	AddedTokens  []addedJSON     `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        *modelJSON      `json:"model"`
}

type addedJSON struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	modelOptions
	Vocab  map[string]int64 `json:"vocab"`
	Merges []mergeJSON      `json:"merges"`
}

// modelOptions are the members of model other than vocab and merges.
type modelOptions struct {
	Type                    string   `json:"type"`
	Dropout                 *float64 `json:"dropout"`
	UnkToken                *string  `json:"unk_token"`
	ContinuingSubwordPrefix *string  `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string  `json:"end_of_word_suffix"`
	FuseUnk                 bool     `json:"fuse_unk"`
	ByteFallback            bool     `json:"byte_fallback"`
	IgnoreMerges            bool     `json:"ignore_merges"`
}

// mergeJSON is one merge, written either "a b" or ["a", "b"].
type mergeJSON struct {
	a, b string
	ok   bool
}

func (m *mergeJSON) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		a, b, found := strings.Cut(s, " ")
		if !found || strings.Contains(b, " ") {
			return fmt.Errorf("merge %q is not two tokens separated by one space", s)
		}
		*m = mergeJSON{a, b, true}
		return nil
	}
	var pair []string
	if err := json.Unmarshal(data, &pair); err != nil {
		return fmt.Errorf("merge is neither a string nor a pair of strings")
	}
	if len(pair) != 2 {
		return fmt.Errorf("merge has %d parts, want 2", len(pair))
	}
	*m = mergeJSON{pair[0], pair[1], true}
	return nil
}

type typed struct {
	Type string `json:"type"`
}

func parse(data []byte) (*Tokenizer, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%d bytes, more than the %d allowed", len(data), MaxFileSize)
	}
	f, err := decodeFile(data)
	if err != nil {
		return nil, fmt.Errorf("not a valid tokenizer.json: %w", err)
	}
	if f.Model == nil {
		return nil, errors.New("no model")
	}
	m := f.Model
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("model type %q is not supported (want BPE)", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("model.dropout %v is not supported", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, errors.New("model.continuing_subword_prefix is not supported")
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, errors.New("model.end_of_word_suffix is not supported")
	}
	if len(m.Vocab) == 0 {
		return nil, errors.New("model.vocab is empty")
	}
	if len(m.Vocab) > maxVocab {
		return nil, fmt.Errorf("model.vocab has %d entries, more than %d", len(m.Vocab), maxVocab)
	}
	if len(m.Merges) > maxMerges {
		return nil, fmt.Errorf("model.merges has %d entries, more than %d", len(m.Merges), maxMerges)
	}
	if len(f.AddedTokens) > maxAdded {
		return nil, fmt.Errorf("added_tokens has %d entries, more than %d", len(f.AddedTokens), maxAdded)
	}

	// Ids: bounded by the number of entries so that the id tables are no
	// larger than the input justifies.
	limit := int64(2*(len(m.Vocab)+len(f.AddedTokens)) + 1024)
	maxID := int64(-1)
	for tok, id := range m.Vocab {
		if id < 0 || id >= limit {
			return nil, fmt.Errorf("model.vocab: token %q has id %d, outside [0, %d)", tok, id, limit)
		}
		maxID = max(maxID, id)
	}
	for i, a := range f.AddedTokens {
		if a.ID == nil {
			return nil, fmt.Errorf("added_tokens[%d] (%q): no id", i, a.Content)
		}
		if *a.ID < 0 || *a.ID >= limit {
			return nil, fmt.Errorf("added_tokens[%d] (%q): id %d outside [0, %d)", i, a.Content, *a.ID, limit)
		}
		maxID = max(maxID, *a.ID)
	}

	dec, err := parseDecoder(f.Decoder)
	if err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}

	t := &Tokenizer{
		vocab:   make(map[string]int, len(m.Vocab)),
		idToken: make([]string, maxID+1),
		idBytes: make([][]byte, maxID+1),
		present: make([]bool, maxID+1),
		special: make([]bool, maxID+1),
		addedID: map[string]int{},
		unkID:   -1,
		cache:   newCache(),
		dec:     dec,
	}
	// Vocab, in id order so the error for a duplicate id is deterministic.
	type entry struct {
		tok string
		id  int
	}
	entries := make([]entry, 0, len(m.Vocab))
	for tok, id := range m.Vocab {
		entries = append(entries, entry{tok, int(id)})
	}
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].id != entries[j].id {
			return entries[i].id < entries[j].id
		}
		return entries[i].tok < entries[j].tok
	})
	for i, e := range entries {
		if i > 0 && entries[i-1].id == e.id {
			return nil, fmt.Errorf("model.vocab: id %d is used by both %q and %q", e.id, entries[i-1].tok, e.tok)
		}
		if e.tok == "" {
			return nil, fmt.Errorf("model.vocab: id %d has an empty token", e.id)
		}
		t.vocab[e.tok] = e.id
		t.idToken[e.id] = e.tok
		if dec.byteLevel {
			t.idBytes[e.id] = byteLevelDecode(e.tok)
		}
		t.present[e.id] = true
	}
	t.nVocab = len(entries)

	if m.UnkToken != nil {
		id, ok := t.vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token %q is not in the vocab", *m.UnkToken)
		}
		t.unkID = id
		t.fuseUnk = m.FuseUnk
	}
	t.ignoreMerges = m.IgnoreMerges
	if m.ByteFallback {
		if err := t.setByteFallback(); err != nil {
			return nil, err
		}
	}

	// Merges: rank = position; both sides and their concatenation must be
	// tokens. A repeated pair keeps its last rank: tokenizers collects the
	// merges into a hash map, where a later entry replaces an earlier one.
	t.merges = make(map[uint64]mergeVal, len(m.Merges))
	for i, mg := range m.Merges {
		if !mg.ok {
			return nil, fmt.Errorf("model.merges[%d]: null", i)
		}
		a, okA := t.vocab[mg.a]
		b, okB := t.vocab[mg.b]
		if !okA || !okB {
			missing := mg.a
			if okA {
				missing = mg.b
			}
			return nil, fmt.Errorf("model.merges[%d] (%q %q): %q is not in the vocab", i, mg.a, mg.b, missing)
		}
		c, okC := t.vocab[mg.a+mg.b]
		if !okC {
			return nil, fmt.Errorf("model.merges[%d] (%q %q): the merged token %q is not in the vocab", i, mg.a, mg.b, mg.a+mg.b)
		}
		t.merges[pairKey(a, b)] = mergeVal{rank: int32(i), id: int32(c)}
	}

	// Added tokens.
	for i, a := range f.AddedTokens {
		id := int(*a.ID)
		if a.Content == "" {
			return nil, fmt.Errorf("added_tokens[%d] (id %d): empty content", i, id)
		}
		if len(a.Content) > maxAddedLen {
			return nil, fmt.Errorf("added_tokens[%d] (id %d): content of %d bytes, more than %d", i, id, len(a.Content), maxAddedLen)
		}
		if prev, dup := t.addedID[a.Content]; dup {
			return nil, fmt.Errorf("added_tokens[%d] (id %d): content %q already added as id %d", i, id, a.Content, prev)
		}
		if t.present[id] {
			if vid, inVocab := t.vocab[a.Content]; !inVocab || vid != id {
				return nil, fmt.Errorf("added_tokens[%d] (%q): id %d is already used by %q", i, a.Content, id, t.idToken[id])
			}
		}
		if vid, inVocab := t.vocab[a.Content]; inVocab && vid != id {
			return nil, fmt.Errorf("added_tokens[%d] (%q): id %d, but the vocab gives it id %d", i, a.Content, id, vid)
		}
		t.addedID[a.Content] = id
		t.idToken[id] = a.Content
		if dec.byteLevel {
			t.idBytes[id] = []byte(toValidUTF8(a.Content))
		}
		t.present[id] = true
		t.special[id] = a.Special
		t.added = append(t.added, addedToken{content: a.Content, id: id, lstrip: a.LStrip, rstrip: a.RStrip, special: a.Special})
	}
	t.indexAdded()
	for id := range t.present {
		if t.present[id] {
			t.count++
		}
	}

	if t.norm, err = parseNormalizer(f.Normalizer, 0); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if err := t.checkAddedNormalized(f.AddedTokens); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer, 0, nil); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if len(t.pre) > maxPreSteps {
		return nil, fmt.Errorf("pre_tokenizer: %d steps, more than %d", len(t.pre), maxPreSteps)
	}
	if !dec.byteLevel {
		t.buildPieceTables()
	}
	return t, nil
}

func isNull(raw json.RawMessage) bool {
	s := bytes.TrimSpace(raw)
	return len(s) == 0 || string(s) == "null"
}

// parsePreTokenizer flattens the pre-tokenizer tree into steps.
func parsePreTokenizer(raw json.RawMessage, depth int, out []preStep) ([]preStep, error) {
	if isNull(raw) {
		return out, nil
	}
	if depth > maxNestDepth {
		return nil, errors.New("sequences nested too deeply")
	}
	var p struct {
		Type          string            `json:"type"`
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
		Pattern       *struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		} `json:"pattern"`
		Behavior       string `json:"behavior"`
		Invert         bool   `json:"invert"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		UseRegex       *bool  `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	switch p.Type {
	case "Sequence":
		for i, sub := range p.Pretokenizers {
			var err error
			out, err = parsePreTokenizer(sub, depth+1, out)
			if err != nil {
				return nil, fmt.Errorf("pretokenizers[%d]: %w", i, err)
			}
			if len(out) > maxPreSteps {
				return nil, errors.New("too many steps")
			}
		}
		return out, nil
	case "Split":
		if p.Invert {
			return nil, errors.New("Split with invert true is not supported")
		}
		if p.Pattern == nil || (p.Pattern.Regex == nil) == (p.Pattern.String == nil) {
			return nil, errors.New("Split needs a pattern with exactly one of Regex or String")
		}
		var expr string
		if p.Pattern.Regex != nil {
			expr = *p.Pattern.Regex
		} else {
			expr = regexp2.Escape(*p.Pattern.String)
		}
		if expr == "" {
			return nil, errors.New("Split with an empty pattern")
		}
		var beh splitBehavior
		switch p.Behavior {
		case "Isolated":
			beh = isolated
		case "Removed":
			beh = removed
		case "MergedWithPrevious":
			beh = mergedWithPrevious
		case "MergedWithNext":
			beh = mergedWithNext
		default:
			return nil, fmt.Errorf("Split behavior %q is not supported", p.Behavior)
		}
		if p.Pattern.String != nil {
			return append(out, preStep{kind: stepSplit, literal: *p.Pattern.String, behavior: beh}), nil
		}
		re, err := compileSplit(expr)
		if err != nil {
			return nil, fmt.Errorf("Split pattern %q: %w", expr, err)
		}
		return append(out, preStep{kind: stepSplit, re: re, behavior: beh}), nil
	case "Metaspace":
		ms, err := parseMetaspace(raw)
		if err != nil {
			return nil, err
		}
		if ms.scheme == prependFirst {
			for _, st := range out {
				if st.kind == stepSplit && st.behavior == removed {
					return nil, errMetaspaceRemoved
				}
			}
		}
		return append(out, preStep{kind: stepMetaspace, meta: ms}), nil
	case "ByteLevel":
		useRegex := p.UseRegex == nil || *p.UseRegex // true unless stated
		st := preStep{kind: stepByteLevel, addPrefixSpace: p.AddPrefixSpace}
		if useRegex {
			re, err := compileSplit(GPT2Pattern)
			if err != nil {
				return nil, err
			}
			st.re = re
		}
		return append(out, st), nil
	}
	return nil, fmt.Errorf("type %q is not supported (want Split, ByteLevel, Metaspace or Sequence)", p.Type)
}

// splitTimeout bounds one regex match, so that a tokenizer.json carrying a
// pattern with catastrophic backtracking cannot hang encoding. When a match
// times out, the rest of that text is kept as one piece.
var splitTimeout = 2 * time.Second

func compileSplit(expr string) (*regexp2.Regexp, error) {
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = splitTimeout
	return re, nil
}
