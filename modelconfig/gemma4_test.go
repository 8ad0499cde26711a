package modelconfig

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const gemma26B = "testdata/configs/gemma-4-26b-a4b-it-4bit.MLX.RECONSTRUCTED.config.json"

// The reconstructed 26B-A4B MLX config resolves to its published dims
// (../shared/reference/gemma4.md §2, §4).
func TestGemma4Reconstructed26B(t *testing.T) {
	data, err := os.ReadFile(gemma26B)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data, "config.json")
	if err != nil {
		t.Fatal(err)
	}
	g, ok := c.Extra.(*Gemma4)
	if !ok {
		t.Fatalf("Extra is %T", c.Extra)
	}
	if c.ModelType != TypeGemma4 || !c.Nested || c.TextDeclared != "gemma4_text" || c.Hidden != 2816 || c.Layers != 30 ||
		c.Vocab != 262144 || c.Heads != 16 || c.KVHeads != 8 || c.HeadDim != 256 || c.RotaryDim != 256 ||
		c.RopeTheta != 10000 || c.Experts != 128 || c.TopK != 8 || c.MoEIntermediate != 704 || c.Intermediate != 2112 ||
		!c.TieWordEmbeddings || c.Prefix != "language_model.model." || c.MaxPositions != 262144 {
		t.Errorf("common fields %+v", *c)
	}
	if g.SlidingWindow != 1024 || g.FullHeadDim != 512 || g.FullKVHeads != 2 || !g.AttentionKEqV ||
		g.FullRopeTheta != 1e6 || g.FullRopePairs != 64 || g.FullRopeFactor != 1 || g.FinalLogitSoftcap != 30 {
		t.Errorf("gemma4 fields %+v", *g)
	}
	for l := range 30 {
		if g.Sliding[l] != ((l+1)%6 != 0) || !c.FullAttention[l] || !c.Sparse[l] {
			t.Errorf("layer %d: sliding %v full-attention %v sparse %v", l, g.Sliding[l], c.FullAttention[l], c.Sparse[l])
		}
	}
	if p, ok := c.Quant.For("language_model.model.layers.7.router.proj"); !ok || p != (QuantParams{8, 64}) {
		t.Errorf("router quant %+v %v", p, ok)
	}
	if p, ok := c.Quant.For("language_model.model.layers.7.experts.switch_glu.gate_proj"); !ok || p != (QuantParams{4, 64}) {
		t.Errorf("expert quant %+v %v", p, ok)
	}
}

// The committed tiny Gemma 4 checkpoints parse, k_eq_v deciding the full
// layers' KV heads.
func TestGemma4Tiny(t *testing.T) {
	for _, tc := range []struct {
		dir       string
		fullKV    int
		kEqV      bool
		pairs     int
		quantized bool
	}{
		{"gemma4-f32", 1, true, 4, false},
		{"gemma4-q4g32", 1, true, 4, true},
		{"gemma4-nokeqv-f32", 2, false, 4, false},
		{"gemma4-towers-q4g64", 2, true, 8, true},
	} {
		c, err := Load(filepath.Join("..", "testdata", "tiny", tc.dir))
		if err != nil {
			t.Fatalf("%s: %v", tc.dir, err)
		}
		g := c.Extra.(*Gemma4)
		if g.FullKVHeads != tc.fullKV || g.AttentionKEqV != tc.kEqV || g.FullRopePairs != tc.pairs || c.Quant.Present != tc.quantized {
			t.Errorf("%s: %+v quant %v", tc.dir, *g, c.Quant.Present)
		}
	}
}

func gemmaEdit(t *testing.T, edit func(top, text map[string]any)) []byte {
	t.Helper()
	data, err := os.ReadFile(gemma26B)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m, m["text_config"].(map[string]any))
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// What the runner cannot run, or what converters would read differently,
// is refused naming the field.
func TestGemma4Refused(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(top, text map[string]any)
		want string
	}{
		{"per-layer inputs", func(_, x map[string]any) { x["hidden_size_per_layer_input"] = 256 }, "text_config.hidden_size_per_layer_input: 256: per-layer inputs"},
		{"kv sharing", func(_, x map[string]any) { x["num_kv_shared_layers"] = 20 }, "text_config.num_kv_shared_layers: 20"},
		{"no moe flag", func(_, x map[string]any) { delete(x, "enable_moe_block") }, "text_config.enable_moe_block: missing"},
		{"dense", func(_, x map[string]any) { x["enable_moe_block"] = false }, "text_config.enable_moe_block: false: a dense Gemma 4"},
		{"no layer types", func(_, x map[string]any) { delete(x, "layer_types") }, "text_config.layer_types: missing"},
		{"short layer types", func(_, x map[string]any) { x["layer_types"] = []string{"full_attention"} }, "text_config.layer_types: 1 entries for 30 layers"},
		{"bad layer type", func(_, x map[string]any) {
			lt := x["layer_types"].([]any)
			lt[3] = "chunked_attention"
		}, `text_config.layer_types[3]: "chunked_attention"`},
		{"activation", func(_, x map[string]any) { x["hidden_activation"] = "silu" }, `text_config.hidden_activation: "silu" is not supported`},
		{"rope type", func(_, x map[string]any) {
			x["rope_parameters"].(map[string]any)["full_attention"].(map[string]any)["rope_type"] = "yarn"
		}, `text_config.rope_parameters.full_attention.rope_type: "yarn" is not supported`},
		{"flat rope", func(_, x map[string]any) { x["rope_parameters"] = map[string]any{"rope_theta": 10000.0} }, "text_config.rope_parameters: want one object per layer type"},
		{"global kv", func(_, x map[string]any) { x["num_global_key_value_heads"] = 3 }, "text_config.num_global_key_value_heads: 3 does not divide num_attention_heads 16"},
		{"top k", func(_, x map[string]any) { x["top_k_experts"] = 200 }, "top_k_experts: 200 is more than num_experts 128"},
		{"tie", func(_, x map[string]any) { x["tie_word_embeddings"] = false }, "text_config.tie_word_embeddings: false, but the top-level tie_word_embeddings is true"},
		{"text type", func(_, x map[string]any) { x["model_type"] = "gemma3_text" }, `text_config.model_type: "gemma3_text" does not go with model_type "gemma4"`},
	} {
		_, err := Parse(gemmaEdit(t, tc.edit), "config.json")
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A bare gemma4_text config (the text model alone) uses model. prefixes.
func TestGemma4Bare(t *testing.T) {
	data := gemmaEdit(t, func(top, x map[string]any) {
		for k := range top {
			delete(top, k)
		}
		for k, v := range x {
			top[k] = v
		}
	})
	c, err := Parse(data, "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelType != TypeGemma4 || c.Nested || c.Prefix != "model." || c.Quant.Present {
		t.Errorf("%+v", *c)
	}
}

// gemma4Consistent is what the Gemma 4 forward pass relies on (FuzzParse
// checks it on every accepted config).
func gemma4Consistent(c *Config, g *Gemma4) bool {
	anyFull := false
	for _, s := range g.Sliding {
		anyFull = anyFull || !s
	}
	return len(g.Sliding) == c.Layers && g.SlidingWindow >= 1 &&
		g.FullHeadDim >= 2 && g.FullHeadDim%2 == 0 && g.FullKVHeads >= 1 &&
		(!anyFull || c.Heads%g.FullKVHeads == 0) &&
		g.FullRopePairs >= 0 && g.FullRopePairs <= g.FullHeadDim/2 && g.FullRopeFactor > 0 &&
		g.FinalLogitSoftcap >= 0 && c.Intermediate >= 1
}
