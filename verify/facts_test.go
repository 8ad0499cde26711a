package verify

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/qpack"
	"github.com/zeebo/blake3"
)

// Every tiny checkpoint, quantized and float, of both architectures, passes
// with no receipt and no note saying a fact was left unchecked.
func TestFactsIntact(t *testing.T) {
	for _, ckpt := range []string{"qwen3_next-q4g64", "qwen3_next-q8g32", "qwen3_next-f32", "qwen3_5_moe-q4g32", "qwen3_5_moe-q8g64", "qwen3_5_moe-f32"} {
		t.Run(ckpt, func(t *testing.T) {
			f := newFixture(t, ckpt)
			if _, err := os.Stat(filepath.Join(f.dir, ReceiptName)); err == nil {
				t.Fatal("fixture has a receipt")
			}
			r := run(t, f.dir, Options{})
			wantStatus(t, r, StatusOK)
			free := 0
			for _, n := range r.Notes {
				if strings.Contains(n, "free-text fields") {
					free++
				} else if strings.Contains(n, "not checked") || strings.Contains(n, configName) {
					t.Fatalf("note: %s", n)
				}
			}
			if free != 1 {
				t.Fatalf("want one note on the free-text fields: %q", r.Notes)
			}
			// With a receipt, they are protected: no such note.
			rc, err := NewReceipt(r, "test", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := WriteReceipt(filepath.Join(f.dir, ReceiptName), rc); err != nil {
				t.Fatal(err)
			}
			r = run(t, f.dir, Options{})
			wantStatus(t, r, StatusOK)
			for _, n := range r.Notes {
				if strings.Contains(n, "free-text fields") {
					t.Fatalf("note with a receipt: %s", n)
				}
			}
		})
	}
}

// A manifest edited before any verification (so no receipt to compare
// with) is caught by what the layout and config.json say.
func TestFactsEdited(t *testing.T) {
	cases := []struct {
		name, ckpt, from, to string
		keys                 []string
	}{
		{"bits 4->5", "qwen3_next-q4g64", `"quantBits": 4`, `"quantBits": 5`, []string{"quantBits"}},
		{"bits 4->8", "qwen3_5_moe-q4g32", `"quantBits": 4`, `"quantBits": 8`, []string{"quantBits"}},
		{"group 64->32", "qwen3_next-q4g64", `"quantGroupSize": 64`, `"quantGroupSize": 32`, []string{"quantGroupSize"}},
		{"group 64->128", "qwen3_5_moe-q8g64", `"quantGroupSize": 64`, `"quantGroupSize": 128`, []string{"quantGroupSize"}},
		// bits x group unchanged: the layout cannot tell, config.json can.
		{"8/32->4/64", "qwen3_next-q8g32", `"quantBits": 8`, `"quantBits": 4`, []string{"quantBits"}},
		{"modelName", "qwen3_next-q4g64", `"modelName": "qwen3_next"`, `"modelName": "qwen3_nexu"`, []string{"modelName"}},
		{"modelName 3.5", "qwen3_5_moe-f32", `"modelName": "qwen3_5_moe"`, `"modelName": "qwen3_5_mod"`, []string{"modelName"}},
		{"float gets bits", "qwen3_next-f32", `"modelName": "qwen3_next"`, `"quantBits": 4, "modelName": "qwen3_next"`, []string{"quantBits"}},
		{"bits removed", "qwen3_next-q4g64", `"quantBits": 4,`, ``, []string{"quantBits"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.ckpt)
			editManifest(t, f.dir, func(s string) string { return strings.Replace(s, c.from, c.to, 1) })
			r := run(t, f.dir, Options{})
			wantStatus(t, r, StatusDamaged)
			if r.ExitCode() != 1 {
				t.Fatalf("exit %d", r.ExitCode())
			}
			for _, key := range c.keys {
				hit := find(r, func(p Problem) bool { return p.File == qpack.ManifestName && p.Key == key })
				if len(hit) == 0 || !strings.Contains(hit[0].String(), "manifest.json ["+key+"]") {
					t.Fatalf("no problem naming %s [%s]:\n%s", qpack.ManifestName, key, dump(r))
				}
			}
			onlyFile(t, r, qpack.ManifestName)
		})
	}
}

