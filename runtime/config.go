package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Model types this runner understands (text only).
const (
	TypeQwen3Next  = "qwen3_next"
	TypeQwen35MoE  = "qwen3_5_moe"
	maxConfigBytes = 16 << 20
)

// Upper bounds on config dimensions: far above any real model, low enough that
// a hostile config cannot make the runner allocate absurd amounts of memory
// before a tensor shape check refuses it.
const (
	maxDim    = 1 << 20 // hidden size, intermediate sizes, vocab is separate
	maxVocab  = 1 << 22
	maxLayers = 1024
	maxHeads  = 4096
	maxExpert = 1 << 16
	// maxPositions bounds max_position_embeddings (real models: 262144).
	maxPositions = 1 << 30
)

// Config is the text-model configuration of a qwen3_next or qwen3_5_moe
// checkpoint, with every field the forward pass needs resolved and checked.
type Config struct {
	ModelType string // TypeQwen3Next or TypeQwen35MoE

	Hidden     int
	Layers     int
	Vocab      int
	RMSNormEps float64

	// Gated full attention.
	Heads, KVHeads, HeadDim int
	RotaryDim               int     // head_dim * partial_rotary_factor, even
	RopeTheta               float64 // base of the rotary frequencies
	AttnOutputGate          bool    // q_proj also yields a per-head sigmoid gate

	// Gated DeltaNet.
	ConvKernel                   int
	LinKeyHeads, LinValueHeads   int
	LinKeyHeadDim, LinValHeadDim int

	// Mixture of experts.
	Experts, TopK      int
	MoEIntermediate    int
	SharedIntermediate int
	NormTopK           bool
	Intermediate       int // dense MLP size, for layers without experts

	TieWordEmbeddings bool

	// MaxPositions is max_position_embeddings, the longest sequence the
	// model was made for (0: the config does not say; no limit).
	MaxPositions int

	// FullAttention[L] is true for a gated full-attention layer, false for a
	// Gated DeltaNet layer. Sparse[L] is true where the MLP is the MoE block.
	FullAttention []bool
	Sparse        []bool

	// Tensor name prefixes: "model." and "lm_head." for qwen3_next,
	// "language_model.model." and "language_model.lm_head." for qwen3_5_moe.
	Prefix     string
	HeadPrefix string

	Quant Quantization
}

// QuantParams are the affine quantization parameters of one module.
type QuantParams struct {
	Bits, GroupSize int
}

// Quantization is the config's "quantization" (or "quantization_config")
// object: a global setting and per-module overrides keyed by module path.
type Quantization struct {
	Present   bool
	Global    QuantParams
	Overrides map[string]QuantParams
	// Disabled lists modules whose override is false (kept in float).
	Disabled map[string]bool
}

// For returns the quantization parameters of the module at path (for
// example "model.layers.0.mlp.gate"): the per-module override if one exists,
// else the global setting.
func (q *Quantization) For(module string) (QuantParams, bool) {
	if q.Disabled[module] {
		return QuantParams{}, false
	}
	if p, ok := q.Overrides[module]; ok {
		return p, true
	}
	return q.Global, q.Present
}

// LinearKeyDim is Nk·dk, LinearValueDim Nv·dv, ConvDim 2·Nk·dk + Nv·dv.
func (c *Config) LinearKeyDim() int   { return c.LinKeyHeads * c.LinKeyHeadDim }
func (c *Config) LinearValueDim() int { return c.LinValueHeads * c.LinValHeadDim }
func (c *Config) ConvDim() int        { return 2*c.LinearKeyDim() + c.LinearValueDim() }

