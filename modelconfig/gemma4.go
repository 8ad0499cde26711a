package modelconfig

import (
	"fmt"
	"math"
)

// TypeGemma4 is the Gemma 4 text MoE (26B-A4B): model_type gemma4 with
// text_config gemma4_text (transformers, mlx-vlm, mlx-lm conversions), or
// a bare gemma4_text.
const TypeGemma4 = "gemma4"

func init() {
	Register(Arch{
		Name:           TypeGemma4,
		ModelTypes:     []string{"gemma4_text"},
		TextModelTypes: []string{"gemma4_text"},
		Parse:          parseGemma4,
	})
}

// Gemma4 is what Gemma 4 needs beyond the common fields (Config.Extra).
//
// The common fields describe the sliding-window layers: Heads, KVHeads,
// HeadDim, RopeTheta and RotaryDim (= HeadDim: default RoPE over the whole
// head). Config.FullAttention is true for every layer (all are softmax
// attention; none is linear attention) and Sliding says which use the
// window. Every layer is MoE (Config.Sparse) with a dense GeGLU MLP of
// Config.Intermediate beside the experts.
type Gemma4 struct {
	// Sliding[L] is true for a sliding_attention layer: a query sees the
	// last SlidingWindow positions, itself included.
	Sliding       []bool
	SlidingWindow int

	// Full-attention layers: their head dim and KV heads (global_head_dim;
	// num_global_key_value_heads only when AttentionKEqV, else
	// num_key_value_heads, as transformers 5.17 resolves them). With
	// AttentionKEqV they have no v_proj: v is the raw k_proj output.
	FullHeadDim   int
	FullKVHeads   int
	AttentionKEqV bool

	// Proportional RoPE of the full layers: frequencies
	// θ^(-2d/FullHeadDim)/FullRopeFactor for d < FullRopePairs, none
	// (identity) for the rest of the FullHeadDim/2 pairs; NeoX pairing.
	FullRopeTheta  float64
	FullRopePairs  int
	FullRopeFactor float64

	// FinalLogitSoftcap: logits = tanh(l/c)·c (0: none).
	FinalLogitSoftcap float64
}

// gemma4Missing are fields whose absence transformers and mlx-lm read
// differently (mlx-lm's defaults turn on per-layer inputs, KV sharing and
// a dense MLP for the 26B's values), so a config must give them.
var gemma4Missing = []string{"enable_moe_block", "hidden_size_per_layer_input", "num_kv_shared_layers", "layer_types", "rope_parameters"}

