package synthmlx

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/qpack-go/qpack/safetensors"
)

// kind is how a tensor's bytes are generated.
type kind uint8

const (
	kindRandom kind = iota // seeded pseudo-random words (packed quantized weights)
	kindConst              // one element value repeated
)

// tensorSpec is one tensor of the checkpoint and how its bytes are made.
type tensorSpec struct {
	safetensors.Spec
	kind  kind
	value [4]byte // the repeated element (kindConst), little-endian
	width int     // bytes of value used
}

// Bounds on the layout's size (the layout is held in memory: a few hundred
// bytes per tensor).
const (
	maxLayers  = 1024
	maxExperts = 1 << 14
)

// dims are the text-model fields of config.json that shape the tensors.
type dims struct {
	modelType                          string
	hidden, layers, vocab              int
	heads, kvHeads, headDim            int
	linKeyHeads, linValueHeads         int
	linKeyDim, linValueDim, convKernel int
	experts, moeInter, sharedInter     int
	fullEvery                          int
	layerTypes                         []string
	denseLayers                        []int
	tied                               bool
	bits, group                        int
	overrides                          map[string][2]int // module → bits, group
}

// parseDims reads the fields parseDims needs from an MLX config.json
// (qwen3_5_moe with text_config, or flat qwen3_next).
func parseDims(configJSON []byte) (*dims, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(configJSON, &top); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	text := top
	if raw, ok := top["text_config"]; ok {
		text = nil // not top: Unmarshal would merge into it
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, fmt.Errorf("config.json: text_config: %w", err)
		}
	}
	d := &dims{overrides: map[string][2]int{}}
	var mt string
	if err := json.Unmarshal(top["model_type"], &mt); err != nil {
		return nil, fmt.Errorf("config.json: model_type: %w", err)
	}
	if mt != "qwen3_5_moe" && mt != "qwen3_next" {
		return nil, fmt.Errorf("config.json: model_type %q: only qwen3_5_moe and qwen3_next are generated", mt)
	}
	d.modelType = mt
	ints := []struct {
		key  string
		dst  *int
		need bool
	}{
		{"hidden_size", &d.hidden, true}, {"num_hidden_layers", &d.layers, true}, {"vocab_size", &d.vocab, true},
		{"num_attention_heads", &d.heads, true}, {"num_key_value_heads", &d.kvHeads, true}, {"head_dim", &d.headDim, true},
		{"linear_num_key_heads", &d.linKeyHeads, true}, {"linear_num_value_heads", &d.linValueHeads, true},
		{"linear_key_head_dim", &d.linKeyDim, true}, {"linear_value_head_dim", &d.linValueDim, true},
		{"linear_conv_kernel_dim", &d.convKernel, true}, {"num_experts", &d.experts, true},
		{"moe_intermediate_size", &d.moeInter, true}, {"shared_expert_intermediate_size", &d.sharedInter, false},
		{"full_attention_interval", &d.fullEvery, false},
	}
	for _, f := range ints {
		raw, ok := text[f.key]
		if !ok {
			if f.need {
				return nil, fmt.Errorf("config.json: %s missing", f.key)
			}
			continue
		}
		if err := json.Unmarshal(raw, f.dst); err != nil || *f.dst < 0 || *f.dst > 1<<20 {
			return nil, fmt.Errorf("config.json: %s: not a count up to 2^20 (%.40s)", f.key, raw)
		}
		if f.need && *f.dst == 0 {
			return nil, fmt.Errorf("config.json: %s is 0", f.key)
		}
	}
	if d.layers > maxLayers || d.experts > maxExperts {
		return nil, fmt.Errorf("config.json: %d layers of %d experts: at most %d layers of %d", d.layers, d.experts, maxLayers, maxExperts)
	}
	if raw, ok := text["layer_types"]; ok {
		if err := json.Unmarshal(raw, &d.layerTypes); err != nil || len(d.layerTypes) != d.layers {
			return nil, fmt.Errorf("config.json: layer_types: want %d strings", d.layers)
		}
	} else if d.fullEvery == 0 {
		return nil, fmt.Errorf("config.json: neither layer_types nor full_attention_interval")
	}
	if raw, ok := text["mlp_only_layers"]; ok {
		if err := json.Unmarshal(raw, &d.denseLayers); err != nil {
			return nil, fmt.Errorf("config.json: mlp_only_layers: %w", err)
		}
	}
	for _, src := range []map[string]json.RawMessage{text, top} {
		if raw, ok := src["tie_word_embeddings"]; ok {
			json.Unmarshal(raw, &d.tied)
			break
		}
	}
	var q map[string]json.RawMessage
	if raw, ok := top["quantization"]; ok {
		if err := json.Unmarshal(raw, &q); err != nil {
			return nil, fmt.Errorf("config.json: quantization: %w", err)
		}
	}
	if q == nil {
		return nil, fmt.Errorf("config.json: no quantization block (only quantized checkpoints are generated)")
	}
	type qp struct {
		Bits  int `json:"bits"`
		Group int `json:"group_size"`
	}
	var def qp
	json.Unmarshal(q["bits"], &def.Bits)
	json.Unmarshal(q["group_size"], &def.Group)
	if !validQuant(def.Bits, def.Group) {
		return nil, fmt.Errorf("config.json: quantization: bits %d group %d", def.Bits, def.Group)
	}
	d.bits, d.group = def.Bits, def.Group
	for k, raw := range q {
		if k == "bits" || k == "group_size" || k == "mode" {
			continue
		}
		var o qp
		if json.Unmarshal(raw, &o) != nil {
			continue // false / other forms: not an override
		}
		if !validQuant(o.Bits, o.Group) {
			return nil, fmt.Errorf("config.json: quantization[%q]: bits %d group %d", k, o.Bits, o.Group)
		}
		d.overrides[k] = [2]int{o.Bits, o.Group}
	}
	return d, nil
}