// rawConfig mirrors the JSON fields we read; pointers tell absent from zero.
type rawConfig struct {
	ModelType                    string          `json:"model_type"`
	HiddenSize                   *int            `json:"hidden_size"`
	NumHiddenLayers              *int            `json:"num_hidden_layers"`
	VocabSize                    *int            `json:"vocab_size"`
	RMSNormEps                   *float64        `json:"rms_norm_eps"`
	NumAttentionHeads            *int            `json:"num_attention_heads"`
	NumKeyValueHeads             *int            `json:"num_key_value_heads"`
	HeadDim                      *int            `json:"head_dim"`
	PartialRotaryFactor          *float64        `json:"partial_rotary_factor"`
	RopeTheta                    *float64        `json:"rope_theta"`
	RopeParameters               *ropeParameters `json:"rope_parameters"`
	RopeScaling                  *ropeParameters `json:"rope_scaling"`
	AttnOutputGate               *bool           `json:"attn_output_gate"`
	AttentionBias                *bool           `json:"attention_bias"`
	HiddenAct                    *string         `json:"hidden_act"`
	LinearConvKernelDim          *int            `json:"linear_conv_kernel_dim"`
	LinearKeyHeadDim             *int            `json:"linear_key_head_dim"`
	LinearValueHeadDim           *int            `json:"linear_value_head_dim"`
	LinearNumKeyHeads            *int            `json:"linear_num_key_heads"`
	LinearNumValueHeads          *int            `json:"linear_num_value_heads"`
	NumExperts                   *int            `json:"num_experts"`
	NumExpertsPerTok             *int            `json:"num_experts_per_tok"`
	MoEIntermediateSize          *int            `json:"moe_intermediate_size"`
	SharedExpertIntermediateSize *int            `json:"shared_expert_intermediate_size"`
	IntermediateSize             *int            `json:"intermediate_size"`
	DecoderSparseStep            *int            `json:"decoder_sparse_step"`
	MLPOnlyLayers                []int           `json:"mlp_only_layers"`
	NormTopKProb                 *bool           `json:"norm_topk_prob"`
	FullAttentionInterval        *int            `json:"full_attention_interval"`
	LayerTypes                   []string        `json:"layer_types"`
	TieWordEmbeddings            *bool           `json:"tie_word_embeddings"`
	MaxPositionEmbeddings        *int            `json:"max_position_embeddings"`
	TextConfig                   *rawConfig      `json:"text_config"`
	Quantization                 json.RawMessage `json:"quantization"`
	QuantizationConfig           json.RawMessage `json:"quantization_config"`
}

type ropeParameters struct {
	RopeType            string   `json:"rope_type"`
	Type                string   `json:"type"`
	RopeTheta           *float64 `json:"rope_theta"`
	PartialRotaryFactor *float64 `json:"partial_rotary_factor"`
	MRopeSection        []int    `json:"mrope_section"`
}

