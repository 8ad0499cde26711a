package modelconfig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readJSON(t testing.TB, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func marshal(t testing.TB, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deepCopy copies a decoded JSON document.
func deepCopy(t testing.TB, m map[string]any) map[string]any {
	var out map[string]any
	if err := json.Unmarshal(marshal(t, m), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

const tinyMoE = "../testdata/tiny/qwen3_5_moe-q4g32/config.json"
const tinyNext = "../testdata/tiny/qwen3_next-q4g64/config.json"

func TestRealConfigs(t *testing.T) {
	for _, tc := range []struct {
		file                         string
		arch                         string
		layers, experts, topk, vocab int
		quant                        bool
		router                       string
	}{
		{"testdata/configs/Qwen3-Next-80B-A3B-Instruct-4bit.MLX.RECONSTRUCTED.config.json", TypeQwen3Next, 48, 512, 10, 151936, true, "model.layers.5.mlp.gate"},
		{"testdata/configs/Qwen3-Next-80B-A3B-Instruct.RECONSTRUCTED.config.json", TypeQwen3Next, 48, 512, 10, 151936, false, ""},
		{"testdata/configs/Qwen3.6-35B-A3B-4bit.MLX-LM.RECONSTRUCTED.config.json", TypeQwen35MoE, 40, 256, 8, 248320, true, "language_model.model.layers.5.mlp.gate"},
		{"testdata/configs/Qwen3.6-35B-A3B.verl-npu.config.json", TypeQwen35MoE, 40, 256, 8, 248320, false, ""},
	} {
		data, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(data, filepath.Base(tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if c.ModelType != tc.arch || c.Layers != tc.layers || c.Experts != tc.experts || c.TopK != tc.topk || c.Vocab != tc.vocab {
			t.Fatalf("%s: got %+v", tc.file, c)
		}
		if c.Hidden != 2048 || c.Heads != 16 || c.KVHeads != 2 || c.HeadDim != 256 || c.RotaryDim != 64 || c.RopeTheta != 1e7 {
			t.Fatalf("%s: attention dims %+v", tc.file, c)
		}
		if c.ConvDim() != 8192 || c.LinValueHeads != 32 || c.LinKeyHeads != 16 || c.MoEIntermediate != 512 || c.SharedIntermediate != 512 {
			t.Fatalf("%s: linear dims %+v", tc.file, c)
		}
		if c.MaxPositions != 262144 || !c.NormTopK || c.TieWordEmbeddings || !c.AttnOutputGate {
			t.Fatalf("%s: %+v", tc.file, c)
		}
		for l := range c.Layers {
			if c.FullAttention[l] != ((l+1)%4 == 0) || !c.Sparse[l] {
				t.Fatalf("%s: layer %d full=%v sparse=%v", tc.file, l, c.FullAttention[l], c.Sparse[l])
			}
		}
		if c.Quant.Present != tc.quant {
			t.Fatalf("%s: quant present %v", tc.file, c.Quant.Present)
		}
		if tc.quant {
			if c.Quant.Global != (QuantParams{4, 64}) {
				t.Fatalf("%s: global %+v", tc.file, c.Quant.Global)
			}
			if p, ok := c.Quant.For(tc.router); !ok || p != (QuantParams{8, 64}) {
				t.Fatalf("%s: router %+v", tc.file, p)
			}
			if p, ok := c.Quant.For(strings.Replace(tc.router, "mlp.gate", "mlp.shared_expert.up_proj", 1)); !ok || p != (QuantParams{4, 64}) {
				t.Fatalf("%s: shared expert %+v", tc.file, p)
			}
		}
	}
}

// normalised drops what says how the config was spelled, so two spellings
// of one model compare equal.
func normalised(c *Config) Config {
	n := *c
	n.Declared, n.TextDeclared, n.Nested = "", "", false
	n.Quant.canon = nil
	ov := map[string]QuantParams{}
	for k, v := range c.Quant.Overrides {
		ov[CanonicalModule(k)] = v
	}
	n.Quant.Overrides = ov
	return n
}

func TestToleratedVariants(t *testing.T) {
	base := readJSON(t, tinyMoE)
	want, err := Parse(marshal(t, base), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	text := func(m map[string]any) map[string]any { return m["text_config"].(map[string]any) }
	quant := func(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		// diff, when set, adjusts want for a variant that is the same model
		// under other tensor names.
		diff func(c *Config)
	}{
		{"mlx-lm text_config.model_type qwen3_5", func(m map[string]any) { text(m)["model_type"] = "qwen3_5" }, nil},
		{"text_config.model_type qwen3_5_text", func(m map[string]any) { text(m)["model_type"] = "qwen3_5_text" }, nil},
		{"text_config.model_type qwen3_5_moe", func(m map[string]any) { text(m)["model_type"] = "qwen3_5_moe" }, nil},
		{"no text_config.model_type", func(m map[string]any) { delete(text(m), "model_type") }, nil},
		{"top-level qwen3_5 with experts", func(m map[string]any) { m["model_type"] = "qwen3_5"; text(m)["model_type"] = "qwen3_5" }, nil},
		{"flat (mlx-lm reads it)", func(m map[string]any) {
			for k, v := range text(m) {
				if k != "model_type" {
					m[k] = v
				}
			}
			delete(m, "text_config")
		}, nil},
		{"bare text model", func(m map[string]any) {
			for k, v := range text(m) {
				m[k] = v
			}
			delete(m, "text_config")
			for _, q := range []string{"quantization", "quantization_config"} {
				for k, v := range quant(m, q) {
					if strings.HasPrefix(k, "language_model.") {
						delete(quant(m, q), k)
						quant(m, q)[strings.TrimPrefix(k, "language_model.")] = v
					}
				}
			}
		}, func(c *Config) { c.Prefix, c.HeadPrefix = "model.", "lm_head." }},
		{"overrides without language_model. prefix", func(m map[string]any) {
			for _, q := range []string{"quantization", "quantization_config"} {
				for k, v := range quant(m, q) {
					if strings.HasPrefix(k, "language_model.model.") {
						delete(quant(m, q), k)
						quant(m, q)[strings.TrimPrefix(k, "language_model.model.")] = v
					}
				}
			}
		}, nil},
		{"only quantization_config", func(m map[string]any) { delete(m, "quantization") }, nil},
		{"only quantization", func(m map[string]any) { delete(m, "quantization_config") }, nil},
		{"quantization inside text_config", func(m map[string]any) {
			text(m)["quantization"] = m["quantization"]
			delete(m, "quantization")
			delete(m, "quantization_config")
		}, nil},
		// transformers and mlx-lm's qwen3_5 both take rope_parameters'.
		{"top-level rope_theta differs", func(m map[string]any) { text(m)["rope_theta"] = 1e6 }, nil},
		{"top-level partial_rotary_factor equal", func(m map[string]any) { text(m)["partial_rotary_factor"] = 0.25 }, nil},
		{"head_dim absent, 256 either way", func(m map[string]any) {
			text(m)["head_dim"] = nil
			text(m)["hidden_size"] = 1024.0
		}, func(c *Config) { c.HeadDim, c.RotaryDim, c.Hidden = 256, 64, 1024 }},
		{"rope type spelled type", func(m map[string]any) {
			rp := text(m)["rope_parameters"].(map[string]any)
			delete(rp, "rope_type")
			rp["type"] = "mrope"
		}, nil},
		{"no layer_types", func(m map[string]any) { delete(text(m), "layer_types") }, nil},
		{"no full_attention_interval", func(m map[string]any) { delete(text(m), "full_attention_interval") }, nil},
		{"tie only at the top", func(m map[string]any) { delete(text(m), "tie_word_embeddings") }, nil},
		{"tie only in text_config", func(m map[string]any) { delete(m, "tie_word_embeddings") }, nil},
		{"nulls are absent", func(m map[string]any) { text(m)["rope_scaling"] = nil; m["quantization"] = nil }, nil},
		{"integral float", func(m map[string]any) { text(m)["hidden_size"] = 64.0 }, nil},
		{"override true", func(m map[string]any) {
			quant(m, "quantization")["language_model.model.layers.0.mlp.shared_expert.up_proj"] = true
			delete(m, "quantization_config")
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := deepCopy(t, base)
			tc.edit(m)
			got, err := Parse(marshal(t, m), "config.json")
			if err != nil {
				t.Fatal(err)
			}
			w := *want
			if tc.diff != nil {
				tc.diff(&w)
			}
			if g, w := normalised(got), normalised(&w); !reflect.DeepEqual(g, w) {
				t.Fatalf("resolved to\n%+v\nwant\n%+v", g, w)
			}
			for _, mod := range []string{"language_model.model.layers.3.mlp.gate", "model.layers.3.mlp.gate", "layers.3.mlp.gate"} {
				if p, ok := got.Quant.For(mod); !ok || p != (QuantParams{8, 64}) {
					t.Errorf("For(%s) = %v %v, want 8 bits group 64", mod, p, ok)
				}
			}
			if p, ok := got.Quant.For("language_model.model.layers.3.mlp.switch_mlp.up_proj"); !ok || p != (QuantParams{4, 32}) {
				t.Errorf("expert quant %v %v", p, ok)
			}
		})
	}
}

func TestQwen3NextOptions(t *testing.T) {
	m := readJSON(t, tinyNext)
	m["num_hidden_layers"] = 4.0
	m["mlp_only_layers"] = []any{1.0}
	m["norm_topk_prob"] = false
	m["tie_word_embeddings"] = true
	delete(m, "rope_theta")
	delete(m, "partial_rotary_factor")
	m["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5}
	m["quantization"] = map[string]any{"bits": 3.0, "group_size": 64.0, "model.layers.0.mlp.gate": map[string]any{"bits": 8.0}, "model.layers.1.mlp.up_proj": false}
	delete(m, "quantization_config")
	delete(m, "max_position_embeddings")
	c, err := Parse(marshal(t, m), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxPositions != 0 || c.RopeTheta != 500 || c.RotaryDim != 8 || c.NormTopK || !c.TieWordEmbeddings {
		t.Fatalf("%+v", c)
	}
	if c.Sparse[1] || !c.Sparse[0] || !c.FullAttention[3] || c.FullAttention[2] {
		t.Fatalf("sparse %v full %v", c.Sparse, c.FullAttention)
	}
	if p, _ := c.Quant.For("model.layers.0.mlp.gate"); p != (QuantParams{8, 64}) {
		t.Fatalf("override without group_size, global group 64: %+v", p)
	}
	if p, _ := c.Quant.For("model.layers.0.mlp.shared_expert.up_proj"); p != (QuantParams{3, 64}) {
		t.Fatalf("global %+v", p)
	}
	if _, ok := c.Quant.For("model.layers.1.mlp.up_proj"); ok {
		t.Fatal("disabled module reported as quantized")
	}
	m["decoder_sparse_step"] = 2.0
	m["mlp_only_layers"] = []any{}
	if c, err = Parse(marshal(t, m), "config.json"); err != nil {
		t.Fatal(err)
	}
	if c.Sparse[0] || !c.Sparse[1] || c.Sparse[2] || !c.Sparse[3] {
		t.Fatalf("decoder_sparse_step 2: sparse %v", c.Sparse)
	}
}

// mlx-lm reads "quantization" first; a differing quantization_config is
// not what it loads with.
func TestQuantizationFirst(t *testing.T) {
	m := readJSON(t, tinyNext)
	m["quantization_config"].(map[string]any)["bits"] = 8.0
	c, err := Parse(marshal(t, m), "config.json")
	if err != nil || c.Quant.Global != (QuantParams{4, 64}) {
		t.Fatalf("%+v %v", c, err)
	}
}
