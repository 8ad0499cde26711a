// Command tokenizer measures loading and encoding with runtime/tokenizer on
// a real tokenizer.json (by default Gemma 4's, from ../shared/refdata).
//
// The load baseline is encoding/json decoding the same file into plain Go
// values (vocab map, merges as string pairs, the rest as raw JSON): the work
// any loader built on encoding/json does before it checks a single merge.
// Rounds alternate baseline and Parse; times are the fastest round (least
// disturbed on a shared machine); the ratio is the median over rounds of
// baseline time / Parse time. Encoding is timed on 4 KB of English prose and
// of mixed text (code, CJK, emoji); Gemma's pre-tokenizer leaves each one
// piece, longer than the piece cache keeps, so every call runs the merges.
//
//	go run ./bench/tokenizer [-file path/to/tokenizer.json[.gz]] [-rounds 5]
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/qpack-go/qpack/runtime/tokenizer"
)

func main() {
	file := flag.String("file", "../shared/refdata/tokenizer/gemma4/tokenizer.json.gz", "tokenizer.json, or a gzip of it")
	rounds := flag.Int("rounds", 5, "rounds")
	flag.Parse()
	if err := run(*file, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "tokenizer bench:", err)
		os.Exit(1)
	}
}

func readFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".gz") {
		return data, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return io.ReadAll(io.LimitReader(zr, tokenizer.MaxFileSize+1))
}

// baseline decodes the file with encoding/json alone.
func baseline(data []byte) error {
	var f struct {
		Model struct {
			Vocab  map[string]int64 `json:"vocab"`
			Merges [][]string       `json:"merges"`
		} `json:"model"`
		AddedTokens  json.RawMessage `json:"added_tokens"`
		Normalizer   json.RawMessage `json:"normalizer"`
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
		Decoder      json.RawMessage `json:"decoder"`
	}
	return json.Unmarshal(data, &f)
}

func timed(f func() error) (time.Duration, error) {
	runtime.GC()
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func run(path string, rounds int) error {
	data, err := readFile(path)
	if err != nil {
		return err
	}
	fmt.Printf("file %s: %d bytes, GOMAXPROCS %d\n", path, len(data), runtime.GOMAXPROCS(0))
	var tok *tokenizer.Tokenizer
	bestBase, bestParse := time.Duration(1<<62), time.Duration(1<<62)
	var ratios []float64
	for range rounds {
		b, err := timed(func() error { return baseline(data) })
		if err != nil {
			return fmt.Errorf("encoding/json: %w", err)
		}
		p, err := timed(func() error {
			var err error
			tok, err = tokenizer.Parse(path, data)
			return err
		})
		if err != nil {
			return err
		}
		bestBase, bestParse = min(bestBase, b), min(bestParse, p)
		ratios = append(ratios, b.Seconds()/p.Seconds())
	}
	sort.Float64s(ratios)
	fmt.Printf("load: encoding/json decode alone %v, tokenizer.Parse (decode + checks + tables) %v, ratio baseline/Parse %.2fx (median of %d rounds)\n",
		bestBase.Round(time.Millisecond), bestParse.Round(time.Millisecond), ratios[len(ratios)/2], rounds)

	prose := strings.Repeat("The quick brown fox jumps over the lazy dog, and then it runs far away into the hills. ", 48)[:4096]
	mixed := strings.Repeat("func main() {\n\tfmt.Println(\"héllo\") // 中文 😀 données\n}\n", 80)[:4096]
	for _, c := range []struct{ name, text string }{{"prose", prose}, {"mixed", mixed}} {
		best := time.Duration(1 << 62)
		n := 0
		for range rounds * 10 {
			start := time.Now()
			n = len(tok.Encode(c.text))
			best = min(best, time.Since(start))
		}
		fmt.Printf("encode 4 KB %s: %d ids in %v (%.1f MB/s)\n", c.name, n, best.Round(time.Microsecond), 4096/best.Seconds()/1e6)
	}
	return nil
}
