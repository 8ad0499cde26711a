package modelconfig

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestRefused(t *testing.T) {
	moe := readJSON(t, tinyMoE)
	next := readJSON(t, tinyNext)
	text := func(m map[string]any) map[string]any { return m["text_config"].(map[string]any) }
	q := func(m map[string]any) map[string]any {
		delete(m, "quantization_config")
		return m["quantization"].(map[string]any)
	}
	for _, tc := range []struct {
		name        string
		base        map[string]any
		edit        func(m map[string]any)
		want        string // in the message, with the field
		unsupported bool
	}{
		{"llama", next, func(m map[string]any) { m["model_type"] = "llama" }, `model_type: "llama" is not supported (supported: gemma4, qwen3_5_moe, qwen3_next)`, true},
		{"dense qwen3", next, func(m map[string]any) { m["model_type"] = "qwen3" }, `model_type: "qwen3" is not supported`, true},
		{"qwen3_moe", next, func(m map[string]any) { m["model_type"] = "qwen3_moe" }, `"qwen3_moe" is not supported`, true},
		{"dense qwen3_5", moe, func(m map[string]any) { m["model_type"] = "qwen3_5"; delete(text(m), "num_experts") }, `a dense Qwen3.5`, true},
		{"dense qwen3_next", next, func(m map[string]any) { m["mlp_only_layers"] = []any{0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0} }, "num_experts: no layer has routed experts", true},
		{"no model_type", next, func(m map[string]any) { delete(m, "model_type") }, "model_type: missing", true},
		{"model_type not a string", next, func(m map[string]any) { m["model_type"] = 5.0 }, "model_type: 5 is not a string", false},
		{"text type mismatch", moe, func(m map[string]any) { text(m)["model_type"] = "llama" }, `text_config.model_type: "llama" does not go with model_type "qwen3_5_moe"`, false},
		{"text_config not an object", moe, func(m map[string]any) { m["text_config"] = 5.0 }, "text_config: 5 is not an object", false},
		{"negative hidden", moe, func(m map[string]any) { text(m)["hidden_size"] = -1.0 }, "text_config.hidden_size: -1 is below the minimum 1", false},
		{"zero layers", next, func(m map[string]any) { m["num_hidden_layers"] = 0.0 }, "num_hidden_layers: 0 is below the minimum 1", false},
		{"absurd hidden", next, func(m map[string]any) { m["hidden_size"] = float64(1 << 30) }, "hidden_size: 1073741824 is above the limit 1048576 (MaxDim)", false},
		{"absurd experts", next, func(m map[string]any) { m["num_experts"] = 1e9 }, "num_experts: 1000000000 is above the limit 65536 (MaxExperts)", false},
		{"absurd layers", next, func(m map[string]any) { m["num_hidden_layers"] = 5000.0 }, "(MaxLayers)", false},
		{"absurd vocab", next, func(m map[string]any) { m["vocab_size"] = 1e8 }, "(MaxVocab)", false},
		{"absurd heads x dim", next, func(m map[string]any) {
			m["num_attention_heads"] = 4096.0
			m["num_key_value_heads"] = 4096.0
			m["head_dim"] = 4096.0
		}, "num_attention_heads: 4096 heads x 4096 dims is above the limit", false},
		{"missing dim", next, func(m map[string]any) { delete(m, "linear_key_head_dim") }, "linear_key_head_dim: missing", false},
		{"string number", next, func(m map[string]any) { m["num_hidden_layers"] = "8" }, `num_hidden_layers: "8" is not a number`, false},
		{"fraction", next, func(m map[string]any) { m["num_hidden_layers"] = 4.5 }, "num_hidden_layers: 4.5 is not an integer", false},
		{"top-k above experts", moe, func(m map[string]any) { text(m)["num_experts_per_tok"] = 9.0 }, "text_config.num_experts_per_tok: 9 is more than num_experts 8", false},
		{"layer_types too short", moe, func(m map[string]any) { text(m)["layer_types"] = []any{"full_attention"} }, "text_config.layer_types: 1 entries for 8 layers", false},
		{"layer_types bad value", moe, func(m map[string]any) { text(m)["layer_types"].([]any)[2] = "sliding_attention" }, `text_config.layer_types[2]: "sliding_attention"`, false},
		{"layer_types against interval", moe, func(m map[string]any) { text(m)["full_attention_interval"] = 2.0 }, "layer 1 is linear_attention, but full_attention_interval 2 makes it full_attention", false},
		{"kv heads do not divide", next, func(m map[string]any) { m["num_key_value_heads"] = 3.0 }, "num_attention_heads: 4 is not a multiple of num_key_value_heads 3", false},
		{"linear heads do not divide", next, func(m map[string]any) { m["linear_num_value_heads"] = 3.0 }, "linear_num_value_heads: 3 is not a multiple of linear_num_key_heads 2", false},
		{"head_dim not derivable", next, func(m map[string]any) {
			delete(m, "head_dim")
			m["num_attention_heads"] = 6.0
			m["num_key_value_heads"] = 6.0
		}, "head_dim: missing, and hidden_size 64 is not a multiple of num_attention_heads 6", false},
		{"odd rotary", next, func(m map[string]any) { m["partial_rotary_factor"] = 0.3 }, "not a positive even integer", false},
		{"no rope_theta", moe, func(m map[string]any) { delete(text(m)["rope_parameters"].(map[string]any), "rope_theta") }, "text_config.rope_theta: missing", false},
		{"rope yarn", moe, func(m map[string]any) { text(m)["rope_parameters"].(map[string]any)["rope_type"] = "yarn" }, `text_config.rope_parameters.rope_type: "yarn" is not supported`, false},
		{"rope theta disagrees (qwen3_next)", next, func(m map[string]any) { m["rope_parameters"] = map[string]any{"rope_theta": 1e6} }, "rope_parameters.rope_theta: 1e+06, but rope_theta is 1e+07", false},
		{"rope theta only at the top (qwen3_5_moe)", moe, func(m map[string]any) {
			delete(text(m)["rope_parameters"].(map[string]any), "rope_theta")
			text(m)["rope_theta"] = 1e7
		}, "text_config.rope_theta: 1e+07, but not in rope_parameters, where mlx-lm reads it (taking 100000 instead)", false},
		{"v4 rope keys (qwen3_5_moe)", moe, func(m map[string]any) {
			delete(text(m), "rope_parameters")
			text(m)["rope_theta"] = 1e7
		}, "text_config.rope_theta: 1e+07, but not in rope_parameters", false},
		{"partial factor only at the top (qwen3_5_moe)", moe, func(m map[string]any) {
			delete(text(m)["rope_parameters"].(map[string]any), "partial_rotary_factor")
			text(m)["partial_rotary_factor"] = 0.5
		}, "text_config.partial_rotary_factor: 0.5, but not in rope_parameters", false},
		{"num_local_experts is no alias", next, func(m map[string]any) { m["num_local_experts"] = m["num_experts"]; delete(m, "num_experts") }, "num_experts: missing", false},
		{"head_dim absent, tools disagree", next, func(m map[string]any) { delete(m, "head_dim") }, "head_dim: missing: mlx-lm derives hidden_size / num_attention_heads = 16, transformers takes 256", false},
		{"absurd float", next, func(m map[string]any) { m["rope_theta"] = 1e31 }, "rope_theta: 1e+31 is out of range", false},
		{"tie disagrees", moe, func(m map[string]any) { m["tie_word_embeddings"] = true }, "text_config.tie_word_embeddings: false, but the top-level tie_word_embeddings is true", false},
		{"gelu", next, func(m map[string]any) { m["hidden_act"] = "gelu" }, `hidden_act: "gelu" is not supported`, false},
		{"attention bias", next, func(m map[string]any) { m["attention_bias"] = true }, "attention_bias: true is not supported", false},
		{"mlp_only_layers in qwen3_5_moe", moe, func(m map[string]any) { text(m)["mlp_only_layers"] = []any{1.0} }, "text_config.mlp_only_layers: [1] is not supported for qwen3_5_moe", false},
		{"norm_topk false in qwen3_5_moe", moe, func(m map[string]any) { text(m)["norm_topk_prob"] = false }, "text_config.norm_topk_prob: false is not supported", false},
		{"mlp_only_layers out of range", next, func(m map[string]any) { m["mlp_only_layers"] = []any{9.0} }, "mlp_only_layers[0]: 9 is above the limit 7 (num_hidden_layers - 1)", false},
		{"dense layer, no intermediate_size", next, func(m map[string]any) { m["mlp_only_layers"] = []any{1.0}; delete(m, "intermediate_size") }, "intermediate_size: missing, but some layers have a dense MLP", false},
		{"bits 7", next, func(m map[string]any) { q(m)["bits"] = 7.0 }, "quantization.bits: 7 is not supported (want one of 2, 3, 4, 5, 6, 8)", false},
		{"group 48", next, func(m map[string]any) { q(m)["group_size"] = 48.0 }, "quantization.group_size: 48 is not supported (want one of 32, 64, 128)", false},
		{"no bits", next, func(m map[string]any) { delete(q(m), "bits") }, "quantization.bits: missing", false},
		{"mxfp4", next, func(m map[string]any) { q(m)["mode"] = "mxfp4" }, `quantization.mode: quantization mode "mxfp4" is not supported (only MLX affine)`, false},
		{"override mode", next, func(m map[string]any) {
			q(m)["model.layers.0.mlp.gate"] = map[string]any{"bits": 8.0, "group_size": 64.0, "mode": "nvfp4"}
		}, `quantization["model.layers.0.mlp.gate"].mode: quantization mode "nvfp4"`, false},
		{"override bad bits", next, func(m map[string]any) {
			q(m)["model.layers.0.mlp.gate"] = map[string]any{"bits": "8", "group_size": 64.0}
		}, `quantization["model.layers.0.mlp.gate"].bits: "8" is not a number`, false},
		{"override ambiguous", next, func(m map[string]any) {
			q(m)["group_size"] = 32.0
			q(m)["model.layers.0.mlp.gate"] = map[string]any{"bits": 8.0}
		}, `quantization["model.layers.0.mlp.gate"].group_size: missing: ambiguous`, false},
		{"override not an object", next, func(m map[string]any) { q(m)["model.layers.0.mlp.gate"] = 8.0 }, `quantization["model.layers.0.mlp.gate"]: 8 is neither an object nor a boolean`, false},
		{"override under two prefixes", moe, func(m map[string]any) {
			q(m)["layers.0.mlp.gate"] = map[string]any{"bits": 4.0, "group_size": 64.0}
		}, `disagrees with`, false},
		{"quant_method", next, func(m map[string]any) {
			delete(m, "quantization")
			m["quantization_config"] = map[string]any{"quant_method": "awq", "bits": 4.0}
		}, `quantization_config.quant_method: "awq" is not supported`, false},
		{"quantization not an object", next, func(m map[string]any) { m["quantization"] = []any{4.0, 64.0} }, "quantization: [4,64] is not an object", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := deepCopy(t, tc.base)
			tc.edit(m)
			c, err := Parse(marshal(t, m), "x/config.json")
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("%v: not ErrConfig", err)
			}
			if errors.Is(err, ErrUnsupported) != tc.unsupported {
				t.Errorf("%v: ErrUnsupported %v, want %v", err, !tc.unsupported, tc.unsupported)
			}
			if !strings.HasPrefix(err.Error(), "x/config.json: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v\nwant one naming x/config.json and containing %q", err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != "x/config.json" {
				t.Errorf("no *Error naming the file in %v", err)
			}
		})
	}
}

