// Package synthetic builds random qwen3_next / qwen3_5_moe models in memory
// (and streams them, or Gemma 4 MoE models, straight into .qpack containers),
// laid out exactly like MLX checkpoints (same tensor names, stacked experts,
// affine-quantized with mlxq.Quantize), for tests and benchmarks that need
// real dimensions without real weights.
package synthetic

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	_ "github.com/qpack-go/qpack/runtime/models/all" // the architectures it loads
)

// Dims are the text-model dimensions of a synthetic model.
type Dims struct {
	ModelType                  string // runtime.TypeQwen3Next or runtime.TypeQwen35MoE
	Hidden, Layers, Vocab      int
	Heads, KVHeads, HeadDim    int
	PartialRotary, RopeTheta   float64
	LinKeyHeads, LinValueHeads int
	LinKeyDim, LinValueDim     int
	ConvKernel                 int
	Experts, TopK              int
	MoEInter, SharedInter      int
	FullEvery                  int // every FullEvery-th layer is full attention
	Tied                       bool
	DenseLayers                []int // qwen3_next mlp_only_layers: a dense SwiGLU MLP of 2·MoEInter

	// Bits > 0 quantizes every Linear/Embedding whose input dim is a
	// multiple of Group at Bits (router and shared_expert_gate at 8 bits,
	// group 64, as mlx-lm does), scales/biases and float tensors in BF16.
	// Bits == 0 stores everything as F32.
	Bits, Group int

	// Unique, if > 0, bounds the random draws of the stacked experts: only
	// the first Unique experts of a stacked tensor are drawn and quantized;
	// the rest repeat their bytes (still separate memory, so a benchmark
	// touches as many bytes as with all-distinct weights). An embedding or
	// lm_head is drawn whole (in blocks of rows) either way, so no two
	// tokens share a row. 0 draws everything at once.
	Unique int
}

// Tiny returns the dims of the tiny test models (testdata/tiny).
func Tiny(modelType string) Dims {
	return Dims{ModelType: modelType, Hidden: 64, Layers: 8, Vocab: 384, Heads: 4, KVHeads: 2, HeadDim: 16,
		PartialRotary: 0.25, RopeTheta: 1e7, LinKeyHeads: 2, LinValueHeads: 4, LinKeyDim: 16, LinValueDim: 16,
		ConvKernel: 4, Experts: 8, TopK: 2, MoEInter: 64, SharedInter: 64, FullEvery: 4}
}

// Real returns the per-layer dims of Qwen3.5/3.6-35B-A3B (layers and vocab
// as given), 4-bit group 64.
func Real(layers, vocab int) Dims {
	return Dims{ModelType: runtime.TypeQwen35MoE, Hidden: 2048, Layers: layers, Vocab: vocab, Heads: 16, KVHeads: 2,
		HeadDim: 256, PartialRotary: 0.25, RopeTheta: 1e7, LinKeyHeads: 16, LinValueHeads: 32, LinKeyDim: 128,
		LinValueDim: 128, ConvKernel: 4, Experts: 256, TopK: 8, MoEInter: 512, SharedInter: 512, FullEvery: 4,
		Bits: 4, Group: 64}
}

func (d Dims) prefix() (layers, head string) {
	if d.ModelType == runtime.TypeQwen35MoE {
		return "language_model.model.", "language_model.lm_head"
	}
	return "model.", "lm_head"
}

