package runtime

import (
	"os"
	"testing"
)

// The runner takes its configuration from package modelconfig (whose
// tests hold the variants and refusals); these check the wrappers.
func TestParseConfigWrapper(t *testing.T) {
	for _, tc := range []struct{ file, typ string }{
		{"qwen3_next_80b_4bit.json", TypeQwen3Next},
		{"qwen3_6_35b_4bit.json", TypeQwen35MoE},
		{"qwen3_6_35b_hf.json", TypeQwen35MoE},
	} {
		data, err := os.ReadFile("testdata/configs/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseConfig(data)
		if err != nil || c.ModelType != tc.typ || c.ConvDim() != 8192 {
			t.Fatalf("%s: %+v %v", tc.file, c, err)
		}
	}
	if _, err := ParseConfig([]byte(`{"model_type":"llama"}`)); err == nil {
		t.Fatal("llama accepted")
	}
	c, err := LoadConfig("../testdata/tiny/qwen3_5_moe-q4g32")
	if err != nil || c.Prefix != "language_model.model." {
		t.Fatalf("%+v %v", c, err)
	}
}
