package tinymodel

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ArchGemma4 is the Gemma 4 text MoE (model_type gemma4, text_config
// gemma4_text), in the layout mlx-lm / mlx-vlm conversions write:
// language_model.model.* with the routed experts split into
// experts.switch_glu.{gate,up,down}_proj and the embedding tied to the head.
const ArchGemma4 = "gemma4"

// Gemma4Spec says which tiny Gemma 4 checkpoint GenerateGemma4 writes.
type Gemma4Spec struct {
	Bits      int // 0 = float32; else 4 or 8 (MLX affine); the router is always 8-bit group 64
	GroupSize int // 0 with Bits 0; else 32, 64 or 128
	Shards    int // 0 or 1 = a single model.safetensors
	Seed      uint64
	Dims      Gemma4Dims
	// Towers adds a stub vision tower (vision_tower.*, embed_vision.*) and
	// audio tower (audio_tower.*, embed_audio.*), as a multimodal
	// conversion carries them; a text runner skips them.
	Towers bool
}

// Gemma4Dims are the model dimensions, named after the HF text_config keys.
type Gemma4Dims struct {
	HiddenSize           int
	NumHiddenLayers      int
	LayerTypes           []string // "sliding_attention" / "full_attention" per layer
	NumAttentionHeads    int
	NumKeyValueHeads     int // sliding layers (and full ones without k_eq_v)
	HeadDim              int // sliding layers
	NumGlobalKVHeads     int // full layers when AttentionKEqV
	GlobalHeadDim        int // full layers
	AttentionKEqV        bool
	SlidingWindow        int
	SlidingRopeTheta     float64
	FullRopeTheta        float64
	FullPartialRotary    float64 // proportional RoPE of the full layers
	NumExperts           int
	TopKExperts          int
	MoeIntermediateSize  int
	IntermediateSize     int // the dense GeGLU MLP beside the experts
	VocabSize            int
	FinalLogitSoftcap    float64
	RMSNormEps           float64
	MaxPositionEmbedding int
}

// Gemma 4 layer types.
const (
	LayerSliding = "sliding_attention"
	LayerFull    = "full_attention"
)

// Seeds of the committed Gemma 4 variants (one per dims, so the quantized
// variant holds the quantized weights of the float variant of its dims).
const (
	SeedGemma4A uint64 = 0x67656d61 // "gema"
	SeedGemma4B uint64 = 0x67656d62 // "gemb"
	SeedGemma4C uint64 = 0x67656d63 // "gemc"
)

// Gemma4DimsA: k_eq_v on, window 4, 6 layers (full every third).
func Gemma4DimsA() Gemma4Dims {
	return Gemma4Dims{
		HiddenSize: 64, NumHiddenLayers: 6,
		LayerTypes:        []string{LayerSliding, LayerSliding, LayerFull, LayerSliding, LayerSliding, LayerFull},
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16,
		NumGlobalKVHeads: 1, GlobalHeadDim: 32, AttentionKEqV: true,
		SlidingWindow: 4, SlidingRopeTheta: 10000, FullRopeTheta: 1000000, FullPartialRotary: 0.25,
		NumExperts: 8, TopKExperts: 2, MoeIntermediateSize: 32, IntermediateSize: 64,
		VocabSize: 384, FinalLogitSoftcap: 30, RMSNormEps: 1e-6, MaxPositionEmbedding: 4096,
	}
}

// Gemma4DimsB: k_eq_v off (full layers have v_proj and num_key_value_heads),
// window 3, 5 layers, top-3 of 6 experts, 6 query heads over 2 KV heads.
func Gemma4DimsB() Gemma4Dims {
	return Gemma4Dims{
		HiddenSize: 48, NumHiddenLayers: 5,
		LayerTypes:        []string{LayerSliding, LayerFull, LayerSliding, LayerSliding, LayerFull},
		NumAttentionHeads: 6, NumKeyValueHeads: 2, HeadDim: 8,
		NumGlobalKVHeads: 1, GlobalHeadDim: 16, AttentionKEqV: false,
		SlidingWindow: 3, SlidingRopeTheta: 10000, FullRopeTheta: 1000000, FullPartialRotary: 0.5,
		NumExperts: 6, TopKExperts: 3, MoeIntermediateSize: 24, IntermediateSize: 40,
		VocabSize: 384, FinalLogitSoftcap: 30, RMSNormEps: 1e-6, MaxPositionEmbedding: 4096,
	}
}

// Gemma4DimsC: k_eq_v on with 2 global KV heads, window 5, 4 layers; the
// dense MLP's down_proj input (96) is no multiple of 64, so a group-64
// conversion leaves it unquantized, as mlx-lm does.
func Gemma4DimsC() Gemma4Dims {
	return Gemma4Dims{
		HiddenSize: 128, NumHiddenLayers: 4,
		LayerTypes:        []string{LayerSliding, LayerSliding, LayerSliding, LayerFull},
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 32,
		NumGlobalKVHeads: 2, GlobalHeadDim: 64, AttentionKEqV: true,
		SlidingWindow: 5, SlidingRopeTheta: 10000, FullRopeTheta: 1000000, FullPartialRotary: 0.25,
		NumExperts: 4, TopKExperts: 2, MoeIntermediateSize: 64, IntermediateSize: 96,
		VocabSize: 384, FinalLogitSoftcap: 30, RMSNormEps: 1e-6, MaxPositionEmbedding: 4096,
	}
}

// Gemma4NamedSpec is one committed Gemma 4 variant: testdata/tiny/<Name>.
type Gemma4NamedSpec struct {
	Name string
	Spec Gemma4Spec
}

// Gemma4Variants lists the committed Gemma 4 variants.
func Gemma4Variants() []Gemma4NamedSpec {
	return []Gemma4NamedSpec{
		{"gemma4-f32", Gemma4Spec{Shards: 1, Seed: SeedGemma4A, Dims: Gemma4DimsA()}},
		{"gemma4-q4g32", Gemma4Spec{Bits: 4, GroupSize: 32, Shards: 3, Seed: SeedGemma4A, Dims: Gemma4DimsA()}},
		{"gemma4-nokeqv-f32", Gemma4Spec{Shards: 2, Seed: SeedGemma4B, Dims: Gemma4DimsB()}},
		{"gemma4-towers-q4g64", Gemma4Spec{Bits: 4, GroupSize: 64, Shards: 1, Seed: SeedGemma4C, Dims: Gemma4DimsC(), Towers: true}},
	}
}

func (d Gemma4Dims) isFull(l int) bool { return d.LayerTypes[l] == LayerFull }

// attn returns a layer's head_dim and KV heads (TF5 Gemma4TextAttention).
func (d Gemma4Dims) attn(l int) (headDim, kvHeads int, kEqV bool) {
	if !d.isFull(l) {
		return d.HeadDim, d.NumKeyValueHeads, false
	}
	if d.AttentionKEqV {
		return d.GlobalHeadDim, d.NumGlobalKVHeads, true
	}
	return d.GlobalHeadDim, d.NumKeyValueHeads, false
}

func (s Gemma4Spec) validate() error {
	d := s.Dims
	if s.Bits == 0 {
		if s.GroupSize != 0 {
			return fmt.Errorf("tinymodel: gemma4: group size %d given for a float checkpoint", s.GroupSize)
		}
	} else {
		if s.Bits != 4 && s.Bits != 8 {
			return fmt.Errorf("tinymodel: gemma4: bits %d not supported (want 4 or 8)", s.Bits)
		}
		if s.GroupSize != 32 && s.GroupSize != 64 && s.GroupSize != 128 {
			return fmt.Errorf("tinymodel: gemma4: group size %d not supported (want 32, 64 or 128)", s.GroupSize)
		}
		if d.HiddenSize%overrideGroup != 0 {
			return fmt.Errorf("tinymodel: gemma4: hidden_size %d not a multiple of the router's group %d", d.HiddenSize, overrideGroup)
		}
	}
	if s.Shards < 0 || s.Shards > 99 {
		return fmt.Errorf("tinymodel: gemma4: shard count %d out of range 0..99", s.Shards)
	}
	for _, p := range []struct {
		name string
		v    int
	}{
		{"hidden_size", d.HiddenSize}, {"num_hidden_layers", d.NumHiddenLayers},
		{"num_attention_heads", d.NumAttentionHeads}, {"num_key_value_heads", d.NumKeyValueHeads},
		{"head_dim", d.HeadDim}, {"num_global_key_value_heads", d.NumGlobalKVHeads},
		{"global_head_dim", d.GlobalHeadDim}, {"sliding_window", d.SlidingWindow},
		{"num_experts", d.NumExperts}, {"top_k_experts", d.TopKExperts},
		{"moe_intermediate_size", d.MoeIntermediateSize}, {"intermediate_size", d.IntermediateSize},
		{"vocab_size", d.VocabSize}, {"max_position_embeddings", d.MaxPositionEmbedding},
	} {
		if p.v <= 0 || p.v > 4096 {
			return fmt.Errorf("tinymodel: gemma4: %s = %d out of range 1..4096", p.name, p.v)
		}
	}
	if len(d.LayerTypes) != d.NumHiddenLayers {
		return fmt.Errorf("tinymodel: gemma4: %d layer_types for %d layers", len(d.LayerTypes), d.NumHiddenLayers)
	}
	for l, t := range d.LayerTypes {
		if t != LayerSliding && t != LayerFull {
			return fmt.Errorf("tinymodel: gemma4: layer_types[%d] = %q", l, t)
		}
		hd, kv, _ := d.attn(l)
		if d.NumAttentionHeads%kv != 0 || hd%2 != 0 {
			return fmt.Errorf("tinymodel: gemma4: layer %d: %d heads over %d KV heads of dim %d", l, d.NumAttentionHeads, kv, hd)
		}
	}
	if d.TopKExperts > d.NumExperts {
		return errors.New("tinymodel: gemma4: top_k_experts > num_experts")
	}
	if !(d.FullPartialRotary > 0 && d.FullPartialRotary <= 1) || !(d.RMSNormEps > 0) || !(d.FinalLogitSoftcap > 0) {
		return errors.New("tinymodel: gemma4: partial_rotary_factor, rms_norm_eps and final_logit_softcapping must be positive")
	}
	if d.VocabSize < tokenizerSize {
		return fmt.Errorf("tinymodel: gemma4: vocab_size %d smaller than the tokenizer's %d tokens", d.VocabSize, tokenizerSize)
	}
	return nil
}

// Spread of the Gemma 4 tensors. The router is wide (its input is an RMS
// normalised vector scaled by hidden^-0.5, so the scores have about this
// std) so that top-k choices are decisive; layer_scalar varies around 1 so
// that scaling the whole stream is visible in the references.
const (
	stdGemmaRouter = 2.0
	stdGemmaNorm   = 0.2 // plain multiplicative norms: 1 + N(0, 0.2)
)

// gemma4FloatModel builds every tensor of the float model, sorted by name.
func gemma4FloatModel(s Gemma4Spec) []floatTensor {
	d := s.Dims
	const body = "language_model.model."
	h := d.HiddenSize
	var out []floatTensor
	add := func(name string, mean, std float64, kind tensorKind, shape ...int) *floatTensor {
		g := newRNG(s.Seed, name)
		v := make([]float32, prod(shape))
		for i := range v {
			v[i] = g.normalF32(mean, std)
		}
		out = append(out, floatTensor{name: name, shape: shape, vals: v, kind: kind})
		return &out[len(out)-1]
	}
	linear := func(name string, rows, cols int) { add(name+".weight", 0, stdLinear, kindLinear, rows, cols) }
	norm := func(name string, n int) { add(name, 1, stdGemmaNorm, kindFloat, n) }

	add(body+"embed_tokens.weight", 0, stdLinear, kindLinear, d.VocabSize, h)
	norm(body+"norm.weight", h)
	for l := range d.NumHiddenLayers {
		p := fmt.Sprintf("%slayers.%d.", body, l)
		for _, n := range []string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
			"post_feedforward_layernorm", "pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"} {
			norm(p+n+".weight", h)
		}
		{
			name := p + "layer_scalar"
			g := newRNG(s.Seed, name)
			out = append(out, floatTensor{name: name, shape: []int{1}, vals: []float32{float32(g.uniform(0.6, 1.4))}, kind: kindFloat})
		}
		hd, kv, kEqV := d.attn(l)
		a := p + "self_attn."
		linear(a+"q_proj", d.NumAttentionHeads*hd, h)
		linear(a+"k_proj", kv*hd, h)
		if !kEqV {
			linear(a+"v_proj", kv*hd, h)
		}
		linear(a+"o_proj", h, d.NumAttentionHeads*hd)
		norm(a+"q_norm.weight", hd)
		norm(a+"k_norm.weight", hd)
		m := p + "mlp."
		linear(m+"gate_proj", d.IntermediateSize, h)
		linear(m+"up_proj", d.IntermediateSize, h)
		linear(m+"down_proj", h, d.IntermediateSize)
		r := p + "router."
		add(r+"proj.weight", 0, stdGemmaRouter, kindLinear, d.NumExperts, h).override = true
		norm(r+"scale", h)
		norm(r+"per_expert_scale", d.NumExperts)
		e := p + "experts.switch_glu."
		add(e+"gate_proj.weight", 0, stdLinear, kindLinear, d.NumExperts, d.MoeIntermediateSize, h)
		add(e+"up_proj.weight", 0, stdLinear, kindLinear, d.NumExperts, d.MoeIntermediateSize, h)
		add(e+"down_proj.weight", 0, stdLinear, kindLinear, d.NumExperts, h, d.MoeIntermediateSize)
	}
	if s.Towers {
		// Stubs with the prefixes of a multimodal conversion; the values
		// do not matter (nothing text-only reads them).
		const vis, aud = 16, 24
		add("vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight", 0, stdLinear, kindFloat, vis, vis)
		add("vision_tower.encoder.layers.0.input_layernorm.weight", 1, stdGemmaNorm, kindFloat, vis)
		add("vision_tower.patch_embedder.input_proj.weight", 0, stdLinear, kindFloat, vis, 48)
		add("embed_vision.embedding_projection.weight", 0, stdLinear, kindFloat, h, vis)
		add("audio_tower.layers.0.self_attn.q_proj.linear.weight", 0, stdLinear, kindFloat, aud, aud)
		add("embed_audio.embedding_projection.weight", 0, stdLinear, kindFloat, h, aud)
	}
	slices.SortFunc(out, func(a, b floatTensor) int { return strings.Compare(a.name, b.name) })
	return out
}