// LoadConfig reads and validates dir/config.json.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxConfigBytes {
		return nil, fmt.Errorf("%s: %d bytes, larger than the %d-byte limit for a config", path, st.Size(), maxConfigBytes)
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a config.json document of a qwen3_next or qwen3_5_moe
// model (for qwen3_5_moe the text model's fields live in "text_config").
func ParseConfig(data []byte) (*Config, error) {
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("config: %d bytes, larger than the %d-byte limit", len(data), maxConfigBytes)
	}
	var top rawConfig
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c := &Config{ModelType: top.ModelType}
	text := &top
	switch top.ModelType {
	case TypeQwen3Next:
		c.Prefix, c.HeadPrefix = "model.", "lm_head."
	case TypeQwen35MoE:
		if top.TextConfig == nil {
			return nil, errors.New(`config: model_type qwen3_5_moe without "text_config"`)
		}
		text = top.TextConfig
		if text.ModelType != "" && text.ModelType != "qwen3_5_moe_text" {
			return nil, fmt.Errorf("config: text_config.model_type %q, want qwen3_5_moe_text", text.ModelType)
		}
		c.Prefix, c.HeadPrefix = "language_model.model.", "language_model.lm_head."
	case "":
		return nil, errors.New("config: no model_type")
	default:
		return nil, fmt.Errorf("config: model_type %q is not supported (want %s or %s)", top.ModelType, TypeQwen3Next, TypeQwen35MoE)
	}

	var errs []string
	need := func(name string, p *int, lo, hi int) int {
		if p == nil {
			errs = append(errs, name+" missing")
			return 0
		}
		if *p < lo || *p > hi {
			errs = append(errs, fmt.Sprintf("%s = %d out of range [%d, %d]", name, *p, lo, hi))
			return 0
		}
		return *p
	}
	opt := func(name string, p *int, def, lo, hi int) int {
		if p == nil {
			return def
		}
		return need(name, p, lo, hi)
	}
	c.Hidden = need("hidden_size", text.HiddenSize, 1, maxDim)
	c.Layers = need("num_hidden_layers", text.NumHiddenLayers, 1, maxLayers)
	c.Vocab = need("vocab_size", text.VocabSize, 1, maxVocab)
	c.Heads = need("num_attention_heads", text.NumAttentionHeads, 1, maxHeads)
	c.KVHeads = need("num_key_value_heads", text.NumKeyValueHeads, 1, maxHeads)
	c.HeadDim = need("head_dim", text.HeadDim, 2, maxDim)
	c.ConvKernel = need("linear_conv_kernel_dim", text.LinearConvKernelDim, 1, 64)
	c.LinKeyHeadDim = need("linear_key_head_dim", text.LinearKeyHeadDim, 1, maxDim)
	c.LinValHeadDim = need("linear_value_head_dim", text.LinearValueHeadDim, 1, maxDim)
	c.LinKeyHeads = need("linear_num_key_heads", text.LinearNumKeyHeads, 1, maxHeads)
	c.LinValueHeads = need("linear_num_value_heads", text.LinearNumValueHeads, 1, maxHeads)
	c.Experts = need("num_experts", text.NumExperts, 1, maxExpert)
	c.TopK = need("num_experts_per_tok", text.NumExpertsPerTok, 1, maxExpert)
	c.MoEIntermediate = need("moe_intermediate_size", text.MoEIntermediateSize, 1, maxDim)
	c.SharedIntermediate = opt("shared_expert_intermediate_size", text.SharedExpertIntermediateSize, 0, 0, maxDim)
	c.Intermediate = opt("intermediate_size", text.IntermediateSize, 0, 0, maxDim)
	sparseStep := opt("decoder_sparse_step", text.DecoderSparseStep, 1, 1, maxLayers)
	c.MaxPositions = opt("max_position_embeddings", text.MaxPositionEmbeddings, 0, 1, maxPositions)

	c.RMSNormEps = 1e-6
	if text.RMSNormEps != nil {
		c.RMSNormEps = *text.RMSNormEps
		if !(c.RMSNormEps > 0 && c.RMSNormEps < 1) {
			errs = append(errs, fmt.Sprintf("rms_norm_eps = %g out of range (0, 1)", c.RMSNormEps))
		}
	}
	if text.HiddenAct != nil && *text.HiddenAct != "silu" {
		errs = append(errs, fmt.Sprintf("hidden_act %q not supported (want silu)", *text.HiddenAct))
	}
	if text.AttentionBias != nil && *text.AttentionBias {
		errs = append(errs, "attention_bias true not supported")
	}

	// RoPE: transformers v5 writes rope_parameters; older files rope_theta at
	// the top level. MRoPE with equal t/h/w positions (text) is plain RoPE.
	theta, factor := 10000.0, 0.25
	if text.RopeTheta != nil {
		theta = *text.RopeTheta
	}
	if text.PartialRotaryFactor != nil {
		factor = *text.PartialRotaryFactor
	}
	for _, rp := range []*ropeParameters{text.RopeScaling, text.RopeParameters} {
		if rp == nil {
			continue
		}
		kind := rp.RopeType
		if kind == "" {
			kind = rp.Type
		}
		if kind != "" && kind != "default" {
			errs = append(errs, fmt.Sprintf("rope type %q not supported (want default)", kind))
		}
		if rp.RopeTheta != nil {
			theta = *rp.RopeTheta
		}
		if rp.PartialRotaryFactor != nil {
			factor = *rp.PartialRotaryFactor
		}
	}
	if !(theta > 1 && theta < 1e30) {
		errs = append(errs, fmt.Sprintf("rope_theta = %g out of range", theta))
	}
	if !(factor > 0 && factor <= 1) {
		errs = append(errs, fmt.Sprintf("partial_rotary_factor = %g out of range (0, 1]", factor))
	}
	c.RopeTheta = theta
	if len(errs) == 0 {
		rd := float64(c.HeadDim) * factor
		c.RotaryDim = int(math.Round(rd))
		if math.Abs(rd-float64(c.RotaryDim)) > 1e-9 || c.RotaryDim%2 != 0 || c.RotaryDim < 2 {
			errs = append(errs, fmt.Sprintf("rotary dims head_dim*partial_rotary_factor = %g is not a positive even integer", rd))
		}
	}

	c.AttnOutputGate = true
	if text.AttnOutputGate != nil {
		c.AttnOutputGate = *text.AttnOutputGate
	}
	c.NormTopK = true
	if top.ModelType == TypeQwen3Next && text.NormTopKProb != nil {
		c.NormTopK = *text.NormTopKProb
	} // qwen3_5_moe always renormalises the top-k weights

	switch {
	case text.TieWordEmbeddings != nil:
		c.TieWordEmbeddings = *text.TieWordEmbeddings
	case top.TieWordEmbeddings != nil:
		c.TieWordEmbeddings = *top.TieWordEmbeddings
	}

	if len(errs) == 0 {
		if c.Heads%c.KVHeads != 0 {
			errs = append(errs, fmt.Sprintf("num_attention_heads %d not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads))
		}
		if c.LinValueHeads%c.LinKeyHeads != 0 {
			errs = append(errs, fmt.Sprintf("linear_num_value_heads %d not a multiple of linear_num_key_heads %d", c.LinValueHeads, c.LinKeyHeads))
		}
		if c.TopK > c.Experts {
			errs = append(errs, fmt.Sprintf("num_experts_per_tok %d > num_experts %d", c.TopK, c.Experts))
		}
		if int64(c.Heads)*int64(c.HeadDim) > maxDim || int64(c.LinValueHeads)*int64(c.LinValHeadDim) > maxDim ||
			int64(c.LinKeyHeads)*int64(c.LinKeyHeadDim) > maxDim {
			errs = append(errs, "attention dimensions too large")
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("config: %s", strings.Join(errs, "; "))
	}

	// Layer types.
	c.FullAttention = make([]bool, c.Layers)
	if len(text.LayerTypes) > 0 {
		if len(text.LayerTypes) != c.Layers {
			return nil, fmt.Errorf("config: layer_types has %d entries for %d layers", len(text.LayerTypes), c.Layers)
		}
		for i, t := range text.LayerTypes {
			switch t {
			case "full_attention":
				c.FullAttention[i] = true
			case "linear_attention":
			default:
				return nil, fmt.Errorf("config: layer_types[%d] = %q (want full_attention or linear_attention)", i, t)
			}
		}
	} else {
		interval := opt("full_attention_interval", text.FullAttentionInterval, 4, 1, maxLayers)
		if len(errs) > 0 {
			return nil, fmt.Errorf("config: %s", strings.Join(errs, "; "))
		}
		for i := range c.FullAttention {
			c.FullAttention[i] = (i+1)%interval == 0
		}
	}

	// MLP placement.
	c.Sparse = make([]bool, c.Layers)
	only := map[int]bool{}
	for _, l := range text.MLPOnlyLayers {
		if l < 0 || l >= c.Layers {
			return nil, fmt.Errorf("config: mlp_only_layers entry %d out of range [0, %d)", l, c.Layers)
		}
		only[l] = true
	}
	for i := range c.Sparse {
		if top.ModelType == TypeQwen35MoE {
			c.Sparse[i] = true
		} else {
			c.Sparse[i] = !only[i] && (i+1)%sparseStep == 0
		}
		if !c.Sparse[i] && c.Intermediate == 0 {
			return nil, fmt.Errorf("config: layer %d has a dense MLP but intermediate_size is missing", i)
		}
	}

	// Quantization: prefer "quantization" (mlx-lm writes both, identical).
	qraw := top.Quantization
	if len(qraw) == 0 || string(qraw) == "null" {
		qraw = top.QuantizationConfig
	}
	q, err := parseQuantization(qraw)
	if err != nil {
		return nil, err
	}
	c.Quant = q
	return c, nil
}

var validBits = map[int]bool{2: true, 3: true, 4: true, 5: true, 6: true, 8: true}
var validGroups = map[int]bool{32: true, 64: true, 128: true}

func parseQuantParams(where string, obj map[string]json.RawMessage, def QuantParams) (QuantParams, error) {
	p := def
	if raw, ok := obj["mode"]; ok {
		var mode string
		if err := json.Unmarshal(raw, &mode); err != nil {
			return p, fmt.Errorf("config: %s.mode: %w", where, err)
		}
		if mode != "affine" {
			return p, fmt.Errorf("config: %s: quantization mode %q is not supported (only affine)", where, mode)
		}
	}
	for key, dst := range map[string]*int{"bits": &p.Bits, "group_size": &p.GroupSize} {
		raw, ok := obj[key]
		if !ok {
			continue
		}
		var v int
		if err := json.Unmarshal(raw, &v); err != nil {
			return p, fmt.Errorf("config: %s.%s: %w", where, key, err)
		}
		*dst = v
	}
	if !validBits[p.Bits] {
		return p, fmt.Errorf("config: %s: bits %d not supported (want 2, 3, 4, 5, 6 or 8)", where, p.Bits)
	}
	if !validGroups[p.GroupSize] {
		return p, fmt.Errorf("config: %s: group_size %d not supported (want 32, 64 or 128)", where, p.GroupSize)
	}
	return p, nil
}

func parseQuantization(raw json.RawMessage) (Quantization, error) {
	q := Quantization{Overrides: map[string]QuantParams{}, Disabled: map[string]bool{}}
	if len(raw) == 0 || string(raw) == "null" {
		return q, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return q, fmt.Errorf("config: quantization: %w", err)
	}
	if _, ok := obj["quant_method"]; ok {
		var m string
		_ = json.Unmarshal(obj["quant_method"], &m)
		return q, fmt.Errorf("config: quantization method %q is not supported (only MLX affine)", m)
	}
	global := map[string]json.RawMessage{}
	for k, v := range obj {
		if k == "bits" || k == "group_size" || k == "mode" {
			global[k] = v
		}
	}
	// The global defaults of mlx-lm are 4 bits, group 64, affine.
	g, err := parseQuantParams("quantization", global, QuantParams{Bits: 4, GroupSize: 64})
	if err != nil {
		return q, err
	}
	q.Present, q.Global = true, g
	for k, v := range obj {
		if _, ok := global[k]; ok {
			continue
		}
		trim := strings.TrimSpace(string(v))
		switch {
		case trim == "false":
			q.Disabled[k] = true
		case strings.HasPrefix(trim, "{"):
			var o map[string]json.RawMessage
			if err := json.Unmarshal(v, &o); err != nil {
				return q, fmt.Errorf("config: quantization[%s]: %w", strconv.Quote(k), err)
			}
			// A per-module dict without "mode" is affine (mlx-lm passes it
			// straight to to_quantized), whatever the global mode is.
			// Missing fields take MLX's affine defaults (4 bits, group 64).
			p, err := parseQuantParams("quantization["+strconv.Quote(k)+"]", o, QuantParams{Bits: 4, GroupSize: 64})
			if err != nil {
				return q, err
			}
			q.Overrides[k] = p
		default:
			// Other scalar keys (e.g. "quant_method" variants) are ignored.
		}
	}
	return q, nil
}
