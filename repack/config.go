package repack

import (
	"encoding/json"
	"fmt"
	"sort"
)

// maxConfigSize bounds config.json, which may come from the network.
const maxConfigSize = 4 << 20

// ModelConfig is the part of a checkpoint's config.json that planning needs.
// It reads both flat configs (qwen3_next) and nested ones (qwen3_5_moe keeps
// the text model under "text_config").
type ModelConfig struct {
	ModelType  string
	Layers     int
	Experts    int
	Linear     []bool // per layer: linear attention (Gated DeltaNet)
	QuantBits  int    // global quantization; 0 when unquantized
	QuantGroup int
	// overrides maps a module path ("model.layers.0.mlp.gate") to its own
	// quantization, as mlx-lm writes them.
	overrides map[string]quantSpec
}

type quantSpec struct {
	Bits, Group int
	Quantized   bool
}

// ParseConfig reads config.json. file names it in errors.
func ParseConfig(data []byte, file string) (*ModelConfig, error) {
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a config may have", file, len(data), maxConfigSize)
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %v", file, err)
	}
	text := root
	if raw, ok := root["text_config"]; ok && string(raw) != "null" {
		text = nil // a fresh map: unmarshalling into root would merge the two
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, fmt.Errorf("%s: text_config is not an object: %v", file, err)
		}
	}
	cfg := &ModelConfig{overrides: map[string]quantSpec{}}
	getStr(root, "model_type", &cfg.ModelType)
	var experts, layers, interval int
	if err := getInt(text, "num_experts", &experts); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if experts == 0 {
		// Other MoE configs name it differently.
		for _, k := range []string{"num_local_experts", "n_routed_experts"} {
			if err := getInt(text, k, &experts); err != nil {
				return nil, fmt.Errorf("%s: %v", file, err)
			}
			if experts > 0 {
				break
			}
		}
	}
	if err := getInt(text, "num_hidden_layers", &layers); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if err := getInt(text, "full_attention_interval", &interval); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if layers <= 0 || layers > 1024 {
		return nil, fmt.Errorf("%s: num_hidden_layers %d is missing or out of range (1..1024)", file, layers)
	}
	if experts < 0 || experts > 65536 {
		return nil, fmt.Errorf("%s: num_experts %d is out of range", file, experts)
	}
	cfg.Layers, cfg.Experts = layers, experts

	cfg.Linear = make([]bool, layers)
	if raw, ok := text["layer_types"]; ok && string(raw) != "null" {
		var types []string
		if err := json.Unmarshal(raw, &types); err != nil {
			return nil, fmt.Errorf("%s: layer_types: %v", file, err)
		}
		if len(types) != layers {
			return nil, fmt.Errorf("%s: layer_types has %d entries for %d layers", file, len(types), layers)
		}
		for i, t := range types {
			cfg.Linear[i] = t == "linear_attention"
		}
	} else if interval > 0 {
		for i := range cfg.Linear {
			cfg.Linear[i] = (i+1)%interval != 0
		}
	}

	// Quantization: mlx-lm writes "quantization" (and an identical
	// "quantization_config"); either may sit at the top level.
	qraw, ok := root["quantization"]
	if !ok {
		qraw, ok = root["quantization_config"]
	}
	if ok && string(qraw) != "null" {
		var q map[string]json.RawMessage
		if err := json.Unmarshal(qraw, &q); err != nil {
			return nil, fmt.Errorf("%s: quantization is not an object: %v", file, err)
		}
		if err := getInt(q, "bits", &cfg.QuantBits); err != nil {
			return nil, fmt.Errorf("%s: quantization: %v", file, err)
		}
		if err := getInt(q, "group_size", &cfg.QuantGroup); err != nil {
			return nil, fmt.Errorf("%s: quantization: %v", file, err)
		}
		var mode string
		getStr(q, "mode", &mode)
		if mode != "" && mode != "affine" {
			return nil, fmt.Errorf("%s: quantization mode %q is not supported (only MLX affine)", file, mode)
		}
		for k, v := range q {
			switch k {
			case "bits", "group_size", "mode", "quant_method":
				continue
			}
			if string(v) == "false" {
				cfg.overrides[k] = quantSpec{}
				continue
			}
			var o map[string]json.RawMessage
			if json.Unmarshal(v, &o) != nil {
				continue // not a per-module override
			}
			s := quantSpec{Quantized: true}
			if err := getInt(o, "bits", &s.Bits); err != nil {
				return nil, fmt.Errorf("%s: quantization[%q]: %v", file, k, err)
			}
			if err := getInt(o, "group_size", &s.Group); err != nil {
				return nil, fmt.Errorf("%s: quantization[%q]: %v", file, k, err)
			}
			cfg.overrides[k] = s
		}
	}
	return cfg, nil
}

// quantFor returns the declared quantization of a module path: its override
// if there is one, else the global setting.
func (c *ModelConfig) quantFor(module string) (bits, group int) {
	if s, ok := c.overrides[module]; ok {
		if !s.Quantized {
			return 0, 0
		}
		return s.Bits, s.Group
	}
	return c.QuantBits, c.QuantGroup
}

func getInt(m map[string]json.RawMessage, key string, dst *int) error {
	raw, ok := m[key]
	if !ok || string(raw) == "null" {
		return nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return fmt.Errorf("%s is not a number", key)
	}
	if f != float64(int64(f)) || f < -1<<40 || f > 1<<40 {
		return fmt.Errorf("%s = %v is not a sane integer", key, f)
	}
	*dst = int(f)
	return nil
}

func getStr(m map[string]json.RawMessage, key string, dst *string) {
	if raw, ok := m[key]; ok {
		_ = json.Unmarshal(raw, dst)
	}
}

// Override is one per-module quantization entry of config.json.
type Override struct {
	Module    string
	Quantized bool
	Bits      int
	GroupSize int
}

// Overrides lists the per-module quantization overrides, sorted by module.
func (c *ModelConfig) Overrides() []Override {
	out := make([]Override, 0, len(c.overrides))
	for k, v := range c.overrides {
		out = append(out, Override{Module: k, Quantized: v.Quantized, Bits: v.Bits, GroupSize: v.Group})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Module < out[j].Module })
	return out
}