// ConfigJSON returns a config.json for d, shaped like mlx-lm writes it.
func (d Dims) ConfigJSON() []byte {
	text := map[string]any{
		"hidden_size": d.Hidden, "num_hidden_layers": d.Layers, "vocab_size": d.Vocab,
		"num_attention_heads": d.Heads, "num_key_value_heads": d.KVHeads, "head_dim": d.HeadDim,
		"rms_norm_eps": 1e-6, "linear_conv_kernel_dim": d.ConvKernel,
		"linear_key_head_dim": d.LinKeyDim, "linear_value_head_dim": d.LinValueDim,
		"linear_num_key_heads": d.LinKeyHeads, "linear_num_value_heads": d.LinValueHeads,
		"num_experts": d.Experts, "num_experts_per_tok": d.TopK, "moe_intermediate_size": d.MoEInter,
		"shared_expert_intermediate_size": d.SharedInter, "intermediate_size": 2 * d.MoEInter,
		"decoder_sparse_step": 1, "mlp_only_layers": append([]int{}, d.DenseLayers...), "norm_topk_prob": true,
		"full_attention_interval": d.FullEvery, "hidden_act": "silu", "attention_bias": false,
		"tie_word_embeddings": d.Tied,
	}
	top := map[string]any{"model_type": d.ModelType, "tie_word_embeddings": d.Tied}
	if d.ModelType == runtime.TypeQwen35MoE {
		text["model_type"] = "qwen3_5_moe_text"
		text["attn_output_gate"] = true
		types := make([]string, d.Layers)
		for i := range types {
			types[i] = "linear_attention"
			if (i+1)%d.FullEvery == 0 {
				types[i] = "full_attention"
			}
		}
		text["layer_types"] = types
		text["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": d.RopeTheta,
			"partial_rotary_factor": d.PartialRotary, "mrope_interleaved": true}
		top["architectures"] = []string{"Qwen3_5MoeForConditionalGeneration"}
		top["text_config"] = text
	} else {
		text["rope_theta"] = d.RopeTheta
		text["partial_rotary_factor"] = d.PartialRotary
		for k, v := range text {
			top[k] = v
		}
		top["architectures"] = []string{"Qwen3NextForCausalLM"}
	}
	if d.Bits > 0 {
		lp, _ := d.prefix()
		q := map[string]any{"group_size": d.Group, "bits": d.Bits, "mode": "affine"}
		for l := 0; l < d.Layers; l++ {
			for _, m := range []string{"mlp.gate", "mlp.shared_expert_gate"} {
				q[fmt.Sprintf("%slayers.%d.%s", lp, l, m)] = map[string]int{"group_size": 64, "bits": 8}
			}
		}
		top["quantization"] = q
		top["quantization_config"] = q
	}
	out, err := json.MarshalIndent(top, "", "  ")
	if err != nil {
		panic(err)
	}
	return out
}

// Model is a generated model: its config, its tensors in MLX checkpoint form
// (experts stacked [E, ...] under mlp.switch_mlp) and an in-memory expert
// source viewing the stacked tensors.
type Model struct {
	Dims    Dims
	Config  *runtime.Config
	Tensors runtime.MapTensors // every tensor, stacked experts included
	Experts *Experts
}

// Names returns the tensor names, sorted.
func (m *Model) Names() []string {
	out := make([]string, 0, len(m.Tensors))
	for n := range m.Tensors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Build makes a runtime.Model over the generated weights (CPU backend if nil).
func (m *Model) Build(b runtime.Backend) (*runtime.Model, error) {
	return runtime.NewModel(m.Config, m.Tensors, m.Experts, b)
}

type gen struct {
	d       Dims
	rng     *rand.Rand
	tensors runtime.MapTensors
	noTile  bool // leave stacked experts at Dims.Unique entries (StreamContainer)
}

// uniform returns n values uniform in [-a, a].
func (g *gen) uniform(n int, a float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32((2*g.rng.Float64() - 1) * a)
	}
	return out
}

// linearValues draws a [rows, cols] weight with unit-variance outputs for
// unit-variance inputs (uniform ±sqrt(3/cols)), times gain.
func (g *gen) linearValues(rows, cols int, gain float64) []float32 {
	return g.uniform(rows*cols, gain*math.Sqrt(3/float64(cols)))
}

func (g *gen) floatType() (string, mlxq.Float) {
	if g.d.Bits > 0 {
		return "BF16", mlxq.BF16
	}
	return "F32", mlxq.F32
}

func encode(v []float32, f mlxq.Float) []byte {
	b := make([]byte, len(v)*f.Size())
	mlxq.EncodeFloats(b, v, f)
	return b
}

