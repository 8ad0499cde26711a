package synthetic

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/qpack-go/qpack/modelconfig"
)

// Qwen3Next80B at 48 layers and the real vocab parses to what the
// reconstructed config of the real model parses to, field by field (all
// but intermediate_size, unused without mlp_only_layers, and
// max_position_embeddings).
func TestQwen3Next80BMatchesRealConfig(t *testing.T) {
	real := filepath.Join("..", "..", "..", "shared", "refdata", "configs", "Qwen3-Next-80B-A3B-Instruct-4bit.MLX.RECONSTRUCTED.config.json")
	data, err := os.ReadFile(real)
	if err != nil {
		t.Skipf("the real config is not here: %v", err)
	}
	want, err := modelconfig.Parse(data, real)
	if err != nil {
		t.Fatal(err)
	}
	got, err := modelconfig.Parse(Qwen3Next80B(48, 151936).ConfigJSON(), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	for l, s := range want.Sparse {
		if !s {
			t.Fatalf("the real config has a dense layer %d", l)
		}
	}
	// Not part of the per-layer dims: the dense MLP size no layer uses and
	// the context length (the synthetic config writes none: no limit).
	got.Intermediate, got.MaxPositions = want.Intermediate, want.MaxPositions
	if !reflect.DeepEqual(got, want) {
		t.Errorf("synthetic\n%+v\nreal\n%+v", *got, *want)
	}
	// One expert: gate, up [512, 2048] and down [2048, 512] at 4 bits,
	// BF16 scales and biases per 64.
	d := Qwen3Next80B(2, 1)
	mat := func(rows, cols int) int { return rows*cols/2 + 2*2*rows*(cols/64) }
	if got := 2*mat(d.MoEInter, d.Hidden) + mat(d.Hidden, d.MoEInter); got != 1769472 {
		t.Errorf("expert payload %d", got)
	}
}
