package synthetic

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/runtime"
)

// GemmaDims are the text-model dimensions of a synthetic Gemma 4 MoE
// (model_type gemma4 wrapping gemma4_text, MLX names under
// language_model.model., experts stacked under experts.switch_glu, the
// embedding tied to the head).
type GemmaDims struct {
	Hidden, Vocab int
	Full          []bool // per layer: full attention (else sliding window)
	Heads         int
	KVHeads       int // sliding layers
	HeadDim       int // sliding layers
	FullKVHeads   int // full layers (num_global_key_value_heads, with KEqV)
	FullHeadDim   int // full layers (global_head_dim)
	KEqV          bool
	Window        int
	Experts, TopK int
	MoEInter      int // each routed expert
	Inter         int // the dense GeGLU MLP beside the experts
	// Bits, Group and Unique as in Dims: every Linear/Embedding whose input
	// is a multiple of Group at Bits, router.proj at 8 bits group 64.
	Bits, Group, Unique int
}

// Gemma26B returns the per-layer dims of Gemma 4 26B-A4B (MLX 4-bit, from
// ../shared/refdata/configs/gemma-4-26b-a4b-it-4bit.MLX.RECONSTRUCTED.config.json)
// with the given layers and vocab (the real model has 30 and 262,144):
// hidden 2816, 128 experts top-8 of 704 beside a dense MLP of 2112, 16
// query heads; sliding layers 8 KV heads of 256 with a 1024 window, full
// layers 2 KV heads of 512 with k_eq_v. Layer types follow the real
// pattern (every 6th full), the last layer full if none would be: 3 layers
// are sliding, sliding, full. Expert blobs are 3,345,408 bytes, 428 MB of
// experts per layer.
func Gemma26B(layers, vocab int) GemmaDims {
	full := make([]bool, layers)
	hasFull := false
	for l := range full {
		full[l] = (l+1)%6 == 0
		hasFull = hasFull || full[l]
	}
	if !hasFull && layers > 0 {
		full[layers-1] = true
	}
	return GemmaDims{Hidden: 2816, Vocab: vocab, Full: full, Heads: 16, KVHeads: 8, HeadDim: 256,
		FullKVHeads: 2, FullHeadDim: 512, KEqV: true, Window: 1024, Experts: 128, TopK: 8,
		MoEInter: 704, Inter: 2112, Bits: 4, Group: 64}
}

// GemmaTiny returns small Gemma 4 dims for tests: 3 layers (sliding,
// sliding, full), hidden 128, 8 experts top-2, 4-bit group 64.
func GemmaTiny() GemmaDims {
	return GemmaDims{Hidden: 128, Vocab: 384, Full: []bool{false, false, true}, Heads: 4, KVHeads: 2, HeadDim: 32,
		FullKVHeads: 1, FullHeadDim: 64, KEqV: true, Window: 4, Experts: 8, TopK: 2, MoEInter: 64, Inter: 128,
		Bits: 4, Group: 64}
}

const gemmaPrefix = "language_model.model."

// attn returns layer l's KV heads, head dim and whether its values are its keys.
func (d GemmaDims) attn(l int) (kv, hd int, kEqV bool) {
	if !d.Full[l] {
		return d.KVHeads, d.HeadDim, false
	}
	if d.KEqV {
		return d.FullKVHeads, d.FullHeadDim, true
	}
	return d.KVHeads, d.FullHeadDim, false
}

// ConfigJSON returns a config.json for d shaped like the MLX conversions of
// the real model (gemma4 wrapper, text_config gemma4_text, the router's
// 8-bit overrides in quantization).
func (d GemmaDims) ConfigJSON() []byte {
	types := make([]string, len(d.Full))
	for l, f := range d.Full {
		types[l] = "sliding_attention"
		if f {
			types[l] = "full_attention"
		}
	}
	text := map[string]any{
		"model_type": "gemma4_text", "hidden_size": d.Hidden, "num_hidden_layers": len(d.Full),
		"intermediate_size": d.Inter, "moe_intermediate_size": d.MoEInter, "num_experts": d.Experts,
		"top_k_experts": d.TopK, "enable_moe_block": true, "num_attention_heads": d.Heads,
		"num_key_value_heads": d.KVHeads, "head_dim": d.HeadDim, "num_global_key_value_heads": d.FullKVHeads,
		"global_head_dim": d.FullHeadDim, "attention_k_eq_v": d.KEqV, "sliding_window": d.Window,
		"layer_types": types,
		"rope_parameters": map[string]any{
			"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 10000.0},
			"full_attention":    map[string]any{"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
		},
		"final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
		"vocab_size": d.Vocab, "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0,
		"use_double_wide_mlp": false, "max_position_embeddings": 262144, "tie_word_embeddings": true,
	}
	top := map[string]any{"architectures": []string{"Gemma4ForConditionalGeneration"}, "model_type": "gemma4",
		"tie_word_embeddings": true, "text_config": text, "eos_token_id": []int{1, 106}}
	if d.Bits > 0 {
		q := map[string]any{"group_size": d.Group, "bits": d.Bits, "mode": "affine"}
		for l := range d.Full {
			q[fmt.Sprintf("%slayers.%d.router.proj", gemmaPrefix, l)] = map[string]int{"group_size": 64, "bits": 8}
		}
		top["quantization"], top["quantization_config"] = q, q
	}
	out, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		panic(err)
	}
	return out
}

