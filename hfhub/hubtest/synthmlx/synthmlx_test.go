package synthmlx

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/safetensors"
)

// smallConfig is a real config with fewer layers, experts and vocab.
func smallConfig(t testing.TB, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]any
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	text := top
	if tc, ok := top["text_config"].(map[string]any); ok {
		text = tc
	}
	text["num_hidden_layers"] = 4
	if lt, ok := text["layer_types"].([]any); ok {
		text["layer_types"] = lt[:4]
	}
	text["num_experts"] = 16
	text["vocab_size"] = 512
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readAll(t *testing.T, s *Shard) []byte {
	t.Helper()
	var buf bytes.Buffer
	chunk := make([]byte, 1<<16+3) // odd size: reads cross tensor and word boundaries
	for off := int64(0); ; {
		n, err := s.ReadAt(chunk, off)
		buf.Write(chunk[:n])
		off += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if int64(buf.Len()) != s.Size() {
		t.Fatalf("%s: read %d bytes, Size %d", s.Name, buf.Len(), s.Size())
	}
	return buf.Bytes()
}

func TestShardsParseAndRandomAccess(t *testing.T) {
	for _, cfg := range []string{"qwen3_5_moe.config.json", "qwen3_next.config.json"} {
		t.Run(cfg, func(t *testing.T) {
			c, err := New(smallConfig(t, cfg), 7, 4<<20)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Shards) < 2 || c.Index == nil {
				t.Fatalf("%d shards, want several with an index", len(c.Shards))
			}
			var ix struct {
				WeightMap map[string]string `json:"weight_map"`
			}
			if err := json.Unmarshal(c.Index, &ix); err != nil {
				t.Fatal(err)
			}
			seen := 0
			rng := rand.New(rand.NewPCG(1, 2))
			for _, s := range c.Shards {
				all := readAll(t, s)
				h, err := safetensors.ReadHeader(bytes.NewReader(all), int64(len(all)), s.Name)
				if err != nil {
					t.Fatal(err)
				}
				if h.FileSize != s.Size() {
					t.Fatalf("%s: header says %d bytes, shard has %d", s.Name, h.FileSize, s.Size())
				}
				for _, tn := range h.Tensors {
					if ix.WeightMap[tn.Name] != s.Name {
						t.Fatalf("index puts %s in %q, found in %s", tn.Name, ix.WeightMap[tn.Name], s.Name)
					}
					seen++
					if strings.HasSuffix(tn.Name, ".scales") {
						v := bf16ToF32(uint16(all[tn.Offset]) | uint16(all[tn.Offset+1])<<8)
						if !(v > 0 && v < 0.05) {
							t.Fatalf("%s: scale %g, want small positive", tn.Name, v)
						}
						bn := strings.TrimSuffix(tn.Name, ".scales") + ".biases"
						bt, ok := h.Tensor(bn)
						if !ok {
							t.Fatalf("%s without %s", tn.Name, bn)
						}
						b := bf16ToF32(uint16(all[bt.Offset]) | uint16(all[bt.Offset+1])<<8)
						if r := -b / v; r < 7 || r > 128 { // centred: -s·(2^bits-1)/2
							t.Fatalf("%s: bias/scale = %g, want the centre of the levels", bn, -r)
						}
					}
				}
				for range 200 {
					off := rng.Int64N(s.Size())
					n := rng.IntN(100000)
					got := make([]byte, n)
					k, err := s.ReadAt(got, off)
					want := all[off:min(off+int64(n), s.Size())]
					if k != len(want) || !bytes.Equal(got[:k], want) {
						t.Fatalf("%s: ReadAt(%d, %d) differs from the sequential read", s.Name, off, n)
					}
					if (err == io.EOF) != (off+int64(n) > s.Size()) || (err != nil && err != io.EOF) {
						t.Fatalf("%s: ReadAt(%d, %d): err %v", s.Name, off, n, err)
					}
				}
				d, err := s.ComputeDigests(1<<16 + 5)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(all)
				if d.SHA256 != hex.EncodeToString(sum[:]) || d.Size != s.Size() {
					t.Fatalf("%s: digest %s, sha256 of the bytes %x", s.Name, d.SHA256, sum)
				}
			}
			if seen != len(ix.WeightMap) {
				t.Fatalf("%d tensors in the shards, %d in the index", seen, len(ix.WeightMap))
			}
		})
	}
}