func TestNotJSON(t *testing.T) {
	for _, doc := range []string{``, `[1,2]`, `null`, `{"model_type":`, strings.Repeat(" ", MaxBytes+1)} {
		if _, err := Parse([]byte(doc), "config.json"); err == nil || !errors.Is(err, ErrConfig) {
			t.Errorf("%.20q: err = %v", doc, err)
		}
	}
}

// A parse reports every problem, each with its field, like go/types.
func TestCollectsAll(t *testing.T) {
	m := readJSON(t, tinyMoE)
	tc := m["text_config"].(map[string]any)
	tc["hidden_size"] = -5.0
	tc["num_experts_per_tok"] = 99.0
	tc["linear_conv_kernel_dim"] = 1000.0
	m["quantization"].(map[string]any)["bits"] = 9.0
	delete(m, "quantization_config")
	_, err := Parse(marshal(t, m), "config.json")
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("err = %v, want an ErrorList", err)
	}
	fields := map[string]bool{}
	for _, e := range list {
		fields[e.Field] = true
	}
	for _, f := range []string{"text_config.hidden_size", "text_config.num_experts_per_tok", "text_config.linear_conv_kernel_dim", "quantization.bits"} {
		if !fields[f] {
			t.Errorf("no problem at %s in %v", f, err)
		}
	}
	if !strings.HasPrefix(err.Error(), "config.json: 4 problems: ") {
		t.Errorf("message %q", err)
	}
}