func validQuant(bits, group int) bool {
	return (bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8) && (group == 32 || group == 64 || group == 128)
}

func (d *dims) full(l int) bool {
	if d.layerTypes != nil {
		return d.layerTypes[l] == "full_attention"
	}
	return (l+1)%d.fullEvery == 0
}

func (d *dims) prefix() (layers, head string) {
	if d.modelType == "qwen3_5_moe" {
		return "language_model.model.", "language_model.lm_head"
	}
	return "model.", "lm_head"
}

// specs lists the checkpoint's tensors, sorted by name (as mlx-lm saves).
func (d *dims) specs() ([]tensorSpec, error) {
	var out []tensorSpec
	fl := func(name string, dt safetensors.DType, v float32, shape ...int64) {
		t := tensorSpec{Spec: safetensors.Spec{Name: name, DType: dt, Shape: shape}, kind: kindConst}
		if dt == safetensors.F32 {
			b := math.Float32bits(v)
			t.value, t.width = [4]byte{byte(b), byte(b >> 8), byte(b >> 16), byte(b >> 24)}, 4
		} else {
			b := bf16(v)
			t.value, t.width = [4]byte{byte(b), byte(b >> 8)}, 2
		}
		out = append(out, t)
	}
	// linear adds a quantized [lead..., rows, cols] weight with its scales
	// and biases, scaled for output variance gain² at unit-variance input.
	linear := func(module string, stacked, rows, cols int, gain float64) error {
		bits, group := d.bits, d.group
		if o, ok := d.overrides[module]; ok {
			bits, group = o[0], o[1]
		}
		if cols%group != 0 || cols*bits%32 != 0 {
			return fmt.Errorf("%s: %d input columns do not fit %d-bit groups of %d", module, cols, bits, group)
		}
		shape := func(c int) []int64 {
			s := []int64{int64(rows), int64(c)}
			if stacked > 0 {
				s = append([]int64{int64(stacked)}, s...)
			}
			return s
		}
		levels := float64(int(1)<<bits) - 1
		variance := levels * (levels + 2) / 12 // of q uniform in 0..levels
		s := float32(gain / math.Sqrt(variance*float64(cols)))
		s = bf16ToF32(bf16(s))
		out = append(out, tensorSpec{Spec: safetensors.Spec{Name: module + ".weight", DType: safetensors.U32, Shape: shape(cols * bits / 32)}, kind: kindRandom})
		fl(module+".scales", safetensors.BF16, s, shape(cols/group)...)
		fl(module+".biases", safetensors.BF16, -s*float32(levels)/2, shape(cols/group)...)
		return nil
	}
	lp, head := d.prefix()
	H := d.hidden
	var errs []error
	lin := func(module string, stacked, rows, cols int, gain float64) {
		if err := linear(module, stacked, rows, cols, gain); err != nil {
			errs = append(errs, err)
		}
	}
	lin(lp+"embed_tokens", 0, d.vocab, H, 1)
	Kd, Vd, Nv := d.linKeyHeads*d.linKeyDim, d.linValueHeads*d.linValueDim, d.linValueHeads
	C := 2*Kd + Vd
	for l := 0; l < d.layers; l++ {
		p := fmt.Sprintf("%slayers.%d.", lp, l)
		fl(p+"input_layernorm.weight", safetensors.BF16, 1, int64(H))
		fl(p+"post_attention_layernorm.weight", safetensors.BF16, 1, int64(H))
		if d.full(l) {
			a := p + "self_attn."
			lin(a+"q_proj", 0, 2*d.heads*d.headDim, H, 1)
			lin(a+"k_proj", 0, d.kvHeads*d.headDim, H, 1)
			lin(a+"v_proj", 0, d.kvHeads*d.headDim, H, 1)
			lin(a+"o_proj", 0, H, d.heads*d.headDim, 1)
			fl(a+"q_norm.weight", safetensors.BF16, 1, int64(d.headDim))
			fl(a+"k_norm.weight", safetensors.BF16, 1, int64(d.headDim))
		} else {
			a := p + "linear_attn."
			if d.modelType == "qwen3_next" {
				lin(a+"in_proj_qkvz", 0, C+Vd, H, 1)
				lin(a+"in_proj_ba", 0, 2*Nv, H, 1)
			} else {
				lin(a+"in_proj_qkv", 0, C, H, 1)
				lin(a+"in_proj_z", 0, Vd, H, 1)
				lin(a+"in_proj_b", 0, Nv, H, 1)
				lin(a+"in_proj_a", 0, Nv, H, 1)
			}
			fl(a+"conv1d.weight", safetensors.BF16, 0.25, int64(C), int64(d.convKernel), 1)
			alog := safetensors.BF16
			if d.modelType == "qwen3_5_moe" {
				alog = safetensors.F32 // mlx-lm keeps A_log in float32 for qwen3_5
			}
			fl(a+"A_log", alog, float32(math.Log(4)), int64(Nv))
			fl(a+"dt_bias", safetensors.BF16, 0, int64(Nv))
			fl(a+"norm.weight", safetensors.BF16, 1, int64(d.linValueDim))
			lin(a+"out_proj", 0, H, Vd, 1)
		}
		m := p + "mlp."
		if slices.Contains(d.denseLayers, l) {
			I := 2 * d.moeInter
			lin(m+"gate_proj", 0, I, H, 1)
			lin(m+"up_proj", 0, I, H, 1)
			lin(m+"down_proj", 0, H, I, 1)
			continue
		}
		lin(m+"gate", 0, d.experts, H, 2)
		E, I := d.experts, d.moeInter
		lin(m+"switch_mlp.gate_proj", E, I, H, 1)
		lin(m+"switch_mlp.up_proj", E, I, H, 1)
		lin(m+"switch_mlp.down_proj", E, H, I, 1)
		if S := d.sharedInter; S > 0 {
			lin(m+"shared_expert.gate_proj", 0, S, H, 1)
			lin(m+"shared_expert.up_proj", 0, S, H, 1)
			lin(m+"shared_expert.down_proj", 0, H, S, 1)
			lin(m+"shared_expert_gate", 0, 1, H, 1)
		}
	}
	fl(lp+"norm.weight", safetensors.BF16, 1, int64(H))
	if !d.tied {
		lin(head, 0, d.vocab, H, 1)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("config.json: %w", errs[0])
	}
	slices.SortFunc(out, func(a, b tensorSpec) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}

// bf16 rounds v to bfloat16 (round to nearest even; v is finite).
func bf16(v float32) uint16 {
	b := math.Float32bits(v)
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
