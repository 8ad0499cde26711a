package tinymodel

import (
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dlclark/regexp2"
)

// The tiny tokenizer: a byte-level BPE in the Hugging Face Qwen2 format.
// Ids 0..255 are the single bytes (in the GPT-2 byte-to-unicode order, as in
// Qwen's vocabulary), ids 256..256+numMerges-1 the merges learned from
// corpus.txt in rank order, then the added tokens.

//go:embed corpus.txt
var corpus string

const (
	numMerges = 100

	tokEndOfText = "<|endoftext|>"
	tokIMStart   = "<|im_start|>"
	tokIMEnd     = "<|im_end|>"
	tokThink     = "<think>"
	tokEndThink  = "</think>"
)

// addedTokens in id order, with Qwen's "special" flags.
var addedTokens = []struct {
	content string
	special bool
}{
	{tokEndOfText, true},
	{tokIMStart, true},
	{tokIMEnd, true},
	{tokThink, false},
	{tokEndThink, false},
}

// tokenizerSize is the number of token ids the tokenizer uses.
var tokenizerSize = 256 + numMerges + len(addedTokens)

// QwenPretokenizePattern is the Qwen2/Qwen3 pre-tokenizer regex
// (PCRE-like: it needs lookahead).
const QwenPretokenizePattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// chatTemplate is a ChatML template; enable_thinking=false appends an empty
// think block after the generation prompt, as Qwen3's template does.
const chatTemplate = "{%- for message in messages %}" +
	"{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
	"{%- endfor %}" +
	"{%- if add_generation_prompt %}" +
	"{{- '<|im_start|>assistant\\n' }}" +
	"{%- if enable_thinking is defined and enable_thinking is false %}" +
	"{{- '<think>\\n\\n</think>\\n\\n' }}" +
	"{%- endif %}" +
	"{%- endif %}"

// byteOrder[i] is the byte of token id i: the bytes GPT-2 maps to
// themselves ('!'..'~', '¡'..'¬', '®'..'ÿ') first, then the others
// ascending. byteRune[b] is the printable rune that stands for byte b in
// vocab and merges.
var byteOrder, byteRune = byteTables()

func byteTables() (order [256]byte, r [256]rune) {
	self := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	i, n := 0, 0
	for b := range 256 {
		if self(b) {
			order[i] = byte(b)
			r[b] = rune(b)
			i++
		}
	}
	for b := range 256 {
		if !self(b) {
			order[i] = byte(b)
			r[b] = rune(256 + n)
			n++
			i++
		}
	}
	return order, r
}

// toUnicode renders bytes in the byte-level vocabulary alphabet.
func toUnicode(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		s.WriteRune(byteRune[c])
	}
	return s.String()
}

type tokenizer struct {
	tokens [][]byte // regular tokens by id
	merges [][2]int // merge rank -> the two token ids; token 256+rank is their concatenation
	added  []string // added token contents; id = len(tokens)+i
}

func (t *tokenizer) id(added string) int {
	for i, a := range t.added {
		if a == added {
			return len(t.tokens) + i
		}
	}
	panic("tinymodel: unknown added token " + added)
}

// pretokenize splits text into pieces with the Qwen pattern.
func pretokenize(text string) ([]string, error) {
	re, err := regexp2.Compile(QwenPretokenizePattern, regexp2.None)
	if err != nil {
		return nil, err
	}
	var out []string
	m, err := re.FindStringMatch(text)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		out = append(out, m.String())
	}
	return out, err
}

