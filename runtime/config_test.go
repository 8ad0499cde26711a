package runtime

import (
	"os"
	"strings"
	"testing"
)

func TestParseRealConfigs(t *testing.T) {
	for _, tc := range []struct {
		file       string
		typ        string
		layers     int
		experts    int
		topk       int
		vocab      int
		quant      bool
		routerPath string
	}{
		{"qwen3_next_80b_4bit.json", TypeQwen3Next, 48, 512, 10, 151936, true, "model.layers.5.mlp.gate"},
		{"qwen3_6_35b_4bit.json", TypeQwen35MoE, 40, 256, 8, 248320, true, "language_model.model.layers.5.mlp.gate"},
		{"qwen3_6_35b_hf.json", TypeQwen35MoE, 40, 256, 8, 248320, false, ""},
	} {
		data, err := os.ReadFile("testdata/configs/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseConfig(data)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if c.ModelType != tc.typ || c.Layers != tc.layers || c.Experts != tc.experts || c.TopK != tc.topk || c.Vocab != tc.vocab {
			t.Fatalf("%s: got %+v", tc.file, c)
		}
		if c.Hidden != 2048 || c.Heads != 16 || c.KVHeads != 2 || c.HeadDim != 256 || c.RotaryDim != 64 || c.RopeTheta != 1e7 {
			t.Fatalf("%s: attention dims %+v", tc.file, c)
		}
		if c.ConvDim() != 8192 || c.LinValueHeads != 32 || c.LinKeyHeads != 16 || c.MoEIntermediate != 512 || c.SharedIntermediate != 512 {
			t.Fatalf("%s: linear dims %+v", tc.file, c)
		}
		if c.MaxPositions != 262144 {
			t.Fatalf("%s: max_position_embeddings %d, want 262144", tc.file, c.MaxPositions)
		}
		if !c.NormTopK || c.TieWordEmbeddings || !c.AttnOutputGate {
			t.Fatalf("%s: flags %+v", tc.file, c)
		}
		full := 0
		for l, f := range c.FullAttention {
			if f != ((l+1)%4 == 0) {
				t.Fatalf("%s: layer %d full=%v", tc.file, l, f)
			}
			if f {
				full++
			}
			if !c.Sparse[l] {
				t.Fatalf("%s: layer %d not sparse", tc.file, l)
			}
		}
		if full != tc.layers/4 {
			t.Fatalf("%s: %d full-attention layers", tc.file, full)
		}
		if c.Quant.Present != tc.quant {
			t.Fatalf("%s: quant present %v", tc.file, c.Quant.Present)
		}
		if tc.quant {
			if c.Quant.Global != (QuantParams{4, 64}) {
				t.Fatalf("%s: global %+v", tc.file, c.Quant.Global)
			}
			p, ok := c.Quant.For(tc.routerPath)
			if !ok || p != (QuantParams{8, 64}) {
				t.Fatalf("%s: router %+v", tc.file, p)
			}
			p, ok = c.Quant.For(strings.Replace(tc.routerPath, "mlp.gate", "mlp.shared_expert.up_proj", 1))
			if !ok || p != (QuantParams{4, 64}) {
				t.Fatalf("%s: shared expert %+v", tc.file, p)
			}
		}
	}
}

const tinyNext = `{"model_type":"qwen3_next","hidden_size":64,"num_hidden_layers":4,"vocab_size":384,
"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"partial_rotary_factor":0.25,
"rope_theta":10000000,"rms_norm_eps":1e-6,"linear_conv_kernel_dim":4,"linear_key_head_dim":16,
"linear_value_head_dim":16,"linear_num_key_heads":2,"linear_num_value_heads":4,"num_experts":8,
"num_experts_per_tok":2,"moe_intermediate_size":64,"shared_expert_intermediate_size":64,
"intermediate_size":128,"norm_topk_prob":false,"tie_word_embeddings":true %s}`

