package tinymodel

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

type tokJSON struct {
	AddedTokens []struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		Special    bool   `json:"special"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	Normalizer struct {
		Type string `json:"type"`
	} `json:"normalizer"`
	PreTokenizer struct {
		Type          string `json:"type"`
		Pretokenizers []struct {
			Type     string                 `json:"type"`
			Pattern  struct{ Regex string } `json:"pattern"`
			Behavior string                 `json:"behavior"`
			Prefix   *bool                  `json:"add_prefix_space"`
			UseRegex *bool                  `json:"use_regex"`
		} `json:"pretokenizers"`
	} `json:"pre_tokenizer"`
	Decoder struct {
		Type string `json:"type"`
	} `json:"decoder"`
	Model struct {
		Type   string         `json:"type"`
		Vocab  map[string]int `json:"vocab"`
		Merges []string       `json:"merges"`
	} `json:"model"`
}

// gpt2Bytes is the GPT-2 byte-to-unicode map, written independently:
// printable latin-1 bytes map to themselves, the rest to U+0100 + n.
func gpt2Bytes() map[rune]byte {
	m := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174) {
			m[rune(b)] = byte(b)
		} else {
			m[rune(256+n)] = byte(b)
			n++
		}
	}
	return m
}

func TestTokenizerFiles(t *testing.T) {
	root := generatedVariants(t)
	dir := filepath.Join(root, "qwen3_next-f32")
	var tj tokJSON
	readJSON(t, filepath.Join(dir, "tokenizer.json"), &tj)

	if tj.Model.Type != "BPE" || tj.Normalizer.Type != "NFC" || tj.Decoder.Type != "ByteLevel" ||
		tj.PreTokenizer.Type != "Sequence" || len(tj.PreTokenizer.Pretokenizers) != 2 {
		t.Fatalf("structure: %+v", tj)
	}
	sp, bl := tj.PreTokenizer.Pretokenizers[0], tj.PreTokenizer.Pretokenizers[1]
	const qwenRegex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	if sp.Type != "Split" || sp.Behavior != "Isolated" || sp.Pattern.Regex != qwenRegex {
		t.Errorf("split pre-tokenizer %+v", sp)
	}
	if bl.Type != "ByteLevel" || bl.Prefix == nil || *bl.Prefix || bl.UseRegex == nil || *bl.UseRegex {
		t.Errorf("byte-level pre-tokenizer %+v", bl)
	}

	// Byte tokens: ids 0..255, one per byte, in GPT-2 order ('!' first).
	g := gpt2Bytes()
	byID := map[int]string{}
	for s, id := range tj.Model.Vocab {
		if _, dup := byID[id]; dup {
			t.Fatalf("id %d used twice", id)
		}
		byID[id] = s
	}
	if byID[0] != "!" || byID[93] != "~" || byID[94] != "¡" || byID[188] != "Ā" {
		t.Errorf("byte order: 0=%q 93=%q 94=%q 188=%q", byID[0], byID[93], byID[94], byID[188])
	}
	seen := map[byte]bool{}
	for id := range 256 {
		r, size := utf8.DecodeRuneInString(byID[id])
		b, ok := g[r]
		if !ok || size != len(byID[id]) || seen[b] {
			t.Fatalf("id %d = %q is not a new single byte", id, byID[id])
		}
		seen[b] = true
	}

	// Merges: rank r joins two existing tokens into token 256+r.
	if len(tj.Model.Merges) != 100 || len(tj.Model.Vocab) != 356 {
		t.Fatalf("%d merges, %d vocab entries; want 100, 356", len(tj.Model.Merges), len(tj.Model.Vocab))
	}
	for r, m := range tj.Model.Merges {
		a, b, ok := strings.Cut(m, " ")
		if !ok || strings.Contains(b, " ") {
			t.Fatalf("merge %d %q is not two tokens", r, m)
		}
		ia, oka := tj.Model.Vocab[a]
		ib, okb := tj.Model.Vocab[b]
		if !oka || !okb || ia >= 256+r || ib >= 256+r || tj.Model.Vocab[a+b] != 256+r {
			t.Errorf("merge %d %q: ids %d %d -> %d", r, m, ia, ib, tj.Model.Vocab[a+b])
		}
	}
	if tj.Model.Merges[0] != "Ġ t" && tj.Model.Merges[0] != "Ġ a" && tj.Model.Merges[0] != "h e" {
		t.Errorf("first merge %q is not one of the usual English ones", tj.Model.Merges[0])
	}

	// Added tokens right after the merges, inside vocab_size 384.
	want := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"}
	if len(tj.AddedTokens) != len(want) {
		t.Fatalf("%d added tokens", len(tj.AddedTokens))
	}
	for i, a := range tj.AddedTokens {
		if a.ID != 356+i || a.Content != want[i] || a.Normalized || a.Special != (i < 3) {
			t.Errorf("added token %d: %+v", i, a)
		}
	}

	var tc map[string]any
	readJSON(t, filepath.Join(dir, "tokenizer_config.json"), &tc)
	if tc["eos_token"] != "<|im_end|>" || tc["pad_token"] != "<|endoftext|>" || tc["bos_token"] != nil ||
		tc["tokenizer_class"] != "Qwen2Tokenizer" || !strings.Contains(tc["chat_template"].(string), "<|im_start|>assistant\\n") && !strings.Contains(tc["chat_template"].(string), "<|im_start|>assistant\n") {
		t.Errorf("tokenizer_config %v", tc)
	}
	dec := tc["added_tokens_decoder"].(map[string]any)
	if dec["358"].(map[string]any)["content"] != "<|im_end|>" {
		t.Errorf("added_tokens_decoder %v", dec)
	}

	// Token ids in the configs agree with the tokenizer.
	var nc map[string]any
	readJSON(t, filepath.Join(dir, "config.json"), &nc)
	if nc["bos_token_id"] != 356.0 || nc["eos_token_id"] != 358.0 {
		t.Errorf("qwen3_next bos/eos %v %v", nc["bos_token_id"], nc["eos_token_id"])
	}
	var mc struct {
		TC map[string]any `json:"text_config"`
	}
	readJSON(t, filepath.Join(root, "qwen3_5_moe-f32", "config.json"), &mc)
	if mc.TC["bos_token_id"] != 356.0 || mc.TC["eos_token_id"] != 356.0 {
		t.Errorf("qwen3_5_moe bos/eos %v %v", mc.TC["bos_token_id"], mc.TC["eos_token_id"])
	}
	var gc struct {
		BOS int   `json:"bos_token_id"`
		EOS []int `json:"eos_token_id"`
	}
	readJSON(t, filepath.Join(dir, "generation_config.json"), &gc)
	if gc.BOS != 356 || !slices.Equal(gc.EOS, []int{358, 356}) {
		t.Errorf("generation_config %+v", gc)
	}
}

// encodeMerges applies BPE the Hugging Face way: repeatedly merge the
// adjacent pair with the lowest merge rank.
func encodeMerges(piece string, vocab map[string]int, ranks map[[2]string]int) []int {
	var sym []string
	for _, r := range piece {
		sym = append(sym, string(r))
	}
	for {
		best, at := math.MaxInt, -1
		for i := 0; i+1 < len(sym); i++ {
			if r, ok := ranks[[2]string{sym[i], sym[i+1]}]; ok && r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		sym = append(sym[:at], append([]string{sym[at] + sym[at+1]}, sym[at+2:]...)...)
	}
	ids := make([]int, len(sym))
	for i, s := range sym {
		ids[i] = vocab[s]
	}
	return ids
}

// encodeRanks applies BPE the tiktoken way: merge the adjacent pair whose
// concatenation has the lowest token id.
func encodeRanks(piece string, vocab map[string]int) []int {
	var sym []string
	for _, r := range piece {
		sym = append(sym, string(r))
	}
	for {
		best, at := math.MaxInt, -1
		for i := 0; i+1 < len(sym); i++ {
			if id, ok := vocab[sym[i]+sym[i+1]]; ok && id < best {
				best, at = id, i
			}
		}
		if at < 0 {
			break
		}
		sym = append(sym[:at], append([]string{sym[at] + sym[at+1]}, sym[at+2:]...)...)
	}
	ids := make([]int, len(sym))
	for i, s := range sym {
		ids[i] = vocab[s]
	}
	return ids
}

// The merges reproduce a real BPE (every merge fires on the training text),
// and the two usual encoding rules (merge rank, as tokenizers does; token
// rank, as tiktoken does) agree on the corpus and on other text, so a Go
// tokenizer may use either.
func TestTokenizerEncodingRulesAgree(t *testing.T) {
	root := generatedVariants(t)
	var tj tokJSON
	readJSON(t, filepath.Join(root, "qwen3_5_moe-f32", "tokenizer.json"), &tj)
	ranks := map[[2]string]int{}
	for r, m := range tj.Model.Merges {
		a, b, _ := strings.Cut(m, " ")
		ranks[[2]string{a, b}] = r
	}
	text := corpus + "\nHello there, the tokens of this model: 12345 and more text! É café naïve\t\tx  y\r\n"
	pieces, err := pretokenize(text)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pieces, "") != text {
		t.Fatal("pre-tokenization loses text")
	}
	used := map[int]bool{}
	for _, p := range pieces {
		u := toUnicode([]byte(p))
		a, b := encodeMerges(u, tj.Model.Vocab, ranks), encodeRanks(u, tj.Model.Vocab)
		if !slices.Equal(a, b) {
			t.Errorf("piece %q: merge-rank %v, token-rank %v", p, a, b)
		}
		for _, id := range a {
			used[id] = true
		}
	}
	if n := len(used); n < 80 {
		t.Errorf("only %d distinct tokens used on the corpus", n)
	}
}

func TestPretokenizeQwenPattern(t *testing.T) {
	got, err := pretokenize("Hello world's 2025!!\n\n  x")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Hello", " world", "'s", " ", "2", "0", "2", "5", "!!\n\n", " ", " x"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
