package modelconfig

import (
	"fmt"
	"math"
)

// The Qwen hybrid architectures: Gated DeltaNet and gated full attention
// layers, a routed MoE with a shared expert. qwen3_next is flat; the
// Qwen3.5/3.6 MoE models are wrapped (model_type qwen3_5_moe, the text
// model under text_config) by transformers and mlx-vlm, and mlx-lm also
// reads them flat and writes text_config.model_type as "qwen3_5".
func init() {
	Register(Arch{Name: TypeQwen3Next, TextModelTypes: []string{TypeQwen3Next}, Parse: parseQwen3Next})
	Register(Arch{
		Name:           TypeQwen35MoE,
		ModelTypes:     []string{"qwen3_5_moe_text", "qwen3_5"},
		TextModelTypes: []string{"qwen3_5_moe_text", "qwen3_5_moe", "qwen3_5", "qwen3_5_text"},
		Parse:          parseQwen35MoE,
	})
}

// qwenDefaultHeadDim is transformers' default head_dim for both Qwen
// architectures.
const qwenDefaultHeadDim = 256

var (
	dimBound    = Bound{1, MaxDim, "MaxDim"}
	headBound   = Bound{1, MaxHeads, "MaxHeads"}
	expertBound = Bound{1, MaxExperts, "MaxExperts"}
	layerBound  = Bound{1, MaxLayers, "MaxLayers"}
)

func parseQwen3Next(d *Document) *Config {
	c := parseHybrid(d, false)
	t := d.Text
	c.Prefix, c.HeadPrefix = "model.", "lm_head."
	c.NormTopK, _ = t.OptBool(true, "norm_topk_prob")
	step, _ := t.OptInt(1, layerBound, "decoder_sparse_step")
	only := map[int]bool{}
	if c.Layers > 0 {
		for _, l := range t.OptInts(Bound{0, c.Layers - 1, "num_hidden_layers - 1"}, "mlp_only_layers") {
			only[l] = true
		}
	}
	c.Sparse = make([]bool, c.Layers)
	for i := range c.Sparse {
		c.Sparse[i] = !only[i] && c.Experts > 0 && (i+1)%step == 0
	}
	return c
}

func parseQwen35MoE(d *Document) *Config {
	t := d.Text
	if d.Declared == "qwen3_5" && !t.Has("num_experts") {
		t.p.list = append(t.p.list, &Error{File: d.File, Field: "model_type",
			Msg: `"qwen3_5" without num_experts: a dense Qwen3.5, which qpack does not run (it runs MoE checkpoints)`, Supported: Supported()})
		return nil
	}
	c := parseHybrid(d, true)
	c.Prefix, c.HeadPrefix = "language_model.model.", "language_model.lm_head."
	if d.Declared == "qwen3_5_moe_text" && !d.Nested {
		// A bare text model (transformers' Qwen3_5MoeForCausalLM).
		c.Prefix, c.HeadPrefix = "model.", "lm_head."
	}
	// Every layer is MoE and the top-k weights are renormalised, in
	// transformers and mlx-lm alike; a config saying otherwise describes a
	// model neither runs the same way.
	if v, ok := t.OptBool(true, "norm_topk_prob"); ok && !v {
		t.Fail("norm_topk_prob", "false is not supported for %s (its router always renormalises the top-k weights)", TypeQwen35MoE)
	}
	if step, _ := t.OptInt(1, layerBound, "decoder_sparse_step"); step != 1 {
		t.Fail("decoder_sparse_step", "%d is not supported for %s (every layer is MoE)", step, TypeQwen35MoE)
	}
	if c.Layers > 0 {
		if only := t.OptInts(Bound{0, c.Layers - 1, "num_hidden_layers - 1"}, "mlp_only_layers"); len(only) > 0 {
			t.Fail("mlp_only_layers", "%v is not supported for %s (every layer is MoE)", only, TypeQwen35MoE)
		}
	}
	c.NormTopK = true
	c.Sparse = make([]bool, c.Layers)
	for i := range c.Sparse {
		c.Sparse[i] = true
	}
	return c
}