// rewriteConfig replaces config.json in a container and updates the
// manifest's size and digest for it, as a consistent writer would.
func rewriteConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, configName)
	var cfg map[string]any
	if err := json.Unmarshal(must(os.ReadFile(p)), &cfg); err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	data := must(json.MarshalIndent(cfg, "", "  "))
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(dir, qpack.ManifestName)
	m, err := qpack.ParseManifest(must(os.ReadFile(mp)))
	if err != nil {
		t.Fatal(err)
	}
	m.Files[configName] = int64(len(data))
	sum := blake3.Sum256(data)
	m.Ext.FileDigests[configName] = hex.EncodeToString(sum[:])
	if err := os.WriteFile(mp, must(m.Marshal()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A per-module override of the layer-0 expert projections wins over the
// global setting, for both module prefixes.
func TestFactsOverride(t *testing.T) {
	for _, c := range []struct{ ckpt, prefix string }{
		{"qwen3_next-q4g64", "model."},
		{"qwen3_5_moe-q4g32", "language_model.model."},
	} {
		t.Run(c.ckpt, func(t *testing.T) {
			f := newFixture(t, c.ckpt)
			bits, group := *f.manifest.QuantBits, *f.manifest.QuantGroupSize
			setQuant := func(withOverride bool) func(map[string]any) {
				return func(cfg map[string]any) {
					for _, key := range []string{"quantization", "quantization_config"} {
						q, ok := cfg[key].(map[string]any)
						if !ok {
							continue
						}
						q["bits"], q["group_size"] = 8, 128 // a global setting the experts do not use
						for _, proj := range qpack.Projections {
							m := c.prefix + "layers.0.mlp.switch_mlp." + proj
							if withOverride {
								q[m] = map[string]any{"bits": bits, "group_size": group}
							} else {
								delete(q, m)
							}
						}
					}
				}
			}
			rewriteConfig(t, f.dir, setQuant(true))
			wantStatus(t, run(t, f.dir, Options{}), StatusOK)

			rewriteConfig(t, f.dir, setQuant(false))
			r := run(t, f.dir, Options{})
			wantStatus(t, r, StatusDamaged)
			for _, key := range []string{"quantBits", "quantGroupSize"} {
				if len(find(r, func(p Problem) bool {
					return p.File == qpack.ManifestName && p.Key == key && strings.Contains(p.Message, configName)
				})) != 1 {
					t.Fatalf("want one %s problem against %s:\n%s", key, configName, dump(r))
				}
			}
		})
	}
}

func TestDeclaredQuant(t *testing.T) {
	projs := qpack.Projections
	for _, c := range []struct {
		name, cfg, prefix string
		havePrefix        bool
		want              *declQuant // nil: an error
	}{
		{"none", `{}`, "model.", true, &declQuant{}},
		{"null", `{"quantization": null}`, "model.", true, &declQuant{}},
		{"global", `{"quantization": {"bits": 4, "group_size": 64}}`, "model.", true, &declQuant{quantized: true, bits: 4, group: 64}},
		{"config key", `{"quantization_config": {"bits": 3, "group_size": 32}}`, "", false, &declQuant{quantized: true, bits: 3, group: 32}},
		{"override glu", `{"quantization": {"bits": 4, "group_size": 32,
			"model.layers.0.mlp.switch_glu.gate_proj": {"bits": 8, "group_size": 32},
			"model.layers.0.mlp.switch_glu.up_proj": {"bits": 8, "group_size": 32},
			"model.layers.0.mlp.switch_glu.down_proj": {"bits": 8, "group_size": 32}}}`, "model.", true, &declQuant{quantized: true, bits: 8, group: 32}},
		// mlx reads a missing group_size as its default 64 or as the
		// global 32, depending on the version: refused, not guessed.
		{"override ambiguous", `{"quantization": {"bits": 4, "group_size": 32,
			"model.layers.0.mlp.switch_glu.down_proj": {"bits": 8}}}`, "model.", true, nil},
		{"override under another prefix applies", `{"quantization": {"bits": 4, "group_size": 64,
			"model.layers.0.mlp.switch_mlp.gate_proj": {"bits": 8, "group_size": 32},
			"model.layers.0.mlp.switch_mlp.up_proj": {"bits": 8, "group_size": 32},
			"layers.0.mlp.switch_mlp.down_proj": {"bits": 8, "group_size": 32}}}`, "language_model.model.", true, &declQuant{quantized: true, bits: 8, group: 32}},
		{"no prefix: bare module paths", `{"quantization": {"bits": 4, "group_size": 64,
			"model.layers.0.mlp.switch_mlp.gate_proj": {"bits": 8, "group_size": 32}}}`, "", false, nil},
		{"no prefix, no entries: global", `{"quantization": {"bits": 4, "group_size": 64, "model.layers.0.mlp.gate": {"bits": 8, "group_size": 64}}}`, "", false, &declQuant{quantized: true, bits: 4, group: 64}},
		{"override false", `{"quantization": {"bits": 4, "group_size": 64,
			"m.layers.0.mlp.switch_mlp.gate_proj": false, "m.layers.0.mlp.switch_mlp.up_proj": false,
			"m.layers.0.mlp.switch_mlp.down_proj": false}}`, "m.", true, &declQuant{}},
		{"projections disagree", `{"quantization": {"bits": 4, "group_size": 64,
			"model.layers.0.mlp.switch_mlp.down_proj": {"bits": 8, "group_size": 64}}}`, "model.", true, nil},
		{"bits not a number", `{"quantization": {"bits": "4", "group_size": 64}}`, "model.", true, nil},
		{"negative group", `{"quantization": {"bits": 4, "group_size": -64}}`, "model.", true, nil},
		{"no bits", `{"quantization": {"group_size": 64}}`, "model.", true, nil},
		{"not an object", `{"quantization": [4, 64]}`, "model.", true, nil},
		{"override not an object", `{"quantization": {"bits": 4, "group_size": 64, "model.layers.0.mlp.switch_mlp.up_proj": 8}}`, "model.", true, nil},
	} {
		got, err := declaredQuant([]byte(c.cfg), c.prefix, c.havePrefix, projs)
		if c.want == nil {
			if err == nil {
				t.Errorf("%s: %+v, want an error", c.name, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got.quantized != c.want.quantized || got.bits != c.want.bits || got.group != c.want.group {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestLayoutQuantCheck(t *testing.T) {
	ip := func(v int) *int { return &v }
	// gate/up: 64 inputs; down: 32 inputs (packed 4-bit: 8 per U32).
	lq := &layoutQuant{quantized: true, projs: []projShape{{"gate_proj", 8, 1}, {"up_proj", 8, 1}, {"down_proj", 4, 1}}}
	down := &layoutQuant{quantized: true, projs: []projShape{{"gate_proj", 8, 1}, {"down_proj", 4, 1}}}
	for _, c := range []struct {
		name        string
		lq          *layoutQuant
		bits, group *int
		keys        []string
	}{
		{"4/64 fits gate", &layoutQuant{quantized: true, projs: lq.projs[:2]}, ip(4), ip(64), nil},
		{"down needs group 32", lq, ip(4), ip(64), []string{"quantBits"}},
		{"8/32 fits gate", &layoutQuant{quantized: true, projs: lq.projs[:1]}, ip(8), ip(32), nil},
		{"5 bits", down, ip(5), ip(64), []string{"quantBits"}},
		{"7 bits not allowed", down, ip(7), ip(64), []string{"quantBits"}},
		{"group 16 not allowed", down, ip(4), ip(16), []string{"quantGroupSize"}},
		{"absent", down, nil, nil, []string{"quantBits", "quantGroupSize"}},
		{"float, none", &layoutQuant{}, nil, nil, nil},
		{"float, bits", &layoutQuant{}, ip(4), nil, []string{"quantBits"}},
		{"float, group", &layoutQuant{}, nil, ip(64), []string{"quantGroupSize"}},
	} {
		got := c.lq.check(c.bits, c.group)
		var keys []string
		for _, p := range got {
			keys = append(keys, p.key)
		}
		if strings.Join(keys, ",") != strings.Join(c.keys, ",") {
			t.Errorf("%s: problems %v, want keys %v", c.name, got, c.keys)
		}
	}
}

// A container whose config.json the runner refuses is unusable, the field
// named; so is one whose config disagrees with its layout or dense tensors.
// CheckConfig refuses it before any source is opened.
func TestFactsRunnable(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(m map[string]any)
		key  string
		msg  string
	}{
		{"top-k above experts", func(m map[string]any) { m["num_experts_per_tok"] = 9 }, "num_experts_per_tok", "9 is more than num_experts 8"},
		{"absurd hidden", func(m map[string]any) { m["hidden_size"] = 1 << 40 }, "hidden_size", "above the limit 1048576 (MaxDim)"},
		{"layer kinds differ from the layout", func(m map[string]any) { m["full_attention_interval"] = 2 }, "layer_types", "layer 1 is full attention, but packed_experts/layout.json has it as linear attention"},
		{"experts differ from the layout", func(m map[string]any) { m["num_experts"] = 4 }, "num_experts", "4, but packed_experts/layout.json has 8 experts per layer"},
		{"vocab differs from the embedding", func(m map[string]any) { m["vocab_size"] = 500 }, "vocab_size", "500, but tensor model.embed_tokens.weight has shape [384"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, "qwen3_next-q4g64")
			rewriteConfig(t, f.dir, c.edit)
			r := run(t, f.dir, Options{})
			wantStatus(t, r, StatusUnusable)
			if len(find(r, func(p Problem) bool {
				return p.File == configName && p.Kind == KindStructure && p.Key == c.key && strings.Contains(p.Message, c.msg)
			})) != 1 {
				t.Fatalf("want one problem at %s %s saying %q:\n%s", configName, c.key, c.msg, dump(r))
			}
		})
	}
	f := newFixture(t, "qwen3_5_moe-q4g32")
	if err := CheckConfig(f.dir); err != nil {
		t.Fatalf("a good container: %v", err)
	}
	rewriteConfig(t, f.dir, func(m map[string]any) { m["text_config"].(map[string]any)["num_experts_per_tok"] = 9 })
	err := CheckConfig(f.dir)
	if !errors.Is(err, modelconfig.ErrConfig) || !strings.Contains(err.Error(), "config.json: text_config.num_experts_per_tok: 9 is more than num_experts 8") {
		t.Fatalf("err = %v", err)
	}
	// A damaged config.json is Verify's to report (exit 1), not a refusal.
	if err := os.WriteFile(filepath.Join(f.dir, configName), []byte(`{"model_type":"llama"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckConfig(f.dir); err != nil {
		t.Fatalf("damaged config: %v", err)
	}
}
