package tinymodel

import (
	"errors"
	"fmt"
)

// Architectures Generate knows.
const (
	ArchQwen3Next = "qwen3_next"
	ArchQwen35MoE = "qwen3_5_moe"
)

// Spec says which tiny checkpoint Generate writes.
type Spec struct {
	Arch      string // ArchQwen3Next or ArchQwen35MoE
	Bits      int    // 0 = float32 checkpoint; else 2,3,4,5,6,8 (MLX affine)
	GroupSize int    // 0 with Bits 0; else 32, 64 or 128
	Shards    int    // number of safetensors files; 0 or 1 = a single model.safetensors
	Seed      uint64 // weights depend only on Arch, Seed, Dims and the tensor name
	Dims      *Dims  // nil = DefaultDims()
}

// Dims are the model dimensions. Field names follow the HF config keys.
type Dims struct {
	HiddenSize             int
	NumHiddenLayers        int
	FullAttentionInterval  int // layer L is full attention iff (L+1) % interval == 0
	NumAttentionHeads      int
	NumKeyValueHeads       int
	HeadDim                int
	PartialRotaryFactor    float64
	RopeTheta              float64
	RMSNormEps             float64
	LinearConvKernelDim    int
	LinearKeyHeadDim       int
	LinearValueHeadDim     int
	LinearNumKeyHeads      int
	LinearNumValueHeads    int
	NumExperts             int
	NumExpertsPerTok       int
	MoeIntermediateSize    int
	SharedIntermediateSize int
	VocabSize              int
	IntermediateSize       int // dense MLP size; unused (every layer is MoE)
	MaxPositionEmbeddings  int
}

// DefaultDims returns the dims agreed in notes/TINY.md.
func DefaultDims() Dims {
	return Dims{
		HiddenSize:             64,
		NumHiddenLayers:        8,
		FullAttentionInterval:  4,
		NumAttentionHeads:      4,
		NumKeyValueHeads:       2,
		HeadDim:                16,
		PartialRotaryFactor:    0.25,
		RopeTheta:              10000000,
		RMSNormEps:             1e-6,
		LinearConvKernelDim:    4,
		LinearKeyHeadDim:       16,
		LinearValueHeadDim:     16,
		LinearNumKeyHeads:      2,
		LinearNumValueHeads:    4,
		NumExperts:             8,
		NumExpertsPerTok:       2,
		MoeIntermediateSize:    64,
		SharedIntermediateSize: 64,
		VocabSize:              384,
		IntermediateSize:       128,
		MaxPositionEmbeddings:  4096,
	}
}

// NamedSpec is one committed variant: testdata/tiny/<Name>.
type NamedSpec struct {
	Name string
	Spec Spec
}

// Seeds of the committed variants. All variants of one architecture share
// the seed, so a quantized variant holds the quantized weights of the float
// variant of the same architecture.
const (
	SeedQwen3Next uint64 = 0x71776e33 // "qwn3"
	SeedQwen35MoE uint64 = 0x71333565 // "q35e"
)

// Variants lists the committed variants of notes/TINY.md, in that order.
func Variants() []NamedSpec {
	return []NamedSpec{
		{"qwen3_next-f32", Spec{Arch: ArchQwen3Next, Shards: 1, Seed: SeedQwen3Next}},
		{"qwen3_next-q4g64", Spec{Arch: ArchQwen3Next, Bits: 4, GroupSize: 64, Shards: 2, Seed: SeedQwen3Next}},
		{"qwen3_next-q8g32", Spec{Arch: ArchQwen3Next, Bits: 8, GroupSize: 32, Shards: 1, Seed: SeedQwen3Next}},
		{"qwen3_5_moe-f32", Spec{Arch: ArchQwen35MoE, Shards: 1, Seed: SeedQwen35MoE}},
		{"qwen3_5_moe-q4g32", Spec{Arch: ArchQwen35MoE, Bits: 4, GroupSize: 32, Shards: 3, Seed: SeedQwen35MoE}},
		{"qwen3_5_moe-q8g64", Spec{Arch: ArchQwen35MoE, Bits: 8, GroupSize: 64, Shards: 1, Seed: SeedQwen35MoE}},
	}
}

// dims returns the effective dims of s.
func (s Spec) dims() Dims {
	if s.Dims != nil {
		return *s.Dims
	}
	return DefaultDims()
}

// maxDim bounds every dimension so a mistaken Spec cannot ask for a huge
// allocation; tiny models are far below it.
const maxDim = 1 << 16

func (s Spec) validate() error {
	switch s.Arch {
	case ArchQwen3Next, ArchQwen35MoE:
	default:
		return fmt.Errorf("tinymodel: unknown arch %q (want %q or %q)", s.Arch, ArchQwen3Next, ArchQwen35MoE)
	}
	if s.Bits == 0 {
		if s.GroupSize != 0 {
			return fmt.Errorf("tinymodel: group size %d given for a float checkpoint (bits 0)", s.GroupSize)
		}
	} else {
		switch s.Bits {
		case 2, 3, 4, 5, 6, 8:
		default:
			return fmt.Errorf("tinymodel: bits %d not supported (want 2, 3, 4, 5, 6 or 8)", s.Bits)
		}
		switch s.GroupSize {
		case 32, 64, 128:
		default:
			return fmt.Errorf("tinymodel: group size %d not supported (want 32, 64 or 128)", s.GroupSize)
		}
	}
	if s.Shards < 0 || s.Shards > 99 {
		return fmt.Errorf("tinymodel: shard count %d out of range 0..99", s.Shards)
	}
	return s.dims().validate()
}

