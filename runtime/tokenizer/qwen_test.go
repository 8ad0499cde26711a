package tokenizer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// The Qwen tokenizer check: a tokenizer.json is built here from the real
// tiktoken ranks (testdata/tokcheck/qwen.tiktoken.gz, a gzip of
// refdata/tokenizer/qwen3/qwen.tiktoken) plus the added tokens of
// tokenizer_config.Qwen3-4B.json, and our encoder must give the ids that
// tiktoken gave on the device machine (testdata/tokcheck/expected.jsonl,
// written by make_expected.py, which also checked that the Hugging Face
// tokenizers library agrees on this very tokenizer.json).

var update = flag.Bool("update", false, "write testdata/tokcheck/qwen3-tokenizer.json for make_expected.py")

const tokcheckDir = "../../testdata/tokcheck"

// QwenPattern is the Qwen2/Qwen3 pre-tokenizer split regex.
const QwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

const qwenTiktokenSHA256 = "6cf5f2a2560a7d581548aeb0c31c6a60de2d3e873152346e421affc871699be4"

// loadRanks reads the tiktoken file: "base64(bytes) rank" per line.
func loadRanks(t testing.TB) [][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join(tokcheckDir, "qwen.tiktoken.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw.Bytes())
	if got := hex.EncodeToString(sum[:]); got != qwenTiktokenSHA256 {
		t.Fatalf("qwen.tiktoken sha256 %s, want %s", got, qwenTiktokenSHA256)
	}
	var byRank [][]byte
	sc := bufio.NewScanner(&raw)
	for sc.Scan() {
		b64, rs, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("bad line %q", sc.Text())
		}
		tok, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		r, err := strconv.Atoi(rs)
		if err != nil || r != len(byRank) {
			t.Fatalf("rank %q out of order at line %d", rs, len(byRank))
		}
		byRank = append(byRank, tok)
	}
	return byRank
}

// deriveMerges finds, for every token of two or more bytes, the pair of
// tokens that byte-level BPE joins to make it: run the tiktoken rule (merge
// the adjacent pair whose concatenation has the lowest rank) on the token's
// bytes using only ranks below its own; exactly two parts must remain.
// The merges come out ordered by the rank of the token they make.
func deriveMerges(t testing.TB, byRank [][]byte) [][2][]byte {
	t.Helper()
	rank := make(map[string]int, len(byRank))
	for r, tok := range byRank {
		rank[string(tok)] = r
	}
	for b := 0; b < 256; b++ {
		if _, ok := rank[string([]byte{byte(b)})]; !ok {
			t.Fatalf("byte %#x has no rank", b)
		}
	}
	var merges [][2][]byte
	for r, tok := range byRank {
		if len(tok) < 2 {
			continue
		}
		parts := make([][]byte, len(tok))
		for i := range tok {
			parts[i] = tok[i : i+1]
		}
		for len(parts) > 2 {
			best, bestRank := -1, r
			for i := 0; i+1 < len(parts); i++ {
				if pr, ok := rank[string(parts[i])+string(parts[i+1])]; ok && pr < bestRank {
					best, bestRank = i, pr
				}
			}
			if best < 0 {
				break
			}
			joined := append(append([]byte{}, parts[best]...), parts[best+1]...)
			parts[best] = joined
			parts = slices.Delete(parts, best+1, best+2)
		}
		if len(parts) != 2 {
			t.Fatalf("token %d %q: BPE below its rank leaves %d parts", r, tok, len(parts))
		}
		merges = append(merges, [2][]byte{parts[0], parts[1]})
	}
	return merges
}

