package tinymodel

import "fmt"

// initializerRange is written to config.json: the std of the projections.
const initializerRange = stdLinear

// layerTypes returns the explicit per-layer mixer kinds.
func (d Dims) layerTypes() []string {
	t := make([]string, d.NumHiddenLayers)
	for l := range t {
		t[l] = "linear_attention"
		if d.isFull(l) {
			t[l] = "full_attention"
		}
	}
	return t
}

// mropeSection splits the rotary half-dimension into the t/h/w sections the
// way the real Qwen3.5 config does (32 -> [11,11,10]; 2 -> [1,1,0]).
func mropeSection(half int) []int {
	a := (half + 2) / 3
	b := (half - a + 1) / 2
	return []int{a, b, half - a - b}
}

// quantization returns the config "quantization" object: the global
// setting plus the 8-bit overrides, keyed by module path.
func quantization(s Spec, overrides []string) map[string]any {
	q := map[string]any{"group_size": s.GroupSize, "bits": s.Bits, "mode": "affine"}
	for _, m := range overrides {
		q[m] = map[string]any{"group_size": overrideGroup, "bits": overrideBits}
	}
	return q
}

// textConfig holds the dims shared by both architectures, with HF key names.
func textConfig(s Spec, tok *tokenizer) map[string]any {
	d := s.dims()
	dtype := "float32"
	if s.Bits != 0 {
		dtype = "bfloat16"
	}
	return map[string]any{
		"attention_bias":                  false,
		"attention_dropout":               0.0,
		"bos_token_id":                    tok.id(tokEndOfText),
		"decoder_sparse_step":             1,
		"dtype":                           dtype,
		"full_attention_interval":         d.FullAttentionInterval,
		"head_dim":                        d.HeadDim,
		"hidden_act":                      "silu",
		"hidden_size":                     d.HiddenSize,
		"initializer_range":               initializerRange,
		"intermediate_size":               d.IntermediateSize,
		"linear_conv_kernel_dim":          d.LinearConvKernelDim,
		"linear_key_head_dim":             d.LinearKeyHeadDim,
		"linear_num_key_heads":            d.LinearNumKeyHeads,
		"linear_num_value_heads":          d.LinearNumValueHeads,
		"linear_value_head_dim":           d.LinearValueHeadDim,
		"max_position_embeddings":         d.MaxPositionEmbeddings,
		"mlp_only_layers":                 []int{},
		"moe_intermediate_size":           d.MoeIntermediateSize,
		"norm_topk_prob":                  true,
		"num_attention_heads":             d.NumAttentionHeads,
		"num_experts":                     d.NumExperts,
		"num_experts_per_tok":             d.NumExpertsPerTok,
		"num_hidden_layers":               d.NumHiddenLayers,
		"num_key_value_heads":             d.NumKeyValueHeads,
		"output_router_logits":            false,
		"partial_rotary_factor":           d.PartialRotaryFactor,
		"rms_norm_eps":                    d.RMSNormEps,
		"router_aux_loss_coef":            0.001,
		"shared_expert_intermediate_size": d.SharedIntermediateSize,
		"tie_word_embeddings":             false,
		"use_cache":                       true,
		"vocab_size":                      d.VocabSize,
	}
}

// modelConfig returns config.json: flat for qwen3_next, text_config nested
// for qwen3_5_moe (as mlx-lm writes it: no vision_config).
func modelConfig(s Spec, overrides []string, tok *tokenizer) map[string]any {
	d := s.dims()
	tc := textConfig(s, tok)
	var c map[string]any
	switch s.Arch {
	case ArchQwen3Next:
		c = tc
		c["architectures"] = []string{"Qwen3NextForCausalLM"}
		c["model_type"] = ArchQwen3Next
		c["eos_token_id"] = tok.id(tokIMEnd)
		c["rope_theta"] = d.RopeTheta
		c["rope_scaling"] = nil
		c["use_sliding_window"] = false
	case ArchQwen35MoE:
		tc["model_type"] = "qwen3_5_moe_text"
		tc["eos_token_id"] = tok.id(tokEndOfText)
		tc["attn_output_gate"] = true
		tc["layer_types"] = d.layerTypes()
		tc["rope_parameters"] = map[string]any{
			"rope_type":             "default",
			"rope_theta":            d.RopeTheta,
			"partial_rotary_factor": d.PartialRotaryFactor,
			"mrope_section":         mropeSection(d.rotaryDim() / 2),
			"mrope_interleaved":     true,
		}
		c = map[string]any{
			"architectures":       []string{"Qwen3_5MoeForConditionalGeneration"},
			"model_type":          ArchQwen35MoE,
			"text_config":         tc,
			"tie_word_embeddings": false,
		}
	default:
		panic(fmt.Sprintf("tinymodel: arch %q", s.Arch)) // validate() rules this out
	}
	if s.Bits != 0 {
		c["quantization"] = quantization(s, overrides)
		c["quantization_config"] = quantization(s, overrides)
	}
	return c
}

// generationConfig returns generation_config.json.
func generationConfig(s Spec, tok *tokenizer) obj {
	return obj{
		{"bos_token_id", tok.id(tokEndOfText)},
		{"eos_token_id", []int{tok.id(tokIMEnd), tok.id(tokEndOfText)}},
		{"pad_token_id", tok.id(tokEndOfText)},
	}
}
