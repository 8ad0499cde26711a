package main

import (
	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/repack"
)

// attentionKinds names each layer's attention where the container's
// linear/full flags do not tell it: for Gemma 4, sliding_attention or
// full_attention (all its layers are softmax attention). nil otherwise.
func attentionKinds(cfg *repack.ModelConfig) []string {
	if cfg == nil || cfg.Model == nil {
		return nil
	}
	g, ok := cfg.Model.Extra.(*modelconfig.Gemma4)
	if !ok {
		return nil
	}
	out := make([]string, len(g.Sliding))
	for i, s := range g.Sliding {
		out[i] = "full_attention"
		if s {
			out[i] = "sliding_attention"
		}
	}
	return out
}
