package synthetic

import (
	"testing"

	"github.com/qpack-go/qpack/modelconfig"
)

// The 397B dims make a config that parses to the published dims (the
// weights are not drawn here: 3.6 GB of experts per layer).
func TestQwen397BConfig(t *testing.T) {
	d := Qwen397B(3, 248320)
	c, err := modelconfig.Parse(d.ConfigJSON(), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Hidden != 4096 || c.Layers != 3 || c.Vocab != 248320 || c.Experts != 512 || c.TopK != 10 ||
		c.MoEIntermediate != 1024 || c.SharedIntermediate != 1024 || c.LinKeyHeads != 16 || c.LinValueHeads != 64 ||
		c.LinKeyHeadDim != 128 || c.LinValHeadDim != 128 || c.Heads != 32 || c.KVHeads != 2 || c.HeadDim != 256 ||
		c.Quant.Global != (modelconfig.QuantParams{Bits: 4, GroupSize: 64}) {
		t.Errorf("%+v", *c)
	}
	// One expert: gate, up [1024, 4096] and down [4096, 1024] at 4 bits,
	// BF16 scales and biases per 64: flash-moe's 7,077,888 bytes.
	mat := func(rows, cols int) int { return rows*cols/2 + 2*2*rows*(cols/64) }
	if got := 2*mat(d.MoEInter, d.Hidden) + mat(d.Hidden, d.MoEInter); got != 7077888 {
		t.Errorf("expert payload %d", got)
	}
}