func TestDeterministicAndSeeded(t *testing.T) {
	cfg := smallConfig(t, "qwen3_5_moe.config.json")
	a, _ := New(cfg, 1, 4<<20)
	b, _ := New(cfg, 1, 4<<20)
	c, _ := New(cfg, 2, 4<<20)
	x, y, z := readAll(t, a.Shards[1]), readAll(t, b.Shards[1]), readAll(t, c.Shards[1])
	if !bytes.Equal(x, y) {
		t.Fatal("same seed, different bytes")
	}
	if bytes.Equal(x, z) {
		t.Fatal("different seeds, same bytes")
	}
	if a.Tag != b.Tag || a.Tag == c.Tag {
		t.Fatalf("tags %q %q %q", a.Tag, b.Tag, c.Tag)
	}
}

func TestCachedDigests(t *testing.T) {
	c, err := New(smallConfig(t, "qwen3_next.config.json"), 3, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "d", "digests.json")
	computed := 0
	first, err := c.CachedDigests(file, func(string, Digests) { computed++ })
	if err != nil {
		t.Fatal(err)
	}
	if computed != len(c.Shards) {
		t.Fatalf("computed %d of %d shards", computed, len(c.Shards))
	}
	computed = 0
	again, err := c.CachedDigests(file, func(string, Digests) { computed++ })
	if err != nil || computed != 0 {
		t.Fatalf("second call computed %d (err %v), want all from the cache", computed, err)
	}
	for n, d := range first {
		if again[n] != d {
			t.Fatalf("%s: cached %+v, computed %+v", n, again[n], d)
		}
	}
	other, _ := New(smallConfig(t, "qwen3_next.config.json"), 4, 4<<20)
	if _, err := other.CachedDigests(file, func(string, Digests) { computed++ }); err != nil || computed != len(other.Shards) {
		t.Fatalf("another seed reused the cache (computed %d, err %v)", computed, err)
	}
	if _, err := c.Files(map[string]Digests{}); err == nil {
		t.Fatal("Files without digests: no error")
	}
}

func TestFullSizeLayout(t *testing.T) {
	for _, tc := range []struct {
		cfg      string
		min, max int64
	}{{"qwen3_5_moe.config.json", 19e9, 21e9}, {"qwen3_next.config.json", 42e9, 46e9}} {
		b, err := os.ReadFile(filepath.Join("testdata", tc.cfg))
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(b, 1, 5e9)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, s := range c.Shards {
			total += s.Size()
			if s.Size() > 5e9+int64(len(s.header))+1<<30 {
				t.Fatalf("%s: %d bytes", s.Name, s.Size())
			}
		}
		if total < tc.min || total > tc.max {
			t.Fatalf("%s: %d bytes in %d shards, want %d..%d", tc.cfg, total, len(c.Shards), tc.min, tc.max)
		}
		t.Logf("%s: %d bytes in %d shards", tc.cfg, total, len(c.Shards))
	}
}

func FuzzNew(f *testing.F) {
	for _, n := range []string{"qwen3_5_moe.config.json", "qwen3_next.config.json"} {
		f.Add(smallConfig(f, n))
	}
	f.Fuzz(func(t *testing.T, cfg []byte) {
		c, err := New(cfg, 1, 1<<20)
		if err != nil {
			return
		}
		var total int64
		for _, s := range c.Shards {
			total += s.Size()
		}
		if total > 1<<26 {
			return // too big to read in a fuzz run
		}
		for _, s := range c.Shards {
			buf := make([]byte, 4096)
			if _, err := s.ReadAt(buf, 0); err != nil && err != io.EOF {
				t.Fatal(err)
			}
		}
	})
}
