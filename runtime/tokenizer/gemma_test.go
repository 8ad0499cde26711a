package tokenizer

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Gemma 4 tokenizer check: the real tokenizer.json (refdata's gzip,
// byte-identical to the Hub file) and four variants of it
// (testdata/gemma4/variants.json) must give, on testdata/gemma4/corpus.jsonl,
// the ids and decodes that the Hugging Face tokenizers library gave on the
// device machine (testdata/gemma4/make_expected.py -> expected.json.gz).

const (
	gemmaDir          = "testdata/gemma4"
	gemmaSHA256       = "cc8d3a0ce36466ccc1278bf987df5f71db1719b9ca6b4118264f45cb627bfe0f"
	gemmaRefdataPath  = "tokenizer/gemma4/tokenizer.json.gz"
	refdataEnv        = "QPACK_REFDATA"
	gemmaVocabEntries = 262144
)

// refdataFile finds a file of the shared refdata: $QPACK_REFDATA, else
// ../shared/refdata beside the module root. A missing file fails the test:
// the check must not pass by not running.
func refdataFile(t testing.TB, rel string) string {
	t.Helper()
	dir := os.Getenv(refdataEnv)
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				dir = filepath.Join(d, "..", "shared", "refdata")
				break
			}
			if filepath.Dir(d) == d {
				t.Fatalf("no go.mod above %s", wd)
			}
		}
	}
	p := filepath.Join(dir, rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("refdata file missing (set %s to the refdata folder): %v", refdataEnv, err)
	}
	return p
}

func gunzipFile(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return data
}

var gemmaOnce struct {
	sync.Once
	raw []byte
	tok *Tokenizer
	err error
	dur time.Duration
}

// gemmaJSON returns the real Gemma 4 tokenizer.json, checked by sha256, and
// the tokenizer parsed from it.
func gemmaJSON(t testing.TB) ([]byte, *Tokenizer) {
	t.Helper()
	gemmaOnce.Do(func() {
		raw := gunzipFile(t, refdataFile(t, gemmaRefdataPath))
		sum := sha256.Sum256(raw)
		if got := hex.EncodeToString(sum[:]); got != gemmaSHA256 {
			t.Fatalf("tokenizer.json sha256 %s, want %s", got, gemmaSHA256)
		}
		gemmaOnce.raw = raw
		start := time.Now()
		gemmaOnce.tok, gemmaOnce.err = Parse("gemma4/tokenizer.json", raw)
		gemmaOnce.dur = time.Since(start)
	})
	if gemmaOnce.raw == nil {
		t.Fatal("Gemma 4 tokenizer.json not loaded")
	}
	if gemmaOnce.err != nil {
		t.Fatal(gemmaOnce.err)
	}
	return gemmaOnce.raw, gemmaOnce.tok
}