func TestLoad(t *testing.T) {
	c, err := Load("../testdata/tiny/qwen3_next-f32")
	if err != nil || c.ModelType != TypeQwen3Next || c.Quant.Present {
		t.Fatalf("%+v %v", c, err)
	}
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no config.json: %v", err)
	}
	if err := os.WriteFile(dir+"/config.json", []byte(`{"model_type":"llama"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), dir+"/config.json: model_type") {
		t.Fatalf("err = %v, want one naming the path", err)
	}
}

func TestCheckTensors(t *testing.T) {
	c, err := Load("../testdata/tiny/qwen3_5_moe-f32")
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int64{
		"language_model.model.embed_tokens.weight":      {384, 64},
		"language_model.lm_head.weight":                 {384, 64},
		"language_model.model.layers.0.mlp.gate.weight": {8, 64},
	}
	of := func(n string) ([]int64, bool) { s, ok := shapes[n]; return s, ok }
	if err := c.CheckTensors("model.safetensors", of); err != nil {
		t.Fatal(err)
	}
	shapes["language_model.model.embed_tokens.weight"] = []int64{512, 64}
	shapes["language_model.model.layers.0.mlp.gate.weight"] = []int64{16, 64}
	err = c.CheckTensors("config.json", of)
	if err == nil || !strings.Contains(err.Error(), "text_config.vocab_size: 384, but tensor language_model.model.embed_tokens.weight has shape [512 64]") ||
		!strings.Contains(err.Error(), "text_config.num_experts: 8, but tensor language_model.model.layers.0.mlp.gate.weight") || !errors.Is(err, ErrConfig) {
		t.Fatalf("err = %v", err)
	}
}