func (d Dims) validate() error {
	pos := []struct {
		name string
		v    int
	}{
		{"hidden_size", d.HiddenSize}, {"num_hidden_layers", d.NumHiddenLayers},
		{"full_attention_interval", d.FullAttentionInterval}, {"num_attention_heads", d.NumAttentionHeads},
		{"num_key_value_heads", d.NumKeyValueHeads}, {"head_dim", d.HeadDim},
		{"linear_conv_kernel_dim", d.LinearConvKernelDim}, {"linear_key_head_dim", d.LinearKeyHeadDim},
		{"linear_value_head_dim", d.LinearValueHeadDim}, {"linear_num_key_heads", d.LinearNumKeyHeads},
		{"linear_num_value_heads", d.LinearNumValueHeads}, {"num_experts", d.NumExperts},
		{"num_experts_per_tok", d.NumExpertsPerTok}, {"moe_intermediate_size", d.MoeIntermediateSize},
		{"shared_expert_intermediate_size", d.SharedIntermediateSize}, {"vocab_size", d.VocabSize},
		{"intermediate_size", d.IntermediateSize}, {"max_position_embeddings", d.MaxPositionEmbeddings},
	}
	for _, p := range pos {
		if p.v <= 0 || p.v > maxDim {
			return fmt.Errorf("tinymodel: %s = %d out of range 1..%d", p.name, p.v, maxDim)
		}
	}
	if d.MaxPositionEmbeddings > 1<<24 {
		return errors.New("tinymodel: max_position_embeddings too large")
	}
	if d.NumAttentionHeads%d.NumKeyValueHeads != 0 {
		return fmt.Errorf("tinymodel: num_attention_heads %d not a multiple of num_key_value_heads %d", d.NumAttentionHeads, d.NumKeyValueHeads)
	}
	if d.LinearNumValueHeads%d.LinearNumKeyHeads != 0 {
		return fmt.Errorf("tinymodel: linear_num_value_heads %d not a multiple of linear_num_key_heads %d", d.LinearNumValueHeads, d.LinearNumKeyHeads)
	}
	if d.NumExpertsPerTok > d.NumExperts {
		return fmt.Errorf("tinymodel: num_experts_per_tok %d > num_experts %d", d.NumExpertsPerTok, d.NumExperts)
	}
	rot := d.rotaryDim()
	if !(d.PartialRotaryFactor > 0 && d.PartialRotaryFactor <= 1) || rot < 2 || rot%2 != 0 || float64(rot) != float64(d.HeadDim)*d.PartialRotaryFactor {
		return fmt.Errorf("tinymodel: partial_rotary_factor %v gives %v rotary dims of head_dim %d (want an even whole number >= 2)",
			d.PartialRotaryFactor, float64(d.HeadDim)*d.PartialRotaryFactor, d.HeadDim)
	}
	if !(d.RopeTheta > 1) || !(d.RMSNormEps > 0) {
		return errors.New("tinymodel: rope_theta must be > 1 and rms_norm_eps > 0")
	}
	if d.VocabSize < tokenizerSize {
		return fmt.Errorf("tinymodel: vocab_size %d smaller than the tokenizer's %d tokens", d.VocabSize, tokenizerSize)
	}
	// Parameter count bound: keeps the float model under 1 GiB.
	if n := d.paramCount(); n > 1<<28 {
		return fmt.Errorf("tinymodel: dims give %d parameters; tiny models stay under %d", n, 1<<28)
	}
	return nil
}

func (d Dims) rotaryDim() int { return int(float64(d.HeadDim) * d.PartialRotaryFactor) }

// isFull reports whether layer l is a full-attention layer.
func (d Dims) isFull(l int) bool { return (l+1)%d.FullAttentionInterval == 0 }

func (d Dims) keyDim() int   { return d.LinearNumKeyHeads * d.LinearKeyHeadDim }
func (d Dims) valueDim() int { return d.LinearNumValueHeads * d.LinearValueHeadDim }
func (d Dims) convDim() int  { return 2*d.keyDim() + d.valueDim() }

// paramCount is a rough upper bound on the parameter count (int64 to avoid
// overflow with large dims).
func (d Dims) paramCount() int64 {
	h := int64(d.HiddenSize)
	lin := h*int64(2*d.keyDim()+2*d.valueDim()+2*d.LinearNumValueHeads) + int64(d.convDim()*d.LinearConvKernelDim) + int64(d.valueDim())*h
	att := h*int64(2*d.NumAttentionHeads*d.HeadDim+2*d.NumKeyValueHeads*d.HeadDim) + int64(d.NumAttentionHeads*d.HeadDim)*h
	moe := int64(d.NumExperts)*3*h*int64(d.MoeIntermediateSize) + 3*h*int64(d.SharedIntermediateSize) + h*int64(d.NumExperts+1)
	layer := max(lin, att) + moe + 4*h
	return int64(d.NumHiddenLayers)*layer + 2*int64(d.VocabSize)*h
}