// gemmaVariant replaces top-level fields of the real tokenizer.json (and
// model.ignore_merges) as variants.json says, the way make_expected.py does.
// The document is rebuilt from the raw members, without re-encoding the
// 32 MB model.
func gemmaVariant(t testing.TB, raw []byte, v map[string]json.RawMessage) []byte {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	for k, val := range v {
		switch k {
		case "normalizer", "pre_tokenizer", "decoder":
			top[k] = val
		case "ignore_merges":
			from, to := []byte(`"ignore_merges": false`), []byte(`"ignore_merges": `+string(val))
			if bytes.Count(top["model"], from) != 1 {
				t.Fatalf("model has %d %s", bytes.Count(top["model"], from), from)
			}
			top["model"] = bytes.Replace(top["model"], from, to, 1)
		default:
			t.Fatalf("variant key %q", k)
		}
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for k, val := range top {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Quote(k))
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

type gemmaExpected struct {
	Tokenizers string `json:"tokenizers"`
	SHA256     string `json:"sha256"`
	Variants   map[string]struct {
		Encode     [][]int  `json:"encode"`
		Decode     []string `json:"decode"`
		DecodeSkip []string `json:"decode_skip"`
		Cases      []struct {
			Tokens      []string `json:"tokens"`
			IDs         []int    `json:"ids"`
			Decoded     string   `json:"decoded"`
			DecodedSkip string   `json:"decoded_skip"`
		} `json:"cases"`
		Renders []struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"renders"`
	} `json:"variants"`
}

type gemmaLine struct {
	Text *string `json:"text"`
	Hex  *string `json:"hex"`
}

// input is what Encode is given: the text, or the raw (invalid UTF-8) bytes.
func (l gemmaLine) input(t testing.TB) string {
	if l.Text != nil {
		return *l.Text
	}
	b, err := hex.DecodeString(*l.Hex)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func streamDecode(tok *Tokenizer, ids []int, skip bool) string {
	d := tok.NewStreamDecoder(skip)
	var sb strings.Builder
	for _, id := range ids {
		sb.WriteString(d.Add(id))
	}
	sb.WriteString(d.Flush())
	return sb.String()
}

func TestGemma4MatchesTokenizers(t *testing.T) {
	raw, base := gemmaJSON(t)
	var exp gemmaExpected
	if err := json.Unmarshal(gunzipFile(t, filepath.Join(gemmaDir, "expected.json.gz")), &exp); err != nil {
		t.Fatal(err)
	}
	if exp.SHA256 != gemmaSHA256 {
		t.Fatalf("expected.json.gz was made from tokenizer.json %s, want %s", exp.SHA256, gemmaSHA256)
	}
	corpus := readJSONL[gemmaLine](t, filepath.Join(gemmaDir, "corpus.jsonl"))
	var variants map[string]map[string]json.RawMessage
	data, err := os.ReadFile(filepath.Join(gemmaDir, "variants.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &variants); err != nil {
		t.Fatal(err)
	}
	if len(variants) != len(exp.Variants) || len(variants) < 5 {
		t.Fatalf("%d variants, %d expected", len(variants), len(exp.Variants))
	}
	names := make([]string, 0, len(variants))
	for name := range variants {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			want, ok := exp.Variants[name]
			if !ok {
				t.Fatalf("no expected output for variant %s", name)
			}
			tok := base
			if len(variants[name]) > 0 {
				if testing.Short() {
					t.Skip("variant parse skipped in -short")
				}
				if tok, err = Parse(name+".json", gemmaVariant(t, raw, variants[name])); err != nil {
					t.Fatal(err)
				}
			}
			if len(want.Encode) != len(corpus) {
				t.Fatalf("%d expected lines for %d corpus lines", len(want.Encode), len(corpus))
			}
			bad := 0
			for i, line := range corpus {
				in := line.input(t)
				got := tok.Encode(in)
				if !slices.Equal(got, want.Encode[i]) {
					if bad++; bad <= 5 {
						t.Errorf("line %d %q:\n got  %v\n want %v", i+1, trunc(in), got, want.Encode[i])
					}
					continue
				}
				if d := tok.Decode(got, false); d != want.Decode[i] {
					t.Errorf("line %d: Decode %q, tokenizers %q", i+1, trunc(d), trunc(want.Decode[i]))
				}
				if d := tok.Decode(got, true); d != want.DecodeSkip[i] {
					t.Errorf("line %d: Decode(skip) %q, tokenizers %q", i+1, trunc(d), trunc(want.DecodeSkip[i]))
				}
				if d := streamDecode(tok, got, false); d != want.Decode[i] {
					t.Errorf("line %d: stream decode %q, tokenizers %q", i+1, trunc(d), trunc(want.Decode[i]))
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d lines differ", bad, len(corpus))
			}
			if len(want.Cases) < 16 {
				t.Fatalf("only %d decode cases", len(want.Cases))
			}
			for _, c := range want.Cases {
				if got := tok.Decode(c.IDs, false); got != c.Decoded {
					t.Errorf("Decode %v: %q, tokenizers %q", c.Tokens, got, c.Decoded)
				}
				if got := tok.Decode(c.IDs, true); got != c.DecodedSkip {
					t.Errorf("Decode(skip) %v: %q, tokenizers %q", c.Tokens, got, c.DecodedSkip)
				}
				for _, skip := range []bool{false, true} {
					if got, w := streamDecode(tok, c.IDs, skip), tok.Decode(c.IDs, skip); got != w {
						t.Errorf("stream decode (skip %v) %v: %q, Decode %q", skip, c.Tokens, got, w)
					}
				}
			}
			for i, r := range want.Renders {
				if got := tok.Encode(r.Text); !slices.Equal(got, r.IDs) {
					t.Errorf("render %d %q:\n got  %v\n want %v", i, trunc(r.Text), got, r.IDs)
				}
			}
			if name == "gemma4" && len(want.Renders) < 30 {
				t.Errorf("only %d template renders checked", len(want.Renders))
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// What the real file is, so that a different tokenizer.json cannot pass.
func TestGemma4Facts(t *testing.T) {
	_, tok := gemmaJSON(t)
	t.Logf("Parse of the %d-byte tokenizer.json took %v", len(gemmaOnce.raw), gemmaOnce.dur)
	if tok.NumIDs() != gemmaVocabEntries {
		t.Errorf("NumIDs %d, want %d", tok.NumIDs(), gemmaVocabEntries)
	}
	for content, id := range map[string]int{"<pad>": 0, "<eos>": 1, "<bos>": 2, "<|tool_response>": 50, "<|turn>": 105, "<turn|>": 106, "<|image|>": 258880} {
		if got, ok := tok.TokenID(content); !ok || got != id || !tok.IsSpecial(id) {
			t.Errorf("%s: id %d ok %v special %v, want special id %d", content, got, ok, tok.IsSpecial(got), id)
		}
	}
	// Byte fallback: a character outside the vocab becomes its byte tokens.
	ids := tok.EncodeOrdinary("\U0010FFFF")
	var want []int
	for _, b := range []byte("\U0010FFFF") {
		id, ok := tok.TokenID("<0x" + strings.ToUpper(hex.EncodeToString([]byte{b})) + ">")
		if !ok {
			t.Fatalf("no byte token for %#x", b)
		}
		want = append(want, id)
	}
	if !slices.Equal(ids, want) {
		t.Errorf("U+10FFFF: %v, want the byte tokens %v", ids, want)
	}
	if got := tok.TokenBytes(want[0]); !bytes.Equal(got, []byte{0xF4}) {
		t.Errorf("TokenBytes(<0xF4>) = %q", got)
	}
	hello, _ := tok.TokenID("\u2581hello")
	if got := string(tok.TokenBytes(hello)); got != " hello" {
		t.Errorf("TokenBytes(▁hello) = %q", got)
	}
	if got := tok.Decode(tok.Encode("<|turn>user\n Hi  there<turn|>"), true); got != "user\n Hi  there" {
		t.Errorf("round trip without specials: %q", got)
	}
}