// vector stores a float tensor.
func (g *gen) vector(name string, v []float32, shape ...int64) {
	dt, f := g.floatType()
	if name[len(name)-5:] == "A_log" && g.d.ModelType == runtime.TypeQwen35MoE {
		dt, f = "F32", mlxq.F32 // mlx-lm keeps A_log in float32 for qwen3_5
	}
	g.tensors[name] = runtime.DenseTensor{DType: dt, Shape: shape, Data: encode(v, f)}
}

// quantOf returns the bits and group a module is stored with (0 = float).
func (g *gen) quantOf(module string, cols int) (bits, group int) {
	if g.d.Bits == 0 {
		return 0, 0
	}
	if strings.HasSuffix(module, "mlp.gate") || strings.HasSuffix(module, "shared_expert_gate") ||
		strings.HasSuffix(module, "router.proj") { // the last: gemma4's router
		return 8, 64
	}
	if cols%g.d.Group != 0 {
		return 0, 0
	}
	return g.d.Bits, g.d.Group
}

// linear stores module's weight ([rows, cols] values, or [E, rows, cols] when
// stacked > 0), quantized if the dims call for it. With Dims.Unique, values
// beyond the unique part are ignored and the stored bytes repeat.
func (g *gen) linear(module string, w []float32, stacked, rows, cols int) error {
	bits, group := g.quantOf(module, cols)
	n := max(stacked, 1)
	lead := []int64{}
	if stacked > 0 {
		lead = []int64{int64(stacked)}
	}
	shape := func(c int64) []int64 { return append(append([]int64{}, lead...), int64(rows), c) }
	if bits == 0 {
		dt, f := g.floatType()
		g.tensors[module+".weight"] = runtime.DenseTensor{DType: dt, Shape: shape(int64(cols)), Data: encode(w, f)}
		return nil
	}
	var wb, sb, bb []byte
	for e := range n {
		m, err := mlxq.Quantize(w[e*rows*cols:(e+1)*rows*cols], rows, cols, bits, group, mlxq.BF16)
		if err != nil {
			return fmt.Errorf("%s: %w", module, err)
		}
		if wb == nil {
			wb = make([]byte, 0, n*len(m.Weight))
			sb = make([]byte, 0, n*len(m.Scales))
			bb = make([]byte, 0, n*len(m.Biases))
		}
		wb, sb, bb = append(wb, m.Weight...), append(sb, m.Scales...), append(bb, m.Biases...)
	}
	g.tensors[module+".weight"] = runtime.DenseTensor{DType: "U32", Shape: shape(int64(cols * bits / 32)), Data: wb}
	g.tensors[module+".scales"] = runtime.DenseTensor{DType: "BF16", Shape: shape(int64(cols / group)), Data: sb}
	g.tensors[module+".biases"] = runtime.DenseTensor{DType: "BF16", Shape: shape(int64(cols / group)), Data: bb}
	return nil
}

// tile stretches a stacked tensor's parts along their first dim to n
// experts, expert i repeating expert i % u.
func (g *gen) tile(module string, n int) {
	for _, part := range []string{".weight", ".scales", ".biases"} {
		t, ok := g.tensors[module+part]
		if !ok {
			continue
		}
		u := int(t.Shape[0])
		per := len(t.Data) / u
		data := make([]byte, n*per)
		for i := range n {
			copy(data[i*per:(i+1)*per], t.Data[(i%u)*per:(i%u+1)*per])
		}
		shape := append([]int64{int64(n)}, t.Shape[1:]...)
		g.tensors[module+part] = runtime.DenseTensor{DType: t.DType, Shape: shape, Data: data}
	}
}

// bigLinear draws and stores a large matrix ([lead·rows, cols] values; lead
// = stacked experts, or 1 for an embedding / head), honouring Dims.Unique.
func (g *gen) bigLinear(module string, stacked, rows, cols int, a float64) error {
	u := g.d.Unique
	switch {
	case u > 0 && stacked > u:
		if err := g.linear(module, g.uniform(u*rows*cols, a), u, rows, cols); err != nil {
			return err
		}
		if !g.noTile {
			g.tile(module, stacked)
		}
		return nil
	case u > 0 && stacked == 0 && rows > u:
		// An embedding or head: every row drawn, in blocks. With a few
		// distinct rows the logits would repeat across the vocabulary (Unique
		// = 32: each value 7,760 times at 248,320 entries), so a top-k draw
		// would keep thousands of tied candidates and the benchmarks would
		// time a sampler no real model makes work that hard.
		return g.rowBlocks(module, rows, cols, a)
	}
	return g.linear(module, g.uniform(max(stacked, 1)*rows*cols, a), stacked, rows, cols)
}

