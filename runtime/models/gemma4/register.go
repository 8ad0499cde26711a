package gemma4

import (
	"fmt"

	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/runtime"
)

func init() {
	runtime.Register(runtime.Arch{Name: modelconfig.TypeGemma4, Build: Build, ExpertModule: ExpertModule})
}

// ExpertModule is where layer l's stacked experts lie in an MLX checkpoint:
// {prefix}layers.{l}.experts.switch_glu.
func ExpertModule(cfg *runtime.Config, l int) string {
	return fmt.Sprintf("%slayers.%d.experts.switch_glu", cfg.Prefix, l)
}
