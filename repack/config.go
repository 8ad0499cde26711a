package repack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"

	"github.com/qpack-go/qpack/modelconfig"
)

// maxConfigSize bounds config.json, which may come from the network.
const maxConfigSize = modelconfig.MaxBytes

// ModelConfig is the part of a checkpoint's config.json that planning
// needs, taken from the shared description (package modelconfig) that the
// runner uses too, so a checkpoint the runner would refuse is refused
// here, before a weight byte is read.
type ModelConfig struct {
	ModelType  string // as config.json declares it (the container's modelName)
	Layers     int
	Experts    int
	Linear     []bool // per layer: linear attention (Gated DeltaNet)
	QuantBits  int    // global quantization; 0 when unquantized
	QuantGroup int
	// Model is the full description (nil for a ModelConfig built by hand).
	Model *modelconfig.Config
	// overrides maps a module path ("model.layers.0.mlp.gate") to its own
	// quantization, as mlx-lm writes them (used when Model is nil).
	overrides map[string]quantSpec
}

type quantSpec struct {
	Bits, Group int
	Quantized   bool
}

// ParseConfig reads and validates config.json with package modelconfig.
// file names it in errors; the error wraps modelconfig.ErrConfig (and
// modelconfig.ErrUnsupported for an architecture the runner lacks).
func ParseConfig(data []byte, file string) (*ModelConfig, error) {
	m, err := modelconfig.Parse(data, file)
	if err != nil {
		return nil, err
	}
	cfg := &ModelConfig{ModelType: m.Declared, Layers: m.Layers, Experts: m.Experts, Model: m, Linear: make([]bool, m.Layers)}
	for i, full := range m.FullAttention {
		cfg.Linear[i] = !full
	}
	if m.Quant.Present {
		cfg.QuantBits, cfg.QuantGroup = m.Quant.Global.Bits, m.Quant.Global.GroupSize
	}
	return cfg, nil
}

// FileReader reads a small file of a checkpoint source (a Source has it).
type FileReader interface {
	ReadFile(ctx context.Context, name string, max int64) ([]byte, error)
}

// CheckConfig reads the source's config.json and refuses a checkpoint the
// runner cannot run. It reads only that one small file, so a Hub source is
// refused before any shard is opened or a shard byte requested.
func CheckConfig(ctx context.Context, src FileReader) (*ModelConfig, error) {
	data, err := src.ReadFile(ctx, modelconfig.FileName, maxConfigSize)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// Wrapped, so what the source says (absent, or not in the cache
			// when offline) still decides the exit code.
			return nil, fmt.Errorf("no config.json in the source (not a Hugging Face / MLX checkpoint?): %w", err)
		}
		return nil, err
	}
	return ParseConfig(data, modelconfig.FileName)
}

// checkTensors checks the config against the shard headers where only the
// two together can tell (vocab_size against the embedding rows, ...).
func (c *ModelConfig) checkTensors(shards []SourceShard) error {
	if c.Model == nil {
		return nil
	}
	return c.Model.CheckTensors(modelconfig.FileName, func(name string) ([]int64, bool) {
		for _, sh := range shards {
			if t, ok := sh.Header.Tensor(name); ok {
				return t.Shape, true
			}
		}
		return nil, false
	})
}

// quantFor returns the declared quantization of a module path: its override
// if there is one, else the global setting.
func (c *ModelConfig) quantFor(module string) (bits, group int) {
	if c.Model != nil {
		p, ok := c.Model.Quant.For(module)
		if !ok {
			return 0, 0
		}
		return p.Bits, p.GroupSize
	}
	if s, ok := c.overrides[module]; ok {
		if !s.Quantized {
			return 0, 0
		}
		return s.Bits, s.Group
	}
	return c.QuantBits, c.QuantGroup
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
	var out []Override
	if c.Model != nil {
		for k, v := range c.Model.Quant.Overrides {
			out = append(out, Override{Module: k, Quantized: true, Bits: v.Bits, GroupSize: v.GroupSize})
		}
		for k := range c.Model.Quant.Disabled {
			out = append(out, Override{Module: k})
		}
	} else {
		for k, v := range c.overrides {
			out = append(out, Override{Module: k, Quantized: v.Quantized, Bits: v.Bits, GroupSize: v.Group})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Module < out[j].Module })
	return out
}