// rowBlocks draws and stores a [rows, cols] matrix of distinct rows, 4096
// rows at a time, so that a real vocabulary's float draws (738M values for
// Gemma 4's embedding) are never all in memory at once: every embedding
// and head of both architectures.
func (g *gen) rowBlocks(module string, rows, cols int, a float64) error {
	const block = 4096
	var acc map[string]runtime.DenseTensor
	for r := 0; r < rows; r += block {
		n := min(block, rows-r)
		if err := g.linear(module, g.uniform(n*cols, a), 0, n, cols); err != nil {
			return err
		}
		for _, part := range []string{".weight", ".scales", ".biases"} {
			t, ok := g.tensors[module+part]
			if !ok {
				continue
			}
			if acc == nil {
				acc = map[string]runtime.DenseTensor{}
			}
			x, ok := acc[part]
			if !ok {
				x = runtime.DenseTensor{DType: t.DType, Shape: append([]int64{0}, t.Shape[1:]...),
					Data: make([]byte, 0, len(t.Data)/n*rows)}
			}
			x.Data = append(x.Data, t.Data...)
			x.Shape[0] += int64(n)
			acc[part] = x
		}
	}
	for part, x := range acc {
		g.tensors[module+part] = x
	}
	return nil
}

// Generate draws a model from seed. The same seed and dims give the same
// weights; for the same seed, a qwen3_next and a qwen3_5_moe model compute
// the same function (the fused qwen3_next projections are the qwen3_5 ones
// with their rows interleaved per key head).
func Generate(d Dims, seed uint64) (*Model, error) {
	t, err := draw(d, seed, true)
	if err != nil {
		return nil, err
	}
	cfg, err := runtime.ParseConfig(d.ConfigJSON())
	if err != nil {
		return nil, err
	}
	ex, err := newExperts(cfg, t)
	if err != nil {
		return nil, err
	}
	return &Model{Dims: d, Config: cfg, Tensors: t, Experts: ex}, nil
}

func newGen(d Dims, seed uint64) *gen {
	return &gen{d: d, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), tensors: runtime.MapTensors{}}
}

