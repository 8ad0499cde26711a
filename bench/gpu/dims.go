package main

import (
	"github.com/qpack-go/qpack/bench/internal/benchpack"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/synthetic"
)

// benchModel is one -dims choice.
type benchModel struct {
	label      string
	dims       func(layers, vocab int) synthetic.Dims
	realLayers int    // the real model's layer count
	tokenizer  string // the tiny model whose tokenizer.json goes along
}

var models = map[string]benchModel{
	"35b": {"Qwen3.6-35B-A3B", synthetic.Real, 40, "qwen3_5_moe-q4g32"},
	"80b": {"Qwen3-Next-80B-A3B", synthetic.Qwen3Next80B, 48, "qwen3_next-q4g64"},
	// toy is for the test: the tiny models' dims, 4-bit.
	"toy": {"toy (tiny-model dims, 4-bit)", toyDims, 8, "qwen3_5_moe-q4g32"},
}

// experts is the routed experts' bytes on disk for layers.
func (m benchModel) experts(layers int) int64 { return benchpack.QwenExperts(m.dims)(layers) }

func toyDims(layers, vocab int) synthetic.Dims {
	d := synthetic.Tiny(runtime.TypeQwen35MoE)
	d.Layers, d.Vocab = layers, vocab
	d.Bits, d.Group = 4, 32
	return d
}