func parseGemma4(d *Document) *Config {
	t := d.Text
	c := &Config{}
	for _, k := range gemma4Missing {
		if !t.Has(k) && !(k == "hidden_size_per_layer_input" && hasNull(t, k)) {
			t.Fail(k, "missing: transformers and mlx-lm default it differently, so the config must say")
		}
	}
	c.Hidden, _ = t.Int(dimBound, "hidden_size")
	c.Layers, _ = t.Int(layerBound, "num_hidden_layers")
	c.Vocab, _ = t.OptInt(262144, Bound{1, MaxVocab, "MaxVocab"}, "vocab_size")
	c.Heads, _ = t.Int(headBound, "num_attention_heads")
	c.KVHeads, _ = t.Int(headBound, "num_key_value_heads")
	c.HeadDim, _ = t.Int(Bound{2, MaxDim, "MaxDim"}, "head_dim")
	c.Intermediate, _ = t.Int(dimBound, "intermediate_size")
	c.Experts, _ = t.Int(expertBound, "num_experts")
	c.TopK, _ = t.Int(expertBound, "top_k_experts")
	c.MoEIntermediate, _ = t.Int(dimBound, "moe_intermediate_size")
	c.MaxPositions, _ = t.OptInt(0, Bound{1, MaxPositions, "MaxPositions"}, "max_position_embeddings")
	c.NormTopK = true
	c.RMSNormEps, _ = t.OptFloat(1e-6, "rms_norm_eps")
	if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
		t.Fail("rms_norm_eps", "%g is out of range (0, 1)", c.RMSNormEps)
	}
	if moe, _ := t.OptBool(false, "enable_moe_block"); !moe && t.Has("enable_moe_block") {
		t.Fail("enable_moe_block", "false: a dense Gemma 4, which qpack does not run (it runs MoE checkpoints)")
	}
	if n, _ := t.OptInt(0, Bound{0, MaxDim, "MaxDim"}, "hidden_size_per_layer_input"); n != 0 {
		t.Fail("hidden_size_per_layer_input", "%d: per-layer inputs (Gemma 4 E2B/E4B) are not supported", n)
	}
	if n, _ := t.OptInt(0, Bound{0, MaxLayers, "MaxLayers"}, "num_kv_shared_layers"); n != 0 {
		t.Fail("num_kv_shared_layers", "%d: KV sharing across layers is not supported", n)
	}
	if act := t.OptString("hidden_activation", "hidden_act"); act != "" && act != "gelu_pytorch_tanh" {
		t.Fail("hidden_activation", "%q is not supported (want gelu_pytorch_tanh)", act)
	}
	if bias, _ := t.OptBool(false, "attention_bias"); bias {
		t.Fail("attention_bias", "true is not supported")
	}
	if s := t.OptString("use_bidirectional_attention"); s != "" {
		t.Fail("use_bidirectional_attention", "%q is not supported (text decoding is causal)", s)
	}

	g := &Gemma4{}
	c.Extra = g
	g.SlidingWindow, _ = t.Int(Bound{1, MaxPositions, "MaxPositions"}, "sliding_window")
	g.AttentionKEqV, _ = t.OptBool(false, "attention_k_eq_v")
	g.FullHeadDim, _ = t.OptInt(c.HeadDim, Bound{2, MaxDim, "MaxDim"}, "global_head_dim")
	g.FullKVHeads = c.KVHeads
	if g.AttentionKEqV && t.Has("num_global_key_value_heads") {
		g.FullKVHeads, _ = t.Int(headBound, "num_global_key_value_heads")
	}
	g.FinalLogitSoftcap, _ = t.OptFloat(0, "final_logit_softcapping")
	if g.FinalLogitSoftcap < 0 || math.IsInf(g.FinalLogitSoftcap, 0) {
		t.Fail("final_logit_softcapping", "%g is out of range", g.FinalLogitSoftcap)
	}

	c.FullAttention = make([]bool, max(c.Layers, 0))
	c.Sparse = make([]bool, max(c.Layers, 0))
	g.Sliding = make([]bool, max(c.Layers, 0))
	for i := range c.FullAttention {
		c.FullAttention[i], c.Sparse[i] = true, true
	}
	anyFull := false
	if types, ok := t.OptStrings("layer_types"); ok && c.Layers > 0 {
		if len(types) != c.Layers {
			t.Fail("layer_types", "%d entries for %d layers (num_hidden_layers)", len(types), c.Layers)
		} else {
			for i, s := range types {
				switch s {
				case "sliding_attention":
					g.Sliding[i] = true
				case "full_attention":
					anyFull = true
				default:
					t.Fail(fmt.Sprintf("layer_types[%d]", i), "%q (want sliding_attention or full_attention)", s)
				}
			}
		}
	}
	parseGemma4Rope(t, c, g)

	c.TieWordEmbeddings = true
	if v, ok := t.OptBool(true, "tie_word_embeddings"); ok {
		c.TieWordEmbeddings = v
	}
	if d.Nested {
		if w, ok := d.Top.OptBool(true, "tie_word_embeddings"); ok && w != c.TieWordEmbeddings {
			d.Text.Fail("tie_word_embeddings", "%v, but the top-level tie_word_embeddings is %v", c.TieWordEmbeddings, w)
		}
	}
	c.Prefix, c.HeadPrefix = "language_model.model.", "language_model.lm_head."
	if !d.Nested {
		c.Prefix, c.HeadPrefix = "model.", "lm_head."
	}
	c.Quant = quantOfDocument(d)

	if c.Heads > 0 && g.FullKVHeads > 0 && anyFull && c.Heads%g.FullKVHeads != 0 {
		t.Fail("num_global_key_value_heads", "%d does not divide num_attention_heads %d", g.FullKVHeads, c.Heads)
	}
	if c.TopK > c.Experts && c.Experts > 0 {
		t.Fail("top_k_experts", "%d is more than num_experts %d", c.TopK, c.Experts)
	}
	for _, p := range []struct {
		field string
		a, b  int
	}{{"num_attention_heads", c.Heads, c.HeadDim}, {"global_head_dim", c.Heads, g.FullHeadDim}} {
		if int64(p.a)*int64(p.b) > MaxDim {
			t.Fail(p.field, "%d heads x %d dims is above the limit %d (MaxDim)", p.a, p.b, MaxDim)
		}
	}
	return c
}