type configAdded struct {
	Content    string `json:"content"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	SingleWord bool   `json:"single_word"`
	Special    bool   `json:"special"`
}

func loadConfigAdded(t testing.TB) map[int]configAdded {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(tokcheckDir, "tokenizer_config.Qwen3-4B.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		AddedTokensDecoder map[string]configAdded `json:"added_tokens_decoder"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	out := map[int]configAdded{}
	for k, v := range cfg.AddedTokensDecoder {
		id, err := strconv.Atoi(k)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	if len(out) != 26 {
		t.Fatalf("%d added tokens, want 26", len(out))
	}
	return out
}

func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// buildQwenJSON writes the tokenizer.json the Hugging Face converter would
// make for Qwen: byte-level vocab in rank order, derived merges, added tokens.
func buildQwenJSON(t testing.TB) []byte {
	t.Helper()
	return buildJSONFromRanks(t, loadRanks(t), loadConfigAdded(t))
}

// buildJSONFromRanks writes a Qwen-style tokenizer.json for the given ranks
// and added tokens.
func buildJSONFromRanks(t testing.TB, byRank [][]byte, added map[int]configAdded) []byte {
	t.Helper()
	merges := deriveMerges(t, byRank)

	var b bytes.Buffer
	b.WriteString(`{"version":"1.0","truncation":null,"padding":null,"added_tokens":[`)
	ids := make([]int, 0, len(added))
	for id := range added {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for i, id := range ids {
		a := added[id]
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"content":%s,"single_word":%t,"lstrip":%t,"rstrip":%t,"normalized":%t,"special":%t}`,
			id, jsonString(a.Content), a.SingleWord, a.LStrip, a.RStrip, a.Normalized, a.Special)
	}
	bl := `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`
	fmt.Fprintf(&b, `],"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":%s},"behavior":"Isolated","invert":false},%s]},"post_processor":%s,"decoder":%s,`,
		jsonString(QwenPattern), bl, bl, bl)
	b.WriteString(`"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":"","end_of_word_suffix":"","fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":{`)
	for r, tok := range byRank {
		if r > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s:%d", jsonString(byteLevelEncode(string(tok))), r)
	}
	b.WriteString(`},"merges":[`)
	for i, m := range merges {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "[%s,%s]", jsonString(byteLevelEncode(string(m[0]))), jsonString(byteLevelEncode(string(m[1]))))
	}
	b.WriteString("]}}\n")
	return b.Bytes()
}

var qwenOnce struct {
	sync.Once
	json []byte
	tok  *Tokenizer
	err  error
}

func qwenTokenizer(t testing.TB) (*Tokenizer, []byte) {
	t.Helper()
	qwenOnce.Do(func() {
		qwenOnce.json = buildQwenJSON(t)
		qwenOnce.tok, qwenOnce.err = Parse("qwen3-tokenizer.json", qwenOnce.json)
	})
	if qwenOnce.err != nil {
		t.Fatal(qwenOnce.err)
	}
	if qwenOnce.tok == nil {
		t.Fatal("qwen tokenizer was not built")
	}
	return qwenOnce.tok, qwenOnce.json
}

var smallOnce struct {
	sync.Once
	tok *Tokenizer
	err error
}

// smallQwenTokenizer is the Qwen tokenizer cut to its first 4,000 ranks (so
// every merge still refers to lower ranks) with the 26 added tokens moved to
// ids 4000..4025: quick to build, for fuzzing.
func smallQwenTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	smallOnce.Do(func() {
		byRank := loadRanks(t)[:4000]
		added := map[int]configAdded{}
		ids := []int{}
		for id := range loadConfigAdded(t) {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		full := loadConfigAdded(t)
		for i, id := range ids {
			added[4000+i] = full[id]
		}
		smallOnce.tok, smallOnce.err = Parse("small-qwen.json", buildJSONFromRanks(t, byRank, added))
	})
	if smallOnce.err != nil || smallOnce.tok == nil {
		t.Fatalf("small tokenizer: %v", smallOnce.err)
	}
	return smallOnce.tok
}

func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%s:%d: %v", path, i+1, err)
		}
		out = append(out, v)
	}
	return out
}

func TestQwenBuildJSON(t *testing.T) {
	if testing.Short() && !*update {
		t.Skip("builds the full Qwen vocabulary")
	}
	tok, data := qwenTokenizer(t)
	if tok.NumIDs() != 151669 || tok.count != 151669 {
		t.Fatalf("NumIDs %d, ids in use %d, want 151669", tok.NumIDs(), tok.count)
	}
	if len(tok.merges) != 151643-256 {
		t.Fatalf("%d merges, want %d", len(tok.merges), 151643-256)
	}
	// Facts from the reference notes: 256 = "  ", 257 = "    ", 258 = "in", 259 = " t".
	for id, want := range map[int]string{256: "  ", 257: "    ", 258: "in", 259: " t", 151645: "<|im_end|>", 151668: "</think>"} {
		if got := string(tok.TokenBytes(id)); got != want {
			t.Errorf("id %d decodes to %q, want %q", id, got, want)
		}
	}
	if id, ok := tok.TokenID("<|im_end|>"); !ok || id != 151645 {
		t.Errorf("TokenID(<|im_end|>) = %d %v", id, ok)
	}
	if !tok.IsSpecial(151643) || tok.IsSpecial(151667) {
		t.Error("special flags of <|endoftext|> / <think> wrong")
	}
	if *update {
		path := filepath.Join(tokcheckDir, "qwen3-tokenizer.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		t.Logf("wrote %s (%d bytes, sha256 %x)", path, len(data), sum)
	}
}

var shaLine = regexp.MustCompile(`(?m)^tokenizer_json_sha256: ([0-9a-f]{64})$`)

// TestQwenMatchesTiktoken compares our ids with tiktoken's on the corpus.
func TestQwenMatchesTiktoken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the full Qwen vocabulary")
	}
	expPath := filepath.Join(tokcheckDir, "expected.jsonl")
	if _, err := os.Stat(expPath); err != nil {
		t.Fatalf("%v: the committed tiktoken ids are missing (make_expected.py on the device machine writes them)", err)
	}
	corpus := readJSONL[string](t, filepath.Join(tokcheckDir, "corpus.jsonl"))
	expected := readJSONL[[]int](t, expPath)
	if len(corpus) != len(expected) {
		t.Fatalf("corpus has %d lines, expected.jsonl %d", len(corpus), len(expected))
	}
	if len(corpus) < 200 {
		t.Fatalf("corpus has only %d lines", len(corpus))
	}
	tok, data := qwenTokenizer(t)

	// The file the Hugging Face library checked must be the one built here.
	log, err := os.ReadFile(filepath.Join(tokcheckDir, "make_expected.out"))
	if err != nil {
		t.Fatal(err)
	}
	m := shaLine.FindSubmatch(log)
	if m == nil {
		t.Fatal("make_expected.out has no tokenizer_json_sha256 line")
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != string(m[1]) {
		t.Errorf("built tokenizer.json sha256 %s, but make_expected.py checked %s", got, m[1])
	}

	bad := 0
	for i, s := range corpus {
		got := tok.Encode(s)
		if !slices.Equal(got, expected[i]) {
			bad++
			if bad <= 10 {
				t.Errorf("line %d %q:\n got  %v\n want %v", i+1, s, got, expected[i])
			}
		}
		// Round trip: decoding gives back the normalized text.
		if dec := tok.Decode(got, false); dec != norm.NFC.String(s) {
			t.Errorf("line %d: Decode(Encode(s)) = %q, want %q", i+1, dec, norm.NFC.String(s))
		}
		// Streaming decode gives the same text.
		sd := tok.NewStreamDecoder(false)
		var sb strings.Builder
		for _, id := range got {
			sb.WriteString(sd.Add(id))
		}
		sb.WriteString(sd.Flush())
		if sb.String() != norm.NFC.String(s) {
			t.Errorf("line %d: stream decode = %q", i+1, sb.String())
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d corpus lines differ from tiktoken", bad, len(corpus))
	}
	t.Logf("%d corpus lines, all equal to tiktoken", len(corpus))

	// Probes recorded in make_expected.out (tiktoken and HF agreed on each).
	probes := map[string][]int{
		"'\u017f":       {6, 144815},
		"It'\u017f":     {2132, 6, 144815},
		"'K":            {6, 42},
		"x\u0085y":      {87, 126, 227, 88},
		"a\u2028b":      {64, 378, 101, 65},
		"1\u00a02":      {16, 4102, 17},
		"\u00a0\u00a0x": {4102, 4102, 87},
	}
	for s, want := range probes {
		if got := tok.Encode(s); !slices.Equal(got, want) {
			t.Errorf("probe %q: got %v, want %v", s, got, want)
		}
	}
}