// gemma4Tensors returns the tensors of s sorted by name, with the modules
// quantized at the router's 8 bits.
func gemma4Tensors(s Gemma4Spec) ([]outTensor, []string, error) {
	if err := s.validate(); err != nil {
		return nil, nil, err
	}
	weights := gemma4FloatModel(s)
	if s.Bits == 0 {
		return encodeF32(weights), nil, nil
	}
	// quantizeModel converts the way mlx-lm does: the override flag gives
	// router.proj its 8-bit group-64 quantization (gemma4_text's
	// quant_predicate); norms, scales and layer_scalar stay BF16.
	ts, overrides, err := quantizeModel(Spec{Arch: ArchGemma4, Bits: s.Bits, GroupSize: s.GroupSize}, weights)
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(ts, func(a, b outTensor) int { return strings.Compare(a.spec.Name, b.spec.Name) })
	return ts, overrides, nil
}

// GenerateGemma4 writes the tiny Gemma 4 checkpoint s into dir (created if
// missing), like Generate: config.json, generation_config.json, the tiny
// tokenizer, and the safetensors file(s) with an index when sharded.
func GenerateGemma4(dir string, s Gemma4Spec) error {
	tensors, overrides, err := gemma4Tensors(s)
	if err != nil {
		return err
	}
	return writeCheckpoint(dir, tensors, s.Shards, func(tok *tokenizer) (config, generation any) {
		return gemma4Config(s, overrides, tok), generationConfig(Spec{}, tok)
	})
}

