package modelconfig

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// A new architecture registers its own parser; the Qwen ones keep working
// and the registry is the only shared list.
func TestRegisterAnotherArchitecture(t *testing.T) {
	r := Default().Clone()
	r.Register(Arch{
		Name:           "toy_moe",
		ModelTypes:     []string{"toy_moe_text"},
		TextModelTypes: []string{"toy_moe_text"},
		Parse: func(d *Document) *Config {
			c := &Config{Prefix: "model.", HeadPrefix: "lm_head.", RotaryDim: 8, RopeTheta: 1e4}
			c.Hidden, _ = d.Text.Int(dimBound, "hidden_size")
			c.Layers, _ = d.Text.Int(layerBound, "num_hidden_layers")
			c.Vocab, _ = d.Text.Int(Bound{1, MaxVocab, "MaxVocab"}, "vocab_size")
			c.Heads, c.KVHeads, c.HeadDim = 2, 1, 16
			c.Experts, _ = d.Text.Int(expertBound, "num_experts")
			c.TopK, _ = d.Text.Int(expertBound, "top_k_experts")
			c.MoEIntermediate = 8
			c.FullAttention = make([]bool, c.Layers)
			c.Sparse = make([]bool, c.Layers)
			for i := range c.Sparse {
				c.Sparse[i] = true
			}
			c.Extra = "toy"
			return c
		},
	})
	c, err := r.Parse([]byte(`{"model_type":"toy_moe","text_config":{"model_type":"toy_moe_text","hidden_size":32,"num_hidden_layers":2,"vocab_size":10,"num_experts":4,"top_k_experts":2}}`), "config.json")
	if err != nil || c.ModelType != "toy_moe" || c.Experts != 4 || c.Extra != "toy" || !c.Nested {
		t.Fatalf("%+v %v", c, err)
	}
	// The common checks hold for it too.
	_, err = r.Parse([]byte(`{"model_type":"toy_moe_text","hidden_size":32,"num_hidden_layers":2,"vocab_size":10,"num_experts":4,"top_k_experts":5}`), "config.json")
	if err == nil || !strings.Contains(err.Error(), "num_experts_per_tok: 5 is more than num_experts 4") {
		t.Fatalf("err = %v", err)
	}
	if _, err := r.Parse(readJSONBytes(t, tinyMoE), "config.json"); err != nil {
		t.Fatalf("qwen in the extended registry: %v", err)
	}
	if got := r.Supported(); !slices.Equal(got, []string{"gemma4", "qwen3_5_moe", "qwen3_next", "toy_moe"}) {
		t.Fatalf("supported %v", got)
	}
	if got := Supported(); slices.Contains(got, "toy_moe") {
		t.Fatalf("the default registry changed: %v", got)
	}
	_, err = Parse([]byte(`{"model_type":"toy_moe"}`), "config.json")
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("default registry: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a taken model_type registered twice")
		}
	}()
	r.Register(Arch{Name: "other", ModelTypes: []string{"qwen3_5"}, Parse: func(*Document) *Config { return nil }})
}

func readJSONBytes(t *testing.T, p string) []byte { return marshal(t, readJSON(t, p)) }
