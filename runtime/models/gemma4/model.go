package gemma4

import (
	"fmt"
	"math"
	"strings"

	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// graph is a loaded Gemma 4 model's weights.
type graph struct {
	cfg        *runtime.Config
	g          *modelconfig.Gemma4
	embed      mlxq.Matrix // [V, H]
	embedScale float32     // sqrt(H)
	norm       []float32
	head       mlxq.Matrix // the embedding when tied
	layers     []*layer
	eps        float32
	softcap    float32

	bound nn.Bindings // the resident weights on the last device used
}

type layer struct {
	// attention
	sliding      bool
	heads, kv    int // query heads, KV heads
	hd           int // head dim
	kEqV         bool
	q, k, v, o   mlxq.Matrix // v empty with kEqV
	qNorm, kNorm []float32
	rope         *nn.RoPE
	window       int

	inNorm, postAttnNorm []float32
	// dense MLP
	preFF, postFF1 []float32
	mlp            *nn.MLP
	// router and experts
	routerScale []float32 // [H], times hidden^-0.5 already
	router      mlxq.Matrix
	expertScale []float32 // per_expert_scale [E]
	preFF2      []float32
	postFF2     []float32
	postFF      []float32
	scalar      float32
}

// Build reads a Gemma 4 text model's dense weights (MLX names under
// language_model.model. for the wrapped model_type gemma4, model. for a
// bare gemma4_text).
func Build(b *runtime.Weights) (runtime.Graph, error) {
	c := b.Config()
	g, ok := c.Extra.(*modelconfig.Gemma4)
	if !ok || g == nil {
		return nil, fmt.Errorf("config of model_type %s has no Gemma 4 description (got %T)", c.ModelType, c.Extra)
	}
	m := &graph{cfg: c, g: g, eps: float32(c.RMSNormEps), softcap: float32(g.FinalLogitSoftcap)}
	p := c.Prefix
	var err error
	if m.embed, err = b.Matrix(p+"embed_tokens", c.Vocab, c.Hidden); err != nil {
		return nil, err
	}
	// transformers multiplies by sqrt(hidden) cast to the embedding
	// weight's dtype: with float32 activations (this runner's, and a
	// float32 or float64 transformers model's) that is sqrt(hidden) itself;
	// only a model run in bf16 rounds it (53.07 → 53.0 for the 26B).
	m.embedScale = float32(math.Sqrt(float64(c.Hidden)))
	if m.norm, err = b.Vector(p+"norm.weight", int64(c.Hidden)); err != nil {
		return nil, err
	}
	headModule := strings.TrimSuffix(c.HeadPrefix, ".")
	switch {
	case c.TieWordEmbeddings:
		m.head = m.embed
	case b.Has(headModule + ".weight"):
		if m.head, err = b.Matrix(headModule, c.Vocab, c.Hidden); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("tensor %s.weight missing (and tie_word_embeddings is false)", headModule)
	}
	for l := range c.Layers {
		ly, err := buildLayer(b, g, l)
		if err != nil {
			return nil, err
		}
		m.layers = append(m.layers, ly)
	}
	return m, nil
}

func buildLayer(b *runtime.Weights, g *modelconfig.Gemma4, l int) (*layer, error) {
	c := b.Config()
	lp := fmt.Sprintf("%slayers.%d.", c.Prefix, l)
	H := c.Hidden
	ly := &layer{sliding: g.Sliding[l], heads: c.Heads}
	if ly.sliding {
		ly.kv, ly.hd, ly.window = c.KVHeads, c.HeadDim, g.SlidingWindow
		ly.rope = nn.NewRoPE(c.HeadDim, c.RopeTheta)
	} else {
		ly.kv, ly.hd, ly.kEqV = g.FullKVHeads, g.FullHeadDim, g.AttentionKEqV
		ly.rope = nn.NewProportionalRoPE(g.FullHeadDim, g.FullRopePairs, g.FullRopeTheta, g.FullRopeFactor)
	}
	if ly.heads%ly.kv != 0 {
		return nil, fmt.Errorf("layer %d: %d attention heads do not share %d KV heads evenly", l, ly.heads, ly.kv)
	}
	ap := lp + "self_attn."
	var err error
	mats := []struct {
		m          *mlxq.Matrix
		name       string
		rows, cols int
	}{
		{&ly.q, "q_proj", ly.heads * ly.hd, H},
		{&ly.k, "k_proj", ly.kv * ly.hd, H},
		{&ly.o, "o_proj", H, ly.heads * ly.hd},
	}
	if !ly.kEqV {
		mats = append(mats, struct {
			m          *mlxq.Matrix
			name       string
			rows, cols int
		}{&ly.v, "v_proj", ly.kv * ly.hd, H})
	} else if b.Has(ap + "v_proj.weight") {
		return nil, fmt.Errorf("tensor %sv_proj.weight present, but attention_k_eq_v says layer %d's values are its keys", ap, l)
	}
	for _, t := range mats {
		if *t.m, err = b.Matrix(ap+t.name, t.rows, t.cols); err != nil {
			return nil, err
		}
	}
	if ly.qNorm, err = b.Vector(ap+"q_norm.weight", int64(ly.hd)); err != nil {
		return nil, err
	}
	if ly.kNorm, err = b.Vector(ap+"k_norm.weight", int64(ly.hd)); err != nil {
		return nil, err
	}
	for _, v := range []struct {
		dst  *[]float32
		name string
	}{
		{&ly.inNorm, "input_layernorm"}, {&ly.postAttnNorm, "post_attention_layernorm"},
		{&ly.preFF, "pre_feedforward_layernorm"}, {&ly.postFF1, "post_feedforward_layernorm_1"},
		{&ly.preFF2, "pre_feedforward_layernorm_2"}, {&ly.postFF2, "post_feedforward_layernorm_2"},
		{&ly.postFF, "post_feedforward_layernorm"}, {&ly.routerScale, "router.scale"},
	} {
		if *v.dst, err = b.Vector(lp+v.name+suffix(v.name), int64(H)); err != nil {
			return nil, err
		}
	}
	root := float32(math.Pow(float64(H), -0.5))
	for i := range ly.routerScale {
		ly.routerScale[i] *= root
	}
	if ly.expertScale, err = b.Vector(lp+"router.per_expert_scale", int64(c.Experts)); err != nil {
		return nil, err
	}
	if ly.router, err = b.Matrix(lp+"router.proj", c.Experts, H); err != nil {
		return nil, err
	}
	scalar, err := b.Vector(lp+"layer_scalar", 1)
	if err != nil {
		return nil, err
	}
	if len(scalar) == 1 {
		ly.scalar = scalar[0]
	}
	ly.mlp = &nn.MLP{Act: nn.GELUTanhGate}
	mp := lp + "mlp."
	if ly.mlp.Gate, err = b.Matrix(mp+"gate_proj", c.Intermediate, H); err != nil {
		return nil, err
	}
	if ly.mlp.Up, err = b.Matrix(mp+"up_proj", c.Intermediate, H); err != nil {
		return nil, err
	}
	if ly.mlp.Down, err = b.Matrix(mp+"down_proj", H, c.Intermediate); err != nil {
		return nil, err
	}
	return ly, nil
}

// suffix is ".weight" for a norm (router.scale is a bare parameter).
func suffix(name string) string {
	if name == "router.scale" {
		return ""
	}
	return ".weight"
}
