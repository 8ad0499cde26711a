package tinymodel

import (
	"fmt"
	"slices"
	"strings"
)

// Standard deviations of the generated weights. Projections use 0.08 (an
// initializer range that keeps activations well away from the eps terms of
// the norms); the router is wider so top-k choices are decisive rather than
// near ties that rounding could flip.
const (
	stdLinear   = 0.08
	stdRouter   = 0.25
	stdNorm     = 0.2 // zero-centred norms: stored 1+w, w ~ N(0, 0.2)
	stdGatedNrm = 0.2 // gated norm: 1 + N(0, 0.2), stored plain
	stdConv     = 0.3
)

type tensorKind int

const (
	kindLinear tensorKind = iota // quantizable Linear / Embedding / SwitchLinear weight
	kindFloat                    // norms, conv1d, dt_bias: float, BF16 in quantized checkpoints
	kindALog                     // A_log: like kindFloat, but F32 in quantized qwen3_5_moe
)

// floatTensor is one tensor of the float model, named and shaped as mlx-lm
// writes it.
type floatTensor struct {
	name     string
	shape    []int
	vals     []float32
	kind     tensorKind
	override bool // router or shared_expert_gate: 8-bit group 64 in quantized checkpoints
}

// module returns the module path of a weight ("x.y.weight" -> "x.y").
func (t *floatTensor) module() string { return strings.TrimSuffix(t.name, ".weight") }

// prefixes returns the model-body prefix and the lm_head name stem.
func prefixes(arch string) (body, head string) {
	if arch == ArchQwen35MoE {
		return "language_model.model.", "language_model.lm_head"
	}
	return "model.", "lm_head"
}

// floatModel builds every tensor of the float model, sorted by name.
func floatModel(s Spec) []floatTensor {
	d := s.dims()
	body, head := prefixes(s.Arch)
	h := d.HiddenSize
	var out []floatTensor

	normal := func(name string, std float64, kind tensorKind, shape ...int) {
		n := prod(shape)
		g := newRNG(s.Seed, name)
		v := make([]float32, n)
		for i := range v {
			v[i] = g.normalF32(0, std)
		}
		out = append(out, floatTensor{name: name, shape: shape, vals: v, kind: kind})
	}
	onePlus := func(name string, std float64, shape ...int) {
		g := newRNG(s.Seed, name)
		v := make([]float32, prod(shape))
		for i := range v {
			v[i] = g.normalF32(1, std)
		}
		out = append(out, floatTensor{name: name, shape: shape, vals: v, kind: kindFloat})
	}
	linear := func(name string, rows, cols int) { normal(name+".weight", stdLinear, kindLinear, rows, cols) }

	normal(body+"embed_tokens.weight", stdLinear, kindLinear, d.VocabSize, h)
	linear(head, d.VocabSize, h)
	onePlus(body+"norm.weight", stdNorm, h)

	kd, vd, nv := d.keyDim(), d.valueDim(), d.LinearNumValueHeads
	for l := range d.NumHiddenLayers {
		p := fmt.Sprintf("%slayers.%d.", body, l)
		onePlus(p+"input_layernorm.weight", stdNorm, h)
		onePlus(p+"post_attention_layernorm.weight", stdNorm, h)
		if d.isFull(l) {
			a := p + "self_attn."
			linear(a+"q_proj", 2*d.NumAttentionHeads*d.HeadDim, h) // q and gate interleaved per head
			linear(a+"k_proj", d.NumKeyValueHeads*d.HeadDim, h)
			linear(a+"v_proj", d.NumKeyValueHeads*d.HeadDim, h)
			linear(a+"o_proj", h, d.NumAttentionHeads*d.HeadDim)
			onePlus(a+"q_norm.weight", stdNorm, d.HeadDim)
			onePlus(a+"k_norm.weight", stdNorm, d.HeadDim)
		} else {
			a := p + "linear_attn."
			if s.Arch == ArchQwen3Next {
				linear(a+"in_proj_qkvz", 2*kd+2*vd, h)
				linear(a+"in_proj_ba", 2*nv, h)
			} else {
				linear(a+"in_proj_qkv", 2*kd+vd, h)
				linear(a+"in_proj_z", vd, h)
				linear(a+"in_proj_b", nv, h)
				linear(a+"in_proj_a", nv, h)
			}
			normal(a+"conv1d.weight", stdConv, kindFloat, d.convDim(), d.LinearConvKernelDim, 1)
			{
				name := a + "A_log"
				g := newRNG(s.Seed, name)
				v := make([]float32, nv)
				for i := range v {
					v[i] = float32(detLog(g.uniform(1, 16)))
				}
				out = append(out, floatTensor{name: name, shape: []int{nv}, vals: v, kind: kindALog})
			}
			{
				name := a + "dt_bias"
				g := newRNG(s.Seed, name)
				v := make([]float32, nv)
				for i := range v {
					v[i] = float32(g.uniform(0, 1))
				}
				out = append(out, floatTensor{name: name, shape: []int{nv}, vals: v, kind: kindFloat})
			}
			onePlus(a+"norm.weight", stdGatedNrm, d.LinearValueHeadDim)
			linear(a+"out_proj", h, vd)
		}
		m := p + "mlp."
		normal(m+"gate.weight", stdRouter, kindLinear, d.NumExperts, h)
		out[len(out)-1].override = true
		normal(m+"shared_expert_gate.weight", stdLinear, kindLinear, 1, h)
		out[len(out)-1].override = true
		linear(m+"shared_expert.gate_proj", d.SharedIntermediateSize, h)
		linear(m+"shared_expert.up_proj", d.SharedIntermediateSize, h)
		linear(m+"shared_expert.down_proj", h, d.SharedIntermediateSize)
		normal(m+"switch_mlp.gate_proj.weight", stdLinear, kindLinear, d.NumExperts, d.MoeIntermediateSize, h)
		normal(m+"switch_mlp.up_proj.weight", stdLinear, kindLinear, d.NumExperts, d.MoeIntermediateSize, h)
		normal(m+"switch_mlp.down_proj.weight", stdLinear, kindLinear, d.NumExperts, h, d.MoeIntermediateSize)
	}
	slices.SortFunc(out, func(a, b floatTensor) int { return strings.Compare(a.name, b.name) })
	return out
}

func prod(shape []int) int {
	n := 1
	for _, v := range shape {
		n *= v
	}
	return n
}
