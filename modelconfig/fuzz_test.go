package modelconfig

import (
	"os"
	"reflect"
	"slices"
	"testing"
)

// FuzzParse: whatever the bytes, Parse returns an error or a description
// that keeps every invariant the forward pass relies on, and the same one
// each time.
func FuzzParse(f *testing.F) {
	for _, p := range []string{tinyMoE, tinyNext, "testdata/configs/Qwen3.6-35B-A3B.verl-npu.config.json"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "config.json")
		if err != nil {
			return
		}
		bad := func(what string) { t.Fatalf("accepted %s: %+v", what, c) }
		if c.Layers < 1 || c.Layers > MaxLayers || len(c.FullAttention) != c.Layers || len(c.Sparse) != c.Layers {
			bad("inconsistent layers")
		}
		if c.Hidden < 1 || c.Hidden > MaxDim || c.Vocab < 1 || c.Vocab > MaxVocab || c.HeadDim < 1 || c.Heads < 1 || c.KVHeads < 1 || c.Heads%c.KVHeads != 0 {
			bad("bad attention dims")
		}
		if c.RotaryDim < 2 || c.RotaryDim%2 != 0 || c.RotaryDim > c.HeadDim {
			bad("bad rotary dims")
		}
		if c.TopK < 1 || c.TopK > c.Experts || c.Experts > MaxExperts || c.MoEIntermediate < 1 {
			bad("bad experts")
		}
		if slices.Contains(c.FullAttention, false) && (c.LinKeyHeads < 1 || c.LinValueHeads%c.LinKeyHeads != 0 || c.ConvKernel < 1 || c.ConvKernel > MaxConvWidth) {
			bad("bad linear attention dims")
		}
		if g, ok := c.Extra.(*Gemma4); ok && !gemma4Consistent(c, g) {
			bad("inconsistent gemma4 fields")
		}
		if c.Quant.Present {
			for _, p := range append([]QuantParams{c.Quant.Global}, values(c.Quant.Overrides)...) {
				if !contains(QuantBitsAllowed, p.Bits) || !contains(QuantGroupAllowed, p.GroupSize) {
					bad("bad quantization")
				}
			}
		}
		again, err := Parse(data, "config.json")
		if err != nil || !reflect.DeepEqual(c, again) {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}

func values(m map[string]QuantParams) []QuantParams {
	var out []QuantParams
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