// gemma4Config returns config.json as the MLX conversions of the real
// model have it (../shared/reference/gemma4.md §4): gemma4 wrapper,
// text_config gemma4_text, top-level quantization with the router
// overrides. enable_moe_block, hidden_size_per_layer_input,
// num_kv_shared_layers and a text vocab_size are explicit, since mlx-lm's
// defaults would otherwise turn on per-layer inputs and KV sharing.
func gemma4Config(s Gemma4Spec, overrides []string, tok *tokenizer) map[string]any {
	d := s.Dims
	dtype := "float32"
	if s.Bits != 0 {
		dtype = "bfloat16"
	}
	tc := map[string]any{
		"model_type":                  "gemma4_text",
		"architectures":               []string{"Gemma4ForCausalLM"},
		"attention_bias":              false,
		"attention_dropout":           pyFloat(0),
		"attention_k_eq_v":            d.AttentionKEqV,
		"bos_token_id":                tok.id(tokEndOfText),
		"dtype":                       dtype,
		"enable_moe_block":            true,
		"eos_token_id":                []int{tok.id(tokIMEnd), tok.id(tokEndOfText)},
		"final_logit_softcapping":     pyFloat(d.FinalLogitSoftcap),
		"global_head_dim":             d.GlobalHeadDim,
		"head_dim":                    d.HeadDim,
		"hidden_activation":           "gelu_pytorch_tanh",
		"hidden_size":                 d.HiddenSize,
		"hidden_size_per_layer_input": 0,
		"initializer_range":           pyFloat(stdLinear),
		"intermediate_size":           d.IntermediateSize,
		"layer_types":                 d.LayerTypes,
		"max_position_embeddings":     d.MaxPositionEmbedding,
		"moe_intermediate_size":       d.MoeIntermediateSize,
		"num_attention_heads":         d.NumAttentionHeads,
		"num_experts":                 d.NumExperts,
		"num_global_key_value_heads":  d.NumGlobalKVHeads,
		"num_hidden_layers":           d.NumHiddenLayers,
		"num_key_value_heads":         d.NumKeyValueHeads,
		"num_kv_shared_layers":        0,
		"pad_token_id":                tok.id(tokEndOfText),
		"rms_norm_eps":                pyFloat(d.RMSNormEps),
		"rope_parameters": map[string]any{
			LayerSliding: map[string]any{"rope_type": "default", "rope_theta": pyFloat(d.SlidingRopeTheta)},
			LayerFull: map[string]any{"rope_type": "proportional", "rope_theta": pyFloat(d.FullRopeTheta),
				"partial_rotary_factor": pyFloat(d.FullPartialRotary)},
		},
		"sliding_window":             d.SlidingWindow,
		"tie_word_embeddings":        true,
		"top_k_experts":              d.TopKExperts,
		"use_cache":                  true,
		"use_double_wide_mlp":        false,
		"vocab_size":                 d.VocabSize,
		"vocab_size_per_layer_input": d.VocabSize,
	}
	c := map[string]any{
		"architectures":       []string{"Gemma4ForConditionalGeneration"},
		"model_type":          ArchGemma4,
		"text_config":         tc,
		"tie_word_embeddings": true,
		"vocab_size":          d.VocabSize,
		"eos_token_id":        []int{tok.id(tokIMEnd), tok.id(tokEndOfText)},
	}
	if s.Towers {
		c["vision_config"] = map[string]any{"model_type": "gemma4_vision", "hidden_size": 16, "num_hidden_layers": 1}
		c["audio_config"] = map[string]any{"model_type": "gemma4_audio", "hidden_size": 24, "num_hidden_layers": 1}
	}
	if s.Bits != 0 {
		qs := Spec{Bits: s.Bits, GroupSize: s.GroupSize}
		c["quantization"] = quantization(qs, overrides)
		c["quantization_config"] = quantization(qs, overrides)
	}
	return c
}

// pyFloat is a float written as Python's json writes one (30.0, 1e-06), so
// a whole number stays a float for readers that check types strictly
// (transformers 5's config dataclasses refuse "final_logit_softcapping": 30).
type pyFloat float64

func (f pyFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("tinymodel: %v is not a JSON number", v)
	}
	if a := math.Abs(v); a != 0 && (a < 1e-4 || a >= 1e16) {
		return []byte(strconv.FormatFloat(v, 'g', -1, 64)), nil // 1e-06, as Python's repr
	}
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return []byte(s), nil
}
