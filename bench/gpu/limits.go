package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// facts are what the limits need of a container: sizes from its dense
// header and expert layout, dims from its config.json.
type facts struct {
	Layers        int   `json:"layers"`
	SparseLayers  int   `json:"sparse_layers"`
	FullLayers    int   `json:"full_attention_layers"`
	LinearLayers  int   `json:"deltanet_layers"`
	Experts       int   `json:"experts_per_layer"`
	TopK          int   `json:"top_k"`
	ExpertStride  int64 `json:"expert_stride"`
	ExpertPayload int64 `json:"expert_payload"`
	AllExperts    int64 `json:"all_experts_bytes"`
	DenseBytes    int64 `json:"dense_bytes"`

	// Bytes touched by one decode token: every dense tensor but the
	// embedding (one row of it), the top-k experts' payload in every sparse
	// layer, and the layer states in float32: each DeltaNet layer's
	// recurrent state and conv window read and written, each full layer's
	// K and V read at the mean context of the measured tokens.
	DenseTouched  int64   `json:"dense_touched_per_token"`
	ExpertTouched int64   `json:"expert_touched_per_token"`
	StateTouched  float64 `json:"state_touched_per_token"`
	MeanContext   float64 `json:"mean_context"`

	// FLOPs of the prefill's products: per token, 2·rows·cols for every
	// quantized dense matrix but the embedding and lm_head, plus the top-k
	// experts' three matrices in every sparse layer; lm_head once per
	// prompt (only the last token's logits are computed).
	ProductFlopsPerToken float64 `json:"product_flop_per_token"`
	HeadFlops            float64 `json:"lm_head_flop"`
}

// TouchedPerToken is the HBM limit's denominator.
func (f *facts) TouchedPerToken() float64 {
	return float64(f.DenseTouched+f.ExpertTouched) + f.StateTouched
}

// PrefillFlops is the products' FLOPs for a prompt of n tokens.
func (f *facts) PrefillFlops(n int) float64 {
	return f.ProductFlopsPerToken*float64(n) + f.HeadFlops
}

// readFacts reads the container's facts; the resident decode measured
// `tokens` tokens after a prompt of `context` tokens and 8 warm-up tokens.
func readFacts(pack string, tokens, context int) (*facts, error) {
	cn, err := qpack.Open(pack)
	if err != nil {
		return nil, err
	}
	defer cn.Close()
	data, err := os.ReadFile(cn.Path("config.json"))
	if err != nil {
		return nil, err
	}
	cfg, err := modelconfig.Parse(data, "config.json")
	if err != nil {
		return nil, err
	}
	lay := cn.Layout
	f := &facts{Layers: cfg.Layers, Experts: lay.ExpertCount, TopK: cfg.TopK, ExpertStride: lay.ExpertStride,
		ExpertPayload: lay.Payload(), AllExperts: lay.ExpertStride * int64(lay.ExpertCount) * int64(lay.LayerCount)}
	for l := range cfg.Layers {
		if cfg.Sparse[l] {
			f.SparseLayers++
		}
		if cfg.FullAttention[l] {
			f.FullLayers++
		} else {
			f.LinearLayers++
		}
	}
	f.ExpertTouched = int64(f.SparseLayers) * int64(cfg.TopK) * f.ExpertPayload
	f.MeanContext = float64(context) + 8 + float64(tokens)/2
	kv := 2 * float64(cfg.KVHeads*cfg.HeadDim) * 4 * f.MeanContext
	delta := 2 * 4 * float64(cfg.LinValueHeads*cfg.LinKeyHeadDim*cfg.LinValHeadDim+cfg.ConvDim()*(cfg.ConvKernel-1))
	f.StateTouched = float64(f.FullLayers)*kv + float64(f.LinearLayers)*delta

	byName := map[string]safetensors.Tensor{}
	for _, t := range cn.Dense.Tensors {
		byName[t.Name] = t
	}
	for _, t := range cn.Dense.Tensors {
		f.DenseBytes += t.Size
		embed := strings.Contains(t.Name, "embed_tokens.")
		switch {
		case embed && len(t.Shape) > 0 && t.Shape[0] > 0:
			f.DenseTouched += t.Size / t.Shape[0]
		case !embed:
			f.DenseTouched += t.Size
		}
		module, ok := strings.CutSuffix(t.Name, ".weight")
		if !ok || embed || t.DType != safetensors.U32 || len(t.Shape) != 2 {
			continue
		}
		if _, q := byName[module+".scales"]; !q {
			continue
		}
		p, ok := cfg.Quant.For(module)
		if !ok || p.Bits <= 0 {
			return nil, fmt.Errorf("%s: packed weights without quantization parameters in config.json", t.Name)
		}
		rows, cols := float64(t.Shape[0]), float64(t.Shape[1]*32/int64(p.Bits))
		if strings.Contains(module, "lm_head") {
			f.HeadFlops += 2 * rows * cols
		} else {
			f.ProductFlopsPerToken += 2 * rows * cols
		}
	}
	// gate, up [inter, hidden] and down [hidden, inter].
	f.ProductFlopsPerToken += float64(f.SparseLayers*cfg.TopK) * 3 * 2 * float64(cfg.MoEIntermediate*cfg.Hidden)
	return f, nil
}