func TestParseConfigOptions(t *testing.T) {
	c, err := ParseConfig([]byte(strings.Replace(tinyNext, "%s", `,"mlp_only_layers":[1],"decoder_sparse_step":1,
"rope_parameters":{"rope_type":"default","rope_theta":500,"partial_rotary_factor":0.5},
"quantization":{"bits":3,"group_size":32,"model.layers.0.mlp.gate":{"bits":8},"model.layers.1.mlp.up_proj":false}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxPositions != 0 {
		t.Fatalf("no max_position_embeddings gave MaxPositions %d, want 0 (no limit)", c.MaxPositions)
	}
	if c.RopeTheta != 500 || c.RotaryDim != 8 || c.NormTopK || !c.TieWordEmbeddings {
		t.Fatalf("%+v", c)
	}
	if c.Sparse[1] || !c.Sparse[0] || !c.FullAttention[3] || c.FullAttention[2] {
		t.Fatalf("sparse %v full %v", c.Sparse, c.FullAttention)
	}
	if p, _ := c.Quant.For("model.layers.0.mlp.gate"); p != (QuantParams{8, 64}) {
		t.Fatalf("override without group_size takes MLX's default 64: %+v", p)
	}
	if p, _ := c.Quant.For("model.layers.0.mlp.shared_expert.up_proj"); p != (QuantParams{3, 32}) {
		t.Fatalf("global %+v", p)
	}
	if _, ok := c.Quant.For("model.layers.1.mlp.up_proj"); ok {
		t.Fatal("disabled module reported as quantized")
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{`,"quantization":{"bits":4,"group_size":32,"mode":"mxfp4"}`, `mode "mxfp4" is not supported`},
		{`,"quantization":{"bits":4,"group_size":64,"model.layers.0.mlp.gate":{"bits":8,"mode":"nvfp4"}}`, `quantization["model.layers.0.mlp.gate"]: quantization mode "nvfp4"`},
		{`,"quantization":{"bits":7,"group_size":64}`, "bits 7 not supported"},
		{`,"quantization":{"bits":4,"group_size":48}`, "group_size 48 not supported"},
		{`,"layer_types":["full_attention"]`, "layer_types has 1 entries for 4 layers"},
		{`,"layer_types":["full_attention","x","x","x"]`, `layer_types[1] = "x"`},
		{`,"rope_parameters":{"rope_type":"yarn"}`, `rope type "yarn" not supported`},
		{`,"num_key_value_heads":3`, "not a multiple of num_key_value_heads"},
		{`,"hidden_size":-1`, "hidden_size = -1 out of range"},
		{`,"partial_rotary_factor":0.3`, "not a positive even integer"},
		{`,"mlp_only_layers":[9]`, "mlp_only_layers entry 9 out of range"},
		{`,"quantization":{"quant_method":"awq"}`, `quantization method "awq" is not supported`},
		{`,"max_position_embeddings":0`, "max_position_embeddings = 0 out of range"},
	} {
		// later keys override earlier ones in encoding/json
		_, err := ParseConfig([]byte(strings.Replace(tinyNext, "%s", tc.extra, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.extra, err, tc.want)
		}
	}
	for _, tc := range []struct{ doc, want string }{
		{`{"model_type":"llama"}`, `model_type "llama" is not supported`},
		{`{}`, "no model_type"},
		{`{"model_type":"qwen3_5_moe"}`, "without \"text_config\""},
		{`{"model_type":"qwen3_next"}`, "hidden_size missing"},
		{`[1,2]`, "config:"},
	} {
		_, err := ParseConfig([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, name := range []string{"qwen3_6_35b_hf.json"} {
		data, err := os.ReadFile("testdata/configs/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(strings.Replace(tinyNext, "%s", "", 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if len(c.FullAttention) != c.Layers || len(c.Sparse) != c.Layers || c.RotaryDim > c.HeadDim || c.RotaryDim%2 != 0 {
			t.Fatalf("inconsistent config accepted: %+v", c)
		}
	})
}