// draw draws the tensors of Generate; with tile false, stacked experts stay
// at Dims.Unique entries.
func draw(d Dims, seed uint64, tile bool) (runtime.MapTensors, error) {
	g := newGen(d, seed)
	g.noTile = !tile
	lp, head := d.prefix()
	H := d.Hidden
	if err := g.bigLinear(lp+"embed_tokens", 0, d.Vocab, H, 1); err != nil {
		return nil, err
	}
	norm := func(n int) []float32 { // stored 1+w
		v := g.uniform(n, 0.2)
		for i := range v {
			v[i] += 1
		}
		return v
	}
	Kd, Vd, Nv := d.LinKeyHeads*d.LinKeyDim, d.LinValueHeads*d.LinValueDim, d.LinValueHeads
	C := 2*Kd + Vd
	for l := 0; l < d.Layers; l++ {
		p := fmt.Sprintf("%slayers.%d.", lp, l)
		g.vector(p+"input_layernorm.weight", norm(H), int64(H))
		g.vector(p+"post_attention_layernorm.weight", norm(H), int64(H))
		if (l+1)%d.FullEvery == 0 {
			a := p + "self_attn."
			qRows := 2 * d.Heads * d.HeadDim
			for _, t := range []struct {
				n          string
				rows, cols int
			}{{"q_proj", qRows, H}, {"k_proj", d.KVHeads * d.HeadDim, H}, {"v_proj", d.KVHeads * d.HeadDim, H},
				{"o_proj", H, d.Heads * d.HeadDim}} {
				if err := g.linear(a+t.n, g.linearValues(t.rows, t.cols, 1), 0, t.rows, t.cols); err != nil {
					return nil, err
				}
			}
			g.vector(a+"q_norm.weight", norm(d.HeadDim), int64(d.HeadDim))
			g.vector(a+"k_norm.weight", norm(d.HeadDim), int64(d.HeadDim))
		} else {
			a := p + "linear_attn."
			qkv := g.linearValues(C, H, 1)
			z := g.linearValues(Vd, H, 1)
			b := g.linearValues(Nv, H, 1)
			av := g.linearValues(Nv, H, 1)
			if d.ModelType == runtime.TypeQwen3Next {
				qkvz, ba := interleave(d, qkv, z, b, av)
				if err := g.linear(a+"in_proj_qkvz", qkvz, 0, C+Vd, H); err != nil {
					return nil, err
				}
				if err := g.linear(a+"in_proj_ba", ba, 0, 2*Nv, H); err != nil {
					return nil, err
				}
			} else {
				for _, t := range []struct {
					n    string
					v    []float32
					rows int
				}{{"in_proj_qkv", qkv, C}, {"in_proj_z", z, Vd}, {"in_proj_b", b, Nv}, {"in_proj_a", av, Nv}} {
					if err := g.linear(a+t.n, t.v, 0, t.rows, H); err != nil {
						return nil, err
					}
				}
			}
			g.vector(a+"conv1d.weight", g.uniform(C*d.ConvKernel, 0.6), int64(C), int64(d.ConvKernel), 1)
			alog := make([]float32, Nv)
			for i := range alog {
				alog[i] = float32(math.Log(1 + 15*g.rng.Float64()))
				if d.Bits > 0 { // representable in BF16, so both model types hold the same value
					alog[i] = mlxq.BF16ToF32(mlxq.F32ToBF16(alog[i]))
				}
			}
			g.vector(a+"A_log", alog, int64(Nv))
			g.vector(a+"dt_bias", g.uniform(Nv, 1), int64(Nv))
			g.vector(a+"norm.weight", norm(d.LinValueDim), int64(d.LinValueDim))
			if err := g.linear(a+"out_proj", g.linearValues(H, Vd, 1), 0, H, Vd); err != nil {
				return nil, err
			}
		}
		m := p + "mlp."
		if slices.Contains(d.DenseLayers, l) {
			I := 2 * d.MoEInter
			for _, t := range []struct {
				n          string
				rows, cols int
			}{{"gate_proj", I, H}, {"up_proj", I, H}, {"down_proj", H, I}} {
				if err := g.linear(m+t.n, g.linearValues(t.rows, t.cols, 1), 0, t.rows, t.cols); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err := g.linear(m+"gate", g.linearValues(d.Experts, H, 2), 0, d.Experts, H); err != nil {
			return nil, err
		}
		E, I := d.Experts, d.MoEInter
		for _, t := range []struct {
			n          string
			rows, cols int
		}{{"gate_proj", I, H}, {"up_proj", I, H}, {"down_proj", H, I}} {
			if err := g.bigLinear(m+"switch_mlp."+t.n, E, t.rows, t.cols, math.Sqrt(3/float64(t.cols))); err != nil {
				return nil, err
			}
		}
		if d.SharedInter > 0 {
			S := d.SharedInter
			for _, t := range []struct {
				n          string
				rows, cols int
			}{{"gate_proj", S, H}, {"up_proj", S, H}, {"down_proj", H, S}} {
				if err := g.linear(m+"shared_expert."+t.n, g.linearValues(t.rows, t.cols, 1), 0, t.rows, t.cols); err != nil {
					return nil, err
				}
			}
			if err := g.linear(m+"shared_expert_gate", g.linearValues(1, H, 1), 0, 1, H); err != nil {
				return nil, err
			}
		}
	}
	g.vector(lp+"norm.weight", norm(H), int64(H))
	if !d.Tied {
		if err := g.bigLinear(head, 0, d.Vocab, H, math.Sqrt(3/float64(H))); err != nil {
			return nil, err
		}
	}
	return g.tensors, nil
}

// interleave builds the qwen3_next fused projections from the separate ones:
// for each key head g, in_proj_qkvz rows are q_g, k_g, then the v rows and
// the z rows of the value heads g·r .. g·r+r-1 (r = Nv/Nk); in_proj_ba rows
// are their b rows then their a rows.
func interleave(d Dims, qkv, z, b, a []float32) (qkvz, ba []float32) {
	H := d.Hidden
	Nk, dk, dv := d.LinKeyHeads, d.LinKeyDim, d.LinValueDim
	r := d.LinValueHeads / Nk
	Kd := Nk * dk
	rowsOf := func(src []float32, from, n int) []float32 { return src[from*H : (from+n)*H] }
	for g := range Nk {
		qkvz = append(qkvz, rowsOf(qkv, g*dk, dk)...)          // q_g
		qkvz = append(qkvz, rowsOf(qkv, Kd+g*dk, dk)...)       // k_g
		qkvz = append(qkvz, rowsOf(qkv, 2*Kd+g*r*dv, r*dv)...) // v of its value heads
		qkvz = append(qkvz, rowsOf(z, g*r*dv, r*dv)...)        // z of its value heads
		ba = append(ba, rowsOf(b, g*r, r)...)
		ba = append(ba, rowsOf(a, g*r, r)...)
	}
	return qkvz, ba
}

// Experts is an in-memory ExpertSource whose matrices view the stacked
// switch_mlp tensors (nothing is copied; Release is a no-op).
type Experts struct {
	w [][]*runtime.ExpertWeights
}

func newExperts(cfg *runtime.Config, t runtime.MapTensors) (*Experts, error) {
	ex := &Experts{w: make([][]*runtime.ExpertWeights, cfg.Layers)}
	E := cfg.Experts
	dims := [3][2]int{{cfg.MoEIntermediate, cfg.Hidden}, {cfg.MoEIntermediate, cfg.Hidden}, {cfg.Hidden, cfg.MoEIntermediate}}
	for l := range cfg.Layers {
		if !cfg.Sparse[l] {
			continue
		}
		ex.w[l] = make([]*runtime.ExpertWeights, E)
		for e := range E {
			w := &runtime.ExpertWeights{Layer: l, Expert: e}
			for pi, proj := range []string{"gate_proj", "up_proj", "down_proj"} {
				mod := fmt.Sprintf("%slayers.%d.mlp.switch_mlp.%s", cfg.Prefix, l, proj)
				slab := func(name string) []byte {
					d := t[mod+"."+name].Data
					per := len(d) / E
					return d[e*per : (e+1)*per]
				}
				rows, cols := dims[pi][0], dims[pi][1]
				var m mlxq.Matrix
				var err error
				if sc, ok := t[mod+".scales"]; ok {
					wt := t[mod+".weight"]
					bits := int(wt.Shape[2]) * 32 / cols
					group := cols / int(sc.Shape[2])
					m, err = mlxq.NewQuantized(rows, cols, bits, group, mlxq.BF16, slab("weight"), slab("scales"), slab("biases"))
				} else {
					m, err = mlxq.NewDense(rows, cols, mlxq.F32, slab("weight"))
				}
				if err != nil {
					return nil, fmt.Errorf("%s expert %d: %w", mod, e, err)
				}
				*[]*mlxq.Matrix{&w.Gate, &w.Up, &w.Down}[pi] = m
			}
			ex.w[l][e] = w
		}
	}
	return ex, nil
}

// Expert implements runtime.ExpertSource.
func (x *Experts) Expert(l, e int) (*runtime.ExpertWeights, error) {
	if l < 0 || l >= len(x.w) || e < 0 || e >= len(x.w[l]) {
		return nil, fmt.Errorf("synthetic: no expert %d in layer %d", e, l)
	}
	return x.w[l][e], nil
}

// Release implements runtime.ExpertSource.
func (x *Experts) Release(*runtime.ExpertWeights) {}
