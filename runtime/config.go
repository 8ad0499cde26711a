package runtime

import "github.com/qpack-go/qpack/modelconfig"

// The runner's configuration is the shared, validated description that
// package modelconfig reads from config.json (the same one repack and
// verify use).

// Model types this runner understands (text only).
const (
	TypeQwen3Next = modelconfig.TypeQwen3Next
	TypeQwen35MoE = modelconfig.TypeQwen35MoE
)

// Config is the text-model configuration with every field the forward pass
// needs resolved and checked.
type Config = modelconfig.Config

// QuantParams are the affine quantization parameters of one module.
type QuantParams = modelconfig.QuantParams

// Quantization is the config's quantization: a global setting and
// per-module overrides.
type Quantization = modelconfig.Quantization

// LoadConfig reads and validates dir/config.json.
func LoadConfig(dir string) (*Config, error) { return modelconfig.Load(dir) }

// ParseConfig parses and validates a config.json document.
func ParseConfig(data []byte) (*Config, error) { return modelconfig.Parse(data, modelconfig.FileName) }