// gemmaGen draws Gemma 4 tensors with the qwen generator's helpers (its
// quantization rules: router.proj at 8 bits).
func gemmaGen(d GemmaDims, seed uint64) *gen {
	g := newGen(Dims{ModelType: modelconfig.TypeGemma4, Bits: d.Bits, Group: d.Group, Unique: d.Unique}, seed)
	g.noTile = true
	return g
}

// gemmaDense draws every tensor but the routed experts.
func gemmaDense(g *gen, d GemmaDims) error {
	H := d.Hidden
	// Every row distinct (Unique is for the experts): with a few distinct
	// rows the whole vocabulary would share a few inputs, and attention's
	// averages would make the routing settle on a few experts.
	if err := g.rowBlocks(gemmaPrefix+"embed_tokens", d.Vocab, H, math.Sqrt(3/float64(H))); err != nil {
		return err
	}
	norm := func(n int) []float32 { // Gemma 4 norms multiply by w itself
		v := g.uniform(n, 0.2)
		for i := range v {
			v[i] += 1
		}
		return v
	}
	g.vector(gemmaPrefix+"norm.weight", norm(H), int64(H))
	for l := range d.Full {
		p := fmt.Sprintf("%slayers.%d.", gemmaPrefix, l)
		for _, n := range []string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
			"post_feedforward_layernorm", "pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"} {
			g.vector(p+n+".weight", norm(H), int64(H))
		}
		g.vector(p+"layer_scalar", []float32{float32(0.6 + 0.8*g.rng.Float64())}, 1)
		kv, hd, kEqV := d.attn(l)
		a := p + "self_attn."
		type mat struct {
			name       string
			rows, cols int
		}
		mats := []mat{{a + "q_proj", d.Heads * hd, H}, {a + "k_proj", kv * hd, H}, {a + "o_proj", H, d.Heads * hd},
			{p + "mlp.gate_proj", d.Inter, H}, {p + "mlp.up_proj", d.Inter, H}, {p + "mlp.down_proj", H, d.Inter}}
		if !kEqV {
			mats = append(mats, mat{a + "v_proj", kv * hd, H})
		}
		for _, t := range mats {
			if err := g.linear(t.name, g.linearValues(t.rows, t.cols, 1), 0, t.rows, t.cols); err != nil {
				return err
			}
		}
		g.vector(a+"q_norm.weight", norm(hd), int64(hd))
		g.vector(a+"k_norm.weight", norm(hd), int64(hd))
		// A wide router (its input is RMS-normalised and scaled by
		// hidden^-0.5) makes decisive, varied top-k choices.
		if err := g.linear(p+"router.proj", g.linearValues(d.Experts, H, 2*math.Sqrt(float64(H))), 0, d.Experts, H); err != nil {
			return err
		}
		g.vector(p+"router.scale", norm(H), int64(H))
		g.vector(p+"router.per_expert_scale", norm(d.Experts), int64(d.Experts))
	}
	return nil
}

// gemmaExperts draws layer l's routed experts (Unique of them when set),
// stacked, keyed by section name.
func gemmaExperts(g *gen, d GemmaDims, l int) (runtime.MapTensors, error) {
	E, I, H := d.Experts, d.MoEInter, d.Hidden
	m := fmt.Sprintf("%slayers.%d.experts.switch_glu.", gemmaPrefix, l)
	out := runtime.MapTensors{}
	for _, t := range []struct {
		n          string
		rows, cols int
	}{{"gate_proj", I, H}, {"up_proj", I, H}, {"down_proj", H, I}} {
		if err := g.bigLinear(m+t.n, E, t.rows, t.cols, math.Sqrt(3/float64(t.cols))); err != nil {
			return nil, err
		}
		for _, part := range []string{"weight", "scales", "biases"} {
			if x, ok := g.tensors[m+t.n+"."+part]; ok {
				out[t.n+"."+part] = x
				delete(g.tensors, m+t.n+"."+part)
			}
		}
	}
	return out, nil
}

// StreamGemmaContainer draws a Gemma 4 model of d from seed and writes it
// as a .qpack container at dst, one layer's experts at a time: memory is
// the dense weights plus one layer's drawn experts (Unique of them with
// d.Unique > 0, expert e's blob then being expert e % Unique's, each
// written out, so the file holds every expert's bytes).
func StreamGemmaContainer(dst string, d GemmaDims, seed uint64) error {
	cfg, err := runtime.ParseConfig(d.ConfigJSON())
	if err != nil {
		return err
	}
	g := gemmaGen(d, seed)
	if err := gemmaDense(g, d); err != nil {
		return err
	}
	dense := g.tensors
	eg := gemmaGen(d, seed^0x6578706572747300) // "experts": its own stream, so the dense draws do not depend on Unique
	return writeStacked(dst, cfg, d.ConfigJSON(), dense, func(l int) (runtime.MapTensors, error) {
		return gemmaExperts(eg, d, l)
	})
}