// parseHybrid reads what the two Qwen architectures share.
func parseHybrid(d *Document, ropeParamsWin bool) *Config {
	t := d.Text
	c := &Config{}
	c.Hidden, _ = t.Int(dimBound, "hidden_size")
	c.Layers, _ = t.Int(layerBound, "num_hidden_layers")
	c.Vocab, _ = t.Int(Bound{1, MaxVocab, "MaxVocab"}, "vocab_size")
	c.Heads, _ = t.Int(headBound, "num_attention_heads")
	c.KVHeads, _ = t.Int(headBound, "num_key_value_heads")
	if t.Has("head_dim") {
		c.HeadDim, _ = t.Int(Bound{2, MaxDim, "MaxDim"}, "head_dim")
	} else if c.Hidden > 0 && c.Heads > 0 {
		// mlx-lm derives hidden_size / num_attention_heads, transformers
		// takes its class default 256: only when they agree is it known.
		switch {
		case c.Hidden%c.Heads != 0:
			t.Fail("head_dim", "missing, and hidden_size %d is not a multiple of num_attention_heads %d to derive it", c.Hidden, c.Heads)
		case c.Hidden/c.Heads != qwenDefaultHeadDim:
			t.Fail("head_dim", "missing: mlx-lm derives hidden_size / num_attention_heads = %d, transformers takes %d", c.Hidden/c.Heads, qwenDefaultHeadDim)
		default:
			c.HeadDim = qwenDefaultHeadDim
		}
	}
	c.ConvKernel, _ = t.Int(Bound{1, MaxConvWidth, "MaxConvWidth"}, "linear_conv_kernel_dim")
	c.LinKeyHeadDim, _ = t.Int(dimBound, "linear_key_head_dim")
	c.LinValHeadDim, _ = t.Int(dimBound, "linear_value_head_dim")
	c.LinKeyHeads, _ = t.Int(headBound, "linear_num_key_heads")
	c.LinValueHeads, _ = t.Int(headBound, "linear_num_value_heads")
	c.Experts, _ = t.Int(expertBound, "num_experts") // transformers reads no alias for it here
	c.TopK, _ = t.Int(expertBound, "num_experts_per_tok")
	c.MoEIntermediate, _ = t.Int(dimBound, "moe_intermediate_size")
	c.SharedIntermediate, _ = t.OptInt(0, Bound{0, MaxDim, "MaxDim"}, "shared_expert_intermediate_size")
	c.Intermediate, _ = t.OptInt(0, Bound{0, MaxDim, "MaxDim"}, "intermediate_size")
	c.MaxPositions, _ = t.OptInt(0, Bound{1, MaxPositions, "MaxPositions"}, "max_position_embeddings")

	c.RMSNormEps, _ = t.OptFloat(1e-6, "rms_norm_eps")
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		t.Fail("rms_norm_eps", "%g is out of range (0, 1)", c.RMSNormEps)
	}
	if act := t.OptString("hidden_act"); act != "" && act != "silu" {
		t.Fail("hidden_act", "%q is not supported (want silu)", act)
	}
	if bias, _ := t.OptBool(false, "attention_bias"); bias {
		t.Fail("attention_bias", "true is not supported")
	}
	c.AttnOutputGate, _ = t.OptBool(true, "attn_output_gate")

	c.RopeTheta, c.RotaryDim = parseRope(t, c.HeadDim, ropeParamsWin)
	c.TieWordEmbeddings = parseTie(d)
	c.FullAttention = parseLayerTypes(t, c.Layers)
	c.Quant = quantOfDocument(d)

	if c.Heads > 0 && c.KVHeads > 0 && c.Heads%c.KVHeads != 0 {
		t.Fail("num_attention_heads", "%d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if c.LinKeyHeads > 0 && c.LinValueHeads%c.LinKeyHeads != 0 {
		t.Fail("linear_num_value_heads", "%d is not a multiple of linear_num_key_heads %d", c.LinValueHeads, c.LinKeyHeads)
	}
	if c.Experts > 0 && c.TopK > c.Experts {
		t.Fail("num_experts_per_tok", "%d is more than num_experts %d", c.TopK, c.Experts)
	}
	for _, p := range []struct {
		field string
		a, b  int
	}{
		{"num_attention_heads", c.Heads, c.HeadDim},
		{"linear_num_value_heads", c.LinValueHeads, c.LinValHeadDim},
		{"linear_num_key_heads", c.LinKeyHeads, c.LinKeyHeadDim},
	} {
		if int64(p.a)*int64(p.b) > MaxDim {
			t.Fail(p.field, "%d heads x %d dims is above the limit %d (MaxDim)", p.a, p.b, MaxDim)
		}
	}
	return c
}

