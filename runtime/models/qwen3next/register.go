package qwen3next

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime"
)

func init() {
	for _, name := range []string{runtime.TypeQwen3Next, runtime.TypeQwen35MoE} {
		runtime.Register(runtime.Arch{Name: name, Build: Build, ExpertModule: ExpertModule})
	}
}

// ExpertModule is where layer l's stacked experts lie in an MLX checkpoint:
// {prefix}layers.{l}.mlp.switch_mlp.
func ExpertModule(cfg *runtime.Config, l int) string {
	return fmt.Sprintf("%slayers.%d.mlp.switch_mlp", cfg.Prefix, l)
}
