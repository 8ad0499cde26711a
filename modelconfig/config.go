package modelconfig

// Architecture names (the registry's keys; Config.ModelType holds one).
const (
	TypeQwen3Next = "qwen3_next"
	TypeQwen35MoE = "qwen3_5_moe"
)

// Limits on what a config may declare: far above any real model, low
// enough that a hostile config cannot make a reader allocate absurd
// amounts of memory before a tensor shape check refuses it. Errors name
// the limit that was exceeded.
const (
	MaxBytes     = 16 << 20 // config.json itself
	MaxDim       = 1 << 20  // hidden size, intermediate sizes, heads x head_dim
	MaxVocab     = 1 << 22
	MaxLayers    = 1024
	MaxHeads     = 4096
	MaxExperts   = 1 << 16
	MaxPositions = 1 << 30 // max_position_embeddings (real models: 262144)
	MaxConvWidth = 64      // linear_conv_kernel_dim
)

// Config is the validated description of a model's text decoder: every
// dimension the forward pass needs, resolved (aliases, defaults, nested or
// flat layout) and checked. It is the same value for the runner, the
// repacker and the verifier.
//
// The fields from Hidden to Quant are common to every architecture; the
// Gated DeltaNet group is zero for architectures without it, and an
// architecture that needs more keeps its own description in Extra.
type Config struct {
	ModelType string // the architecture: TypeQwen3Next or TypeQwen35MoE

	// Declared is the top-level model_type as written, TextDeclared
	// text_config's ("" when the config is flat or it has none). Nested
	// is true when the text model's fields are under text_config.
	Declared, TextDeclared string
	Nested                 bool

	Hidden     int
	Layers     int
	Vocab      int
	RMSNormEps float64

	// Full attention.
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
	SharedIntermediate int // 0: no shared expert
	NormTopK           bool
	Intermediate       int // dense MLP size, for layers without experts

	TieWordEmbeddings bool

	// MaxPositions is max_position_embeddings, the longest sequence the
	// model was made for (0: the config does not say; no limit).
	MaxPositions int

	// FullAttention[L] is true for a full-attention layer, false for a
	// linear-attention (Gated DeltaNet) layer. Sparse[L] is true where the
	// MLP is the MoE block.
	FullAttention []bool
	Sparse        []bool

	// Tensor name prefixes of the text model ("model." and "lm_head." for
	// qwen3_next, "language_model.model." and "language_model.lm_head." for
	// qwen3_5_moe).
	Prefix     string
	HeadPrefix string

	Quant Quantization

	// Extra is an architecture's own description beyond the fields above
	// (nil for the Qwen architectures).
	Extra any
}

// LinearKeyDim is Nk·dk, LinearValueDim Nv·dv, ConvDim 2·Nk·dk + Nv·dv.
func (c *Config) LinearKeyDim() int   { return c.LinKeyHeads * c.LinKeyHeadDim }
func (c *Config) LinearValueDim() int { return c.LinValueHeads * c.LinValHeadDim }
func (c *Config) ConvDim() int        { return 2*c.LinearKeyDim() + c.LinearValueDim() }
