package qwen3next

import (
	"fmt"
	"slices"
	"strings"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// graph is a loaded model's weights.
type graph struct {
	cfg    *runtime.Config
	embed  mlxq.Matrix // [V, H]
	norm   []float32   // final norm (1+w)
	head   mlxq.Matrix // [V, H]; the embedding when tied
	layers []*layer
	rope   *nn.RoPE
	eps    float32

	bound nn.Bindings // the resident weights on the last device used
}

type layer struct {
	index    int
	inNorm   []float32
	postNorm []float32
	lin      *deltaNet  // nil for a full-attention layer
	attn     *attention // nil for a DeltaNet layer
	moe      *moeBlock  // nil for a dense-MLP layer
	mlp      *nn.MLP
}

type deltaNet struct {
	// The input projections. qwen3_5 stores them apart; qwen3_next's fused
	// in_proj_qkvz and in_proj_ba are reordered at load (fusedPermutation)
	// and these are row ranges of them.
	qkv     mlxq.Matrix // [2Kd+Vd, H]: [q | k | v]
	z, b, a mlxq.Matrix // [Vd, H], [Nv, H], [Nv, H]
	conv    []float32   // [C][K], j = K-1 multiplies the current input
	negA    []float32   // -exp(A_log) per value head
	dtBias  []float32   // per value head
	norm    []float32   // gated norm weight [dv], plain
	out     mlxq.Matrix // [H, Vd]
}

type attention struct {
	q, k, v, o   mlxq.Matrix
	qNorm, kNorm []float32
}

type moeBlock struct {
	router     mlxq.Matrix // [E, H]
	shared     *nn.MLP     // nil if there is no shared expert
	sharedGate mlxq.Matrix // [1, H]
}

// Build reads a qwen3_next / qwen3_5_moe model's dense weights (MLX names,
// e.g. "model.layers.0.linear_attn.in_proj_qkvz.weight").
func Build(b *runtime.Weights) (runtime.Graph, error) {
	c := b.Config()
	m := &graph{cfg: c, rope: nn.NewRoPE(c.RotaryDim, c.RopeTheta), eps: float32(c.RMSNormEps)}
	var err error
	p := c.Prefix
	if m.embed, err = b.Matrix(p+"embed_tokens", c.Vocab, c.Hidden); err != nil {
		return nil, err
	}
	if m.norm, err = b.Vector(p+"norm.weight", int64(c.Hidden)); err != nil {
		return nil, err
	}
	headModule := strings.TrimSuffix(c.HeadPrefix, ".")
	switch {
	case b.Has(headModule + ".weight"):
		if m.head, err = b.Matrix(headModule, c.Vocab, c.Hidden); err != nil {
			return nil, err
		}
	case c.TieWordEmbeddings:
		m.head = m.embed
	default:
		return nil, fmt.Errorf("tensor %s.weight missing (and tie_word_embeddings is false)", headModule)
	}
	for l := 0; l < c.Layers; l++ {
		ly, err := buildLayer(b, l)
		if err != nil {
			return nil, err
		}
		m.layers = append(m.layers, ly)
	}
	return m, nil
}

func buildLayer(b *runtime.Weights, l int) (*layer, error) {
	c := b.Config()
	lp := fmt.Sprintf("%slayers.%d.", c.Prefix, l)
	ly := &layer{index: l}
	var err error
	H := int64(c.Hidden)
	if ly.inNorm, err = b.Vector(lp+"input_layernorm.weight", H); err != nil {
		return nil, err
	}
	if ly.postNorm, err = b.Vector(lp+"post_attention_layernorm.weight", H); err != nil {
		return nil, err
	}
	if c.FullAttention[l] {
		if ly.attn, err = buildAttention(b, lp+"self_attn."); err != nil {
			return nil, err
		}
	} else if ly.lin, err = buildDeltaNet(b, lp+"linear_attn."); err != nil {
		return nil, err
	}
	if c.Sparse[l] {
		ly.moe, err = buildMoE(b, lp+"mlp.")
	} else {
		ly.mlp, err = buildMLP(b, lp+"mlp.", c.Intermediate)
	}
	if err != nil {
		return nil, err
	}
	return ly, nil
}

func buildAttention(b *runtime.Weights, p string) (*attention, error) {
	c := b.Config()
	a := &attention{}
	qRows := c.Heads * c.HeadDim
	if c.AttnOutputGate {
		qRows *= 2
	}
	var err error
	for _, t := range []struct {
		m          *mlxq.Matrix
		name       string
		rows, cols int
	}{
		{&a.q, "q_proj", qRows, c.Hidden},
		{&a.k, "k_proj", c.KVHeads * c.HeadDim, c.Hidden},
		{&a.v, "v_proj", c.KVHeads * c.HeadDim, c.Hidden},
		{&a.o, "o_proj", c.Hidden, c.Heads * c.HeadDim},
	} {
		if *t.m, err = b.Matrix(p+t.name, t.rows, t.cols); err != nil {
			return nil, err
		}
	}
	if a.qNorm, err = b.Vector(p+"q_norm.weight", int64(c.HeadDim)); err != nil {
		return nil, err
	}
	if a.kNorm, err = b.Vector(p+"k_norm.weight", int64(c.HeadDim)); err != nil {
		return nil, err
	}
	return a, nil
}

func buildDeltaNet(b *runtime.Weights, p string) (*deltaNet, error) {
	c := b.Config()
	d := &deltaNet{}
	Kd, Vd, Nv := c.LinearKeyDim(), c.LinearValueDim(), c.LinValueHeads
	C := c.ConvDim()
	var err error
	switch {
	case b.Has(p + "in_proj_qkvz.weight"):
		// Reordered once here into [q | k | v | z] and [b | a], so that the
		// products land where the conv and the recurrence read them (no
		// gather a step).
		perm, permBA := fusedPermutation(c)
		qkvz, err := b.PermutedMatrix(p+"in_proj_qkvz", 2*Kd+2*Vd, c.Hidden, perm)
		if err != nil {
			return nil, err
		}
		ba, err := b.PermutedMatrix(p+"in_proj_ba", 2*Nv, c.Hidden, permBA)
		if err != nil {
			return nil, err
		}
		if !b.Sizing() {
			d.qkv, d.z = qkvz.SliceRows(0, C), qkvz.SliceRows(C, C+Vd)
			d.b, d.a = ba.SliceRows(0, Nv), ba.SliceRows(Nv, 2*Nv)
		}
	case b.Has(p + "in_proj_qkv.weight"):
		for _, t := range []struct {
			m    *mlxq.Matrix
			name string
			rows int
		}{{&d.qkv, "in_proj_qkv", C}, {&d.z, "in_proj_z", Vd}, {&d.b, "in_proj_b", Nv}, {&d.a, "in_proj_a", Nv}} {
			if *t.m, err = b.Matrix(p+t.name, t.rows, c.Hidden); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("tensor %sin_proj_qkvz.weight (qwen3_next) or %sin_proj_qkv.weight (qwen3_5) missing", p, p)
	}
	// MLX stores the depthwise conv as [C, K, 1]; transformers as [C, 1, K],
	// with norms not yet shifted to 1+w, which this runner does not undo.
	convName := p + "conv1d.weight"
	if _, shape, ok := b.Info(convName); ok && slices.Equal(shape, []int64{int64(C), 1, int64(c.ConvKernel)}) && c.ConvKernel != 1 {
		return nil, fmt.Errorf("tensor %s: shape %s is the transformers layout; convert the checkpoint with mlx-lm first (MLX layout is [%d, %d, 1])",
			convName, runtime.ShapeString(shape), C, c.ConvKernel)
	}
	if d.conv, err = b.Vector(convName, int64(C), int64(c.ConvKernel), 1); err != nil {
		return nil, err
	}
	aLog, err := b.Vector(p+"A_log", int64(Nv))
	if err != nil {
		return nil, err
	}
	d.negA = make([]float32, Nv)
	for i, v := range aLog {
		d.negA[i] = -nn.Expf(v)
	}
	if d.dtBias, err = b.Vector(p+"dt_bias", int64(Nv)); err != nil {
		return nil, err
	}
	if d.norm, err = b.Vector(p+"norm.weight", int64(c.LinValHeadDim)); err != nil {
		return nil, err
	}
	if d.out, err = b.Matrix(p+"out_proj", c.Hidden, Vd); err != nil {
		return nil, err
	}
	return d, nil
}

// fusedPermutation maps the qwen3_next fused projections' rows onto the
// concatenated layout (perm[i]: where row i goes). in_proj_qkvz rows are
// grouped per key head g: [q_g (dk) | k_g (dk) | v of the r = Nv/Nk value
// heads of g (r·dv) | z of those heads (r·dv)]; the destination is
// [q (Kd) | k (Kd) | v (Vd) | z (Vd)], heads ascending. in_proj_ba rows per
// key head: [b (r) | a (r)] → [b (Nv) | a (Nv)].
func fusedPermutation(c *runtime.Config) (perm, permBA []int32) {
	Nk, dk, dv := c.LinKeyHeads, c.LinKeyHeadDim, c.LinValHeadDim
	r := c.LinValueHeads / Nk
	Kd, Vd, Nv := c.LinearKeyDim(), c.LinearValueDim(), c.LinValueHeads
	group := 2*dk + 2*r*dv
	perm = make([]int32, Nk*group)
	for g := range Nk {
		base := g * group
		for i := range dk {
			perm[base+i] = int32(g*dk + i)
			perm[base+dk+i] = int32(Kd + g*dk + i)
		}
		for i := range r * dv {
			perm[base+2*dk+i] = int32(2*Kd + g*r*dv + i)
			perm[base+2*dk+r*dv+i] = int32(2*Kd + Vd + g*r*dv + i)
		}
	}
	permBA = make([]int32, 2*Nv)
	for g := range Nk {
		for i := range r {
			permBA[g*2*r+i] = int32(g*r + i)
			permBA[g*2*r+r+i] = int32(Nv + g*r + i)
		}
	}
	return perm, permBA
}

func buildMLP(b *runtime.Weights, p string, inter int) (*nn.MLP, error) {
	c := b.Config()
	d := &nn.MLP{Act: nn.SiLUGate}
	var err error
	if d.Gate, err = b.Matrix(p+"gate_proj", inter, c.Hidden); err != nil {
		return nil, err
	}
	if d.Up, err = b.Matrix(p+"up_proj", inter, c.Hidden); err != nil {
		return nil, err
	}
	if d.Down, err = b.Matrix(p+"down_proj", c.Hidden, inter); err != nil {
		return nil, err
	}
	return d, nil
}

func buildMoE(b *runtime.Weights, p string) (*moeBlock, error) {
	c := b.Config()
	mb := &moeBlock{}
	var err error
	if mb.router, err = b.Matrix(p+"gate", c.Experts, c.Hidden); err != nil {
		return nil, err
	}
	if b.Has(p + "shared_expert.gate_proj.weight") {
		if c.SharedIntermediate == 0 {
			return nil, fmt.Errorf("tensor %sshared_expert.gate_proj.weight present but shared_expert_intermediate_size is 0", p)
		}
		if mb.shared, err = buildMLP(b, p+"shared_expert.", c.SharedIntermediate); err != nil {
			return nil, err
		}
		if mb.sharedGate, err = b.Matrix(p+"shared_expert_gate", 1, c.Hidden); err != nil {
			return nil, err
		}
	} else if c.SharedIntermediate > 0 {
		return nil, fmt.Errorf("tensor %sshared_expert.gate_proj.weight missing", p)
	}
	return mb, nil
}