// parseRope reads the rotary base and the rotated dims. transformers v5
// writes rope_parameters, v4 rope_scaling plus top-level rope_theta and
// partial_rotary_factor. For qwen3_next mlx-lm reads only the top level and
// transformers prefers rope_parameters, so every place that gives a value
// must agree. For qwen3_5_moe (paramsWin) both read rope_parameters first,
// and mlx-lm reads nothing else: the rotary base must be there, and a
// top-level partial_rotary_factor other than the default 0.25 that
// rope_parameters does not repeat is ambiguous. Multimodal RoPE
// (mrope_section) with the equal temporal, height and width positions of
// text is plain RoPE. (Checked against transformers 5.17:
// testdata/transformers.)
func parseRope(t *Object, headDim int, paramsWin bool) (theta float64, rotary int) {
	type value struct {
		o   *Object
		key string
		v   float64
	}
	var thetas, factors []value
	read := func(o *Object) {
		if v, ok := o.OptFloat(0, "rope_theta"); ok {
			thetas = append(thetas, value{o, "rope_theta", v})
		}
		if v, ok := o.OptFloat(0, "partial_rotary_factor"); ok {
			factors = append(factors, value{o, "partial_rotary_factor", v})
		}
	}
	read(t)
	var params *Object
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		rp := t.OptObject(key)
		if rp == nil {
			continue
		}
		if full := rp.OptObject("full_attention"); full != nil {
			rp = full // parameters per layer type
		}
		switch kind := rp.OptString("rope_type", "type"); kind {
		case "", "default", "mrope":
		default:
			rp.Fail("rope_type", "%q is not supported (want default)", kind)
		}
		read(rp)
		if key == "rope_parameters" {
			params = rp
		}
	}
	// pick resolves one parameter: rope_parameters' when it wins, else the
	// one value every place agrees on. mlxDef is what mlx-lm's qwen3_5 takes
	// when rope_parameters lacks it.
	pick := func(vals []value, mlxDef float64) (float64, bool) {
		if paramsWin && params != nil {
			for _, v := range vals {
				if v.o == params {
					return v.v, true
				}
			}
		}
		if len(vals) == 0 {
			return mlxDef, false
		}
		for _, v := range vals[1:] {
			if v.v != vals[0].v {
				v.o.Fail(v.key, "%g, but %s is %g", v.v, vals[0].o.Field(vals[0].key), vals[0].v)
			}
		}
		if paramsWin && vals[0].v != mlxDef {
			vals[0].o.Fail(vals[0].key, "%g, but not in rope_parameters, where mlx-lm reads it (taking %g instead); transformers takes this value", vals[0].v, mlxDef)
		}
		return vals[0].v, true
	}
	theta, ok := pick(thetas, 100000)
	factor, _ := pick(factors, 0.25)
	switch {
	case !ok:
		// transformers defaults it to 10000, mlx-lm requires it: a config
		// must say.
		t.Fail("rope_theta", "missing (also looked for in rope_parameters and rope_scaling)")
	case !(theta > 1 && theta < 1e30):
		t.Fail("rope_theta", "%g is out of range (1, 1e30)", theta)
	}
	if !(factor > 0 && factor <= 1) {
		t.Fail("partial_rotary_factor", "%g is out of range (0, 1]", factor)
		return theta, 0
	}
	if headDim < 2 {
		return theta, 0
	}
	rd := float64(headDim) * factor
	rotary = int(math.Round(rd))
	if math.Abs(rd-float64(rotary)) > 1e-9 || rotary%2 != 0 || rotary < 2 {
		t.Fail("partial_rotary_factor", "head_dim %d x %g = %g rotary dims, not a positive even integer", headDim, factor, rd)
		return theta, 0
	}
	return theta, rotary
}

// parseTie reads tie_word_embeddings from the text model, and from the
// wrapper of a nested config; the two must agree (transformers reads the
// wrapper's, mlx-lm the text model's).
func parseTie(d *Document) bool {
	v, ok := d.Text.OptBool(false, "tie_word_embeddings")
	if d.Nested {
		w, wok := d.Top.OptBool(false, "tie_word_embeddings")
		switch {
		case ok && wok && v != w:
			d.Text.Fail("tie_word_embeddings", "%v, but the top-level tie_word_embeddings is %v", v, w)
		case !ok && wok:
			return w
		}
	}
	return v
}

// parseLayerTypes resolves which layers are full attention: layer_types
// when given (transformers), else every full_attention_interval-th layer
// (what mlx-lm always uses). When both are given they must agree.
func parseLayerTypes(t *Object, layers int) []bool {
	if layers < 1 {
		return nil
	}
	interval, _ := t.OptInt(4, layerBound, "full_attention_interval")
	full := make([]bool, layers)
	for i := range full {
		full[i] = (i+1)%interval == 0
	}
	types, ok := t.OptStrings("layer_types")
	if !ok {
		return full
	}
	if len(types) != layers {
		t.Fail("layer_types", "%d entries for %d layers (num_hidden_layers)", len(types), layers)
		return full
	}
	fromTypes := make([]bool, layers)
	for i, s := range types {
		switch s {
		case "full_attention":
			fromTypes[i] = true
		case "linear_attention":
		default:
			t.Fail(fmt.Sprintf("layer_types[%d]", i), "%q (want full_attention or linear_attention)", s)
			return full
		}
	}
	if t.Has("full_attention_interval") {
		for i := range full {
			if full[i] != fromTypes[i] {
				t.Fail("layer_types", "layer %d is %s, but full_attention_interval %d makes it %s", i, types[i], interval, kindName(full[i]))
				break
			}
		}
	}
	return fromTypes
}

func kindName(full bool) string {
	if full {
		return "full_attention"
	}
	return "linear_attention"
}

func quantOfDocument(d *Document) Quantization {
	var text *Object
	if d.Nested {
		text = d.Text
	}
	return parseQuantization(d.Top, text)
}
