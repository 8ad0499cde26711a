package repack

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

// qwen397BConfig is the 35B MLX config with Qwen3.5-397B-A17B's text
// dims: hidden 4096, 60 layers (full attention every 4th), 512 experts
// top-10 of 1024, one shared expert of 1024, 16/64 linear heads, 32/2
// attention heads of 256, vocab 248320, 4-bit g64 with 8-bit routers.
func qwen397BConfig(t *testing.T) *ModelConfig {
	t.Helper()
	path := refConfigs + "Qwen3.6-35B-A3B-4bit.MLX-LM.RECONSTRUCTED.config.json"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	tc := m["text_config"].(map[string]any)
	for k, v := range map[string]any{
		"hidden_size": 4096, "num_hidden_layers": 60, "num_experts": 512, "num_experts_per_tok": 10,
		"moe_intermediate_size": 1024, "shared_expert_intermediate_size": 1024, "linear_num_key_heads": 16,
		"linear_num_value_heads": 64, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
		"num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320,
	} {
		tc[k] = v
	}
	types := make([]string, 60)
	q := map[string]any{"group_size": 64, "bits": 4, "mode": "affine"}
	for l := range types {
		types[l] = "linear_attention"
		if (l+1)%4 == 0 {
			types[l] = "full_attention"
		}
		for _, mod := range []string{"mlp.gate", "mlp.shared_expert_gate"} {
			q[fmt.Sprintf("language_model.model.layers.%d.%s", l, mod)] = map[string]any{"group_size": 64, "bits": 8}
		}
	}
	tc["layer_types"] = types
	delete(tc, "full_attention_interval")
	for _, k := range []string{"quantization", "quantization_config"} {
		delete(tc, k)
		m[k] = q
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(out, "config.json")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Qwen3.5-397B-A17B at its real dims over a 46-shard checkpoint (the
// mlx-community 4-bit conversion's count): every expert blob is 7,077,888
// bytes, the size flash-moe hardcodes for it (gate/up/down x weight,
// scales, biases; already a multiple of 16 KiB), in 60 layer files.
func TestPlanQwen397B46Shards(t *testing.T) {
	cfg := qwen397BConfig(t)
	if cfg.Layers != 60 || cfg.Experts != 512 || cfg.Model.TopK != 10 || cfg.Model.Hidden != 4096 {
		t.Fatalf("config %+v", cfg.Model)
	}
	d := moeDims{prefix: "language_model.model.", layers: 60, E: 512, hidden: 4096, inter: 1024, bits: 4, group: 64}
	shards := d.shards(t, 46, nil)
	used := map[int]bool{}
	p, err := BuildPlan(cfg, shards)
	if err != nil {
		t.Fatal(err)
	}
	L := p.Layout
	if L.ExpertCount != 512 || L.LayerCount != 60 || L.Payload() != 7077888 || L.ExpertStride != 7077888 {
		t.Fatalf("layout %d experts x %d layers, payload %d stride %d", L.ExpertCount, L.LayerCount, L.Payload(), L.ExpertStride)
	}
	if got := L.LayerSize(); got != 512*7077888 {
		t.Errorf("layer file %d bytes", got)
	}
	if len(p.Experts) != 60*9 {
		t.Errorf("%d expert tensors, want 540", len(p.Experts))
	}
	for _, x := range p.Experts {
		used[x.Shard] = true
		if want := x.Layer * 46 / 60; x.Shard != want {
			t.Errorf("layer %d expert tensor %s planned from shard %d, is in %d", x.Layer, x.Src.Name, x.Shard, want)
		}
	}
	if len(used) != 46 {
		t.Errorf("experts come from %d of the 46 shards", len(used))
	}
	if p.QuantBits != 4 || p.QuantGroup != 64 {
		t.Errorf("quant %d/%d", p.QuantBits, p.QuantGroup)
	}
	for l, lin := range L.LinearLayers {
		if lin != ((l+1)%4 != 0) {
			t.Errorf("layer %d linear=%v", l, lin)
		}
	}
	// 60 layers x (norm + router) + the embedding.
	if len(p.Dense) != 121 {
		t.Errorf("%d dense tensors", len(p.Dense))
	}
}