// parseGemma4Rope reads rope_parameters per layer type: default RoPE over
// the whole head for the sliding layers, proportional (or default) for the
// full ones.
func parseGemma4Rope(t *Object, c *Config, g *Gemma4) {
	rp := t.OptObject("rope_parameters")
	if rp == nil {
		return
	}
	slide, full := rp.OptObject("sliding_attention"), rp.OptObject("full_attention")
	if slide == nil || full == nil {
		rp.Fail("", "want one object per layer type (sliding_attention and full_attention)")
		return
	}
	theta := func(o *Object, def float64) float64 {
		v, _ := o.OptFloat(def, "rope_theta")
		if !(v > 1 && v < 1e30) {
			o.Fail("rope_theta", "%g is out of range (1, 1e30)", v)
		}
		return v
	}
	if k := slide.OptString("rope_type", "type"); k != "" && k != "default" {
		slide.Fail("rope_type", "%q is not supported (want default)", k)
	}
	if f, ok := slide.OptFloat(1, "partial_rotary_factor"); ok && f != 1 {
		slide.Fail("partial_rotary_factor", "%g: transformers rotates the whole head of sliding layers, mlx-lm a part; only 1 is unambiguous", f)
	}
	c.RopeTheta, c.RotaryDim = theta(slide, 10000), c.HeadDim

	g.FullRopeTheta = theta(full, 1000000)
	g.FullRopeFactor, _ = full.OptFloat(1, "factor")
	if !(g.FullRopeFactor > 0) || math.IsInf(g.FullRopeFactor, 0) {
		full.Fail("factor", "%g is out of range (0, inf)", g.FullRopeFactor)
	}
	prf, _ := full.OptFloat(1, "partial_rotary_factor")
	if !(prf > 0 && prf <= 1) {
		full.Fail("partial_rotary_factor", "%g is out of range (0, 1]", prf)
		return
	}
	switch k := full.OptString("rope_type", "type"); k {
	case "proportional":
		g.FullRopePairs = int(prf * float64(g.FullHeadDim) / 2) // transformers: int(prf * D // 2)
	case "", "default":
		if prf != 1 {
			full.Fail("partial_rotary_factor", "%g with default RoPE is not supported (want proportional)", prf)
		}
		g.FullRopePairs = g.FullHeadDim / 2
	default:
		full.Fail("rope_type", "%q is not supported (want proportional or default)", k)
	}
	if g.FullHeadDim%2 != 0 {
		t.Fail("global_head_dim", "%d is odd (RoPE pairs d with d + D/2)", g.FullHeadDim)
	}
}

// hasNull reports whether key is present with a null value.
func hasNull(o *Object, key string) bool {
	raw, ok := o.m[key]
	return ok && isNull(raw)
}