// buildTokenizer learns numMerges merges from corpus.txt: repeatedly merge
// the most frequent adjacent pair (ties: smallest left id, then right id),
// skipping pairs whose concatenation is already a token so every token
// string has one id.
func buildTokenizer() (*tokenizer, error) {
	pieces, err := pretokenize(corpus)
	if err != nil {
		return nil, fmt.Errorf("tinymodel: pre-tokenizing the corpus: %w", err)
	}
	freq := map[string]int{}
	for _, p := range pieces {
		freq[p]++
	}
	keys := make([]string, 0, len(freq))
	for k := range freq {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	t := &tokenizer{}
	idOf := map[string]int{}
	for i := range 256 {
		t.tokens = append(t.tokens, []byte{byteOrder[i]})
		idOf[string([]byte{byteOrder[i]})] = i
	}
	words := make([][]int, len(keys))
	counts := make([]int, len(keys))
	for i, k := range keys {
		for _, c := range []byte(k) {
			words[i] = append(words[i], idOf[string([]byte{c})])
		}
		counts[i] = freq[k]
	}

	for len(t.merges) < numMerges {
		pairs := map[[2]int]int{}
		for i, w := range words {
			for j := 0; j+1 < len(w); j++ {
				pairs[[2]int{w[j], w[j+1]}] += counts[i]
			}
		}
		best, bestN := [2]int{}, 0
		for p, n := range pairs {
			if _, dup := idOf[string(t.tokens[p[0]])+string(t.tokens[p[1]])]; dup {
				continue
			}
			if n > bestN || (n == bestN && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			return nil, fmt.Errorf("tinymodel: corpus yields only %d merges, need %d", len(t.merges), numMerges)
		}
		nb := append(append([]byte{}, t.tokens[best[0]]...), t.tokens[best[1]]...)
		nid := len(t.tokens)
		t.tokens = append(t.tokens, nb)
		idOf[string(nb)] = nid
		t.merges = append(t.merges, best)
		for i, w := range words {
			out := w[:0]
			for j := 0; j < len(w); j++ {
				if j+1 < len(w) && w[j] == best[0] && w[j+1] == best[1] {
					out = append(out, nid)
					j++
				} else {
					out = append(out, w[j])
				}
			}
			words[i] = out
		}
	}
	for _, a := range addedTokens {
		t.added = append(t.added, a.content)
	}
	return t, nil
}

func addedTokenJSON(id int, content string, special bool) obj {
	o := obj{}
	if id >= 0 {
		o = append(o, kv{"id", id})
	}
	return append(o,
		kv{"content", content},
		kv{"single_word", false},
		kv{"lstrip", false},
		kv{"rstrip", false},
		kv{"normalized", false},
		kv{"special", special},
	)
}

// json returns tokenizer.json in the layout the tokenizers library writes.
func (t *tokenizer) json() obj {
	var added []obj
	for i, a := range addedTokens {
		added = append(added, addedTokenJSON(len(t.tokens)+i, a.content, a.special))
	}
	vocab := make(obj, len(t.tokens))
	for id, b := range t.tokens {
		vocab[id] = kv{toUnicode(b), id}
	}
	merges := make([]string, len(t.merges))
	for r, m := range t.merges {
		merges[r] = toUnicode(t.tokens[m[0]]) + " " + toUnicode(t.tokens[m[1]])
	}
	byteLevel := obj{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}
	return obj{
		{"version", "1.0"},
		{"truncation", nil},
		{"padding", nil},
		{"added_tokens", added},
		{"normalizer", obj{{"type", "NFC"}}},
		{"pre_tokenizer", obj{
			{"type", "Sequence"},
			{"pretokenizers", []obj{
				{
					{"type", "Split"},
					{"pattern", obj{{"Regex", QwenPretokenizePattern}}},
					{"behavior", "Isolated"},
					{"invert", false},
				},
				byteLevel,
			}},
		}},
		{"post_processor", byteLevel},
		{"decoder", byteLevel},
		{"model", obj{
			{"type", "BPE"},
			{"dropout", nil},
			{"unk_token", nil},
			{"continuing_subword_prefix", ""},
			{"end_of_word_suffix", ""},
			{"fuse_unk", false},
			{"byte_fallback", false},
			{"ignore_merges", false},
			{"vocab", vocab},
			{"merges", merges},
		}},
	}
}

// configJSON returns tokenizer_config.json (Qwen2Tokenizer, ChatML).
func (t *tokenizer) configJSON() obj {
	dec := obj{}
	for i, a := range addedTokens {
		dec = append(dec, kv{strconv.Itoa(len(t.tokens) + i), addedTokenJSON(-1, a.content, a.special)})
	}
	return obj{
		{"add_bos_token", false},
		{"add_prefix_space", false},
		{"added_tokens_decoder", dec},
		{"additional_special_tokens", []string{tokIMStart, tokIMEnd}},
		{"bos_token", nil},
		{"chat_template", chatTemplate},
		{"clean_up_tokenization_spaces", false},
		{"eos_token", tokIMEnd},
		{"errors", "replace"},
		{"model_max_length", 4096},
		{"pad_token", tokEndOfText},
		{"split_special_tokens", false},
		{"tokenizer_class", "Qwen2Tokenizer"},
		{"unk_token", nil},
	}
}
