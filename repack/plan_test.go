package repack

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// zeroTail is a ReaderAt over a header followed by zeros up to size.
type zeroTail struct {
	hdr  []byte
	size int64
}

func (z zeroTail) ReadAt(p []byte, off int64) (int, error) {
	if off >= z.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off+int64(n) < z.size {
		if o := off + int64(n); o < int64(len(z.hdr)) {
			n += copy(p[n:], z.hdr[o:])
		} else {
			p[n] = 0
			n++
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// mkShard lays out specs as a safetensors file and parses its header back
// the way a repack does (the data bytes are never needed for planning).
func mkShard(t testing.TB, name string, specs []safetensors.Spec) SourceShard {
	t.Helper()
	fp, err := safetensors.PlanFile(specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeader(zeroTail{fp.Header, fp.Size}, fp.Size, name)
	if err != nil {
		t.Fatal(err)
	}
	return SourceShard{Name: name, Size: fp.Size, Header: h}
}

// moeDims describe a synthetic MLX MoE checkpoint.
type moeDims struct {
	prefix        string // "model." or "language_model.model."
	layers, E     int
	hidden, inter int64
	bits, group   int64 // bits 0 = float experts (BF16)
}

// expertSpecs lists the stacked expert tensors of layer l in MLX's names
// and shapes: weight [E, out, in*bits/32] U32, scales and biases
// [E, out, in/group] BF16.
func (d moeDims) expertSpecs(l int) []safetensors.Spec {
	var out []safetensors.Spec
	for _, p := range []struct {
		name   string
		outDim int64
		inDim  int64
	}{{"gate_proj", d.inter, d.hidden}, {"up_proj", d.inter, d.hidden}, {"down_proj", d.hidden, d.inter}} {
		base := fmt.Sprintf("%slayers.%d.mlp.switch_mlp.%s.", d.prefix, l, p.name)
		E := int64(d.E)
		if d.bits == 0 {
			out = append(out, safetensors.Spec{Name: base + "weight", DType: safetensors.BF16, Shape: []int64{E, p.outDim, p.inDim}})
			continue
		}
		out = append(out,
			safetensors.Spec{Name: base + "weight", DType: safetensors.U32, Shape: []int64{E, p.outDim, p.inDim * d.bits / 32}},
			safetensors.Spec{Name: base + "scales", DType: safetensors.BF16, Shape: []int64{E, p.outDim, p.inDim / d.group}},
			safetensors.Spec{Name: base + "biases", DType: safetensors.BF16, Shape: []int64{E, p.outDim, p.inDim / d.group}},
		)
	}
	return out
}

func (d moeDims) denseSpecs(l int) []safetensors.Spec {
	return []safetensors.Spec{
		{Name: fmt.Sprintf("%slayers.%d.input_layernorm.weight", d.prefix, l), DType: safetensors.BF16, Shape: []int64{d.hidden}},
		{Name: fmt.Sprintf("%slayers.%d.mlp.gate.weight", d.prefix, l), DType: safetensors.U32, Shape: []int64{int64(d.E), d.hidden * 8 / 32}},
	}
}

// shards spreads the layers over n shards (layer l in shard l*n/layers).
func (d moeDims) shards(t testing.TB, n int, extra map[int][]safetensors.Spec) []SourceShard {
	t.Helper()
	specs := make([][]safetensors.Spec, n)
	for l := 0; l < d.layers; l++ {
		s := l * n / d.layers
		specs[s] = append(specs[s], d.expertSpecs(l)...)
		specs[s] = append(specs[s], d.denseSpecs(l)...)
	}
	specs[0] = append(specs[0], safetensors.Spec{Name: d.prefix + "embed_tokens.weight", DType: safetensors.BF16, Shape: []int64{64, d.hidden}})
	for s, e := range extra {
		specs[s] = append(specs[s], e...)
	}
	out := make([]SourceShard, n)
	for s := range specs {
		out[s] = mkShard(t, fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, n), specs[s])
	}
	return out
}

func mustConfig(t testing.TB, path string) *ModelConfig {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(data, path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const refConfigs = "testdata/configs/"

// The 80B and 35B at MLX 4-bit g64: every expert blob is 1,769,472 bytes
// (gate, up, down x weight, scales, biases), a multiple of 16 KiB.
func TestPlanRealDims(t *testing.T) {
	for _, tc := range []struct {
		config string
		d      moeDims
		skip   []safetensors.Spec
	}{
		{"Qwen3-Next-80B-A3B-Instruct-4bit.MLX.RECONSTRUCTED.config.json",
			moeDims{prefix: "model.", layers: 48, E: 512, hidden: 2048, inter: 512, bits: 4, group: 64},
			[]safetensors.Spec{{Name: "mtp.fc.weight", DType: safetensors.BF16, Shape: []int64{2048, 4096}},
				{Name: "mtp.layers.0.mlp.switch_mlp.gate_proj.weight", DType: safetensors.U32, Shape: []int64{512, 512, 256}}}},
		{"Qwen3.6-35B-A3B-4bit.MLX-LM.RECONSTRUCTED.config.json",
			moeDims{prefix: "language_model.model.", layers: 40, E: 256, hidden: 2048, inter: 512, bits: 4, group: 64},
			[]safetensors.Spec{{Name: "vision_tower.blocks.0.attn.qkv.weight", DType: safetensors.BF16, Shape: []int64{16, 16}},
				{Name: "language_model.mtp.norm.weight", DType: safetensors.BF16, Shape: []int64{2048}}}},
	} {
		t.Run(tc.config, func(t *testing.T) {
			path := refConfigs + tc.config
			if _, err := os.Stat(path); err != nil {
				t.Skip("reference config not available:", err)
			}
			cfg := mustConfig(t, path)
			shards := tc.d.shards(t, 4, map[int][]safetensors.Spec{3: tc.skip})
			p, err := BuildPlan(cfg, shards)
			if err != nil {
				t.Fatal(err)
			}
			L := p.Layout
			if L.ExpertCount != tc.d.E || L.LayerCount != tc.d.layers {
				t.Fatalf("layout %d experts x %d layers", L.ExpertCount, L.LayerCount)
			}
			if L.ExpertStride != 1769472 || L.Payload() != 1769472 {
				t.Errorf("stride %d payload %d, want 1769472", L.ExpertStride, L.Payload())
			}
			wantSecs := []struct {
				name string
				off  int64
				size int64
			}{
				{"gate_proj.weight", 0, 524288}, {"gate_proj.scales", 524288, 32768}, {"gate_proj.biases", 557056, 32768},
				{"up_proj.weight", 589824, 524288}, {"up_proj.scales", 1114112, 32768}, {"up_proj.biases", 1146880, 32768},
				{"down_proj.weight", 1179648, 524288}, {"down_proj.scales", 1703936, 32768}, {"down_proj.biases", 1736704, 32768},
			}
			if len(L.Sections) != len(wantSecs) {
				t.Fatalf("%d sections", len(L.Sections))
			}
			for i, w := range wantSecs {
				s := L.Sections[i]
				if s.Name != w.name || s.Offset != w.off || s.Size != w.size {
					t.Errorf("section %d: %s @%d +%d, want %s @%d +%d", i, s.Name, s.Offset, s.Size, w.name, w.off, w.size)
				}
			}
			if p.QuantBits != 4 || p.QuantGroup != 64 {
				t.Errorf("quant %d/%d", p.QuantBits, p.QuantGroup)
			}
			for l, lin := range L.LinearLayers {
				if lin != ((l+1)%4 != 0) {
					t.Errorf("layer %d linear=%v", l, lin)
				}
			}
			if len(p.Skipped) != len(tc.skip) {
				t.Errorf("skipped %v", p.Skipped)
			}
			for _, s := range p.Skipped {
				if s.Shard != shards[3].Name || s.Reason == "" || s.Bytes <= 0 {
					t.Errorf("skipped %+v", s)
				}
			}
			// Dense: 2 per layer plus the embedding, sorted by name.
			if len(p.Dense) != 2*tc.d.layers+1 {
				t.Errorf("%d dense tensors", len(p.Dense))
			}
			for i := 1; i < len(p.Dense); i++ {
				if p.Dense[i-1].Src.Name >= p.Dense[i].Src.Name {
					t.Fatalf("dense not sorted at %s", p.Dense[i].Src.Name)
				}
			}
			if got, want := p.ExpertBytes(), int64(tc.d.layers)*int64(tc.d.E)*1769472; got != want {
				t.Errorf("expert bytes %d, want %d", got, want)
			}
		})
	}
}

// Copies covers every expert section of every layer exactly once, at
// e*stride + section offset, and every dense tensor at its planned place.
func TestCopies(t *testing.T) {
	d := moeDims{prefix: "model.", layers: 3, E: 4, hidden: 128, inter: 64, bits: 4, group: 32}
	cfg := &ModelConfig{Layers: 3, Experts: 4, Linear: make([]bool, 3), QuantBits: 4, QuantGroup: 32}
	p, err := BuildPlan(cfg, d.shards(t, 2, nil))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var prevShard int
	var prevOff int64 = -1
	for _, c := range p.Copies() {
		if c.Shard < prevShard || (c.Shard == prevShard && c.SrcOff <= prevOff) {
			t.Fatalf("copies not sorted at %+v", c)
		}
		prevShard, prevOff = c.Shard, c.SrcOff
		if c.Layer < 0 {
			key := "dense " + c.Tensor
			if seen[key] {
				t.Errorf("%s twice", key)
			}
			seen[key] = true
			continue
		}
		sec, _ := p.Layout.Section(c.Section)
		if c.DstOff != int64(c.Expert)*p.Layout.ExpertStride+sec.Offset || c.Len != sec.Size {
			t.Errorf("copy %+v: want dst %d len %d", c, int64(c.Expert)*p.Layout.ExpertStride+sec.Offset, sec.Size)
		}
		if c.File != qpack.LayerFile(c.Layer) {
			t.Errorf("copy %+v to %s", c, c.File)
		}
		key := fmt.Sprintf("%d/%d/%s", c.Layer, c.Expert, c.Section)
		if seen[key] {
			t.Errorf("%s twice", key)
		}
		seen[key] = true
	}
	if want := 3*4*9 + len(p.Dense); len(seen) != want {
		t.Errorf("%d distinct copies, want %d", len(seen), want)
	}
}

func TestFingerprint(t *testing.T) {
	d := moeDims{prefix: "model.", layers: 2, E: 4, hidden: 128, inter: 64, bits: 4, group: 32}
	cfg := &ModelConfig{Layers: 2, Experts: 4, Linear: make([]bool, 2), QuantBits: 4, QuantGroup: 32}
	plan := func(mod func([]SourceShard)) string {
		sh := d.shards(t, 2, nil)
		if mod != nil {
			mod(sh)
		}
		p, err := BuildPlan(cfg, sh)
		if err != nil {
			t.Fatal(err)
		}
		return p.Fingerprint()
	}
	a, b := plan(nil), plan(nil)
	if a != b || len(a) != 64 {
		t.Fatalf("fingerprint not stable: %s %s", a, b)
	}
	if plan(func(s []SourceShard) { s[1].SHA256 = strings.Repeat("a", 64) }) == a {
		t.Error("a shard's sha256 does not change the fingerprint")
	}
	if plan(func(s []SourceShard) { s[0].Size++ }) == a {
		t.Error("a shard's size does not change the fingerprint")
	}
	// A tensor moved within its shard.
	other := moeDims{prefix: "model.", layers: 2, E: 4, hidden: 128, inter: 64, bits: 4, group: 32}
	sh := other.shards(t, 2, map[int][]safetensors.Spec{0: {{Name: "aaa.extra", DType: safetensors.F32, Shape: []int64{3}}}})
	p, err := BuildPlan(cfg, sh)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fingerprint() == a {
		t.Error("an added dense tensor does not change the fingerprint")
	}
}

// Bad checkpoints are refused at planning time with a message naming the
// tensor, layer or file.
func TestPlanErrors(t *testing.T) {
	d := moeDims{prefix: "model.", layers: 3, E: 4, hidden: 128, inter: 64, bits: 4, group: 32}
	cfg := func() *ModelConfig {
		return &ModelConfig{ModelType: "qwen3_next", Layers: 3, Experts: 4, Linear: make([]bool, 3), QuantBits: 4, QuantGroup: 32, overrides: map[string]quantSpec{}}
	}
	// build returns shards for layers with per-layer spec edits.
	build := func(edit func(l int, specs []safetensors.Spec) []safetensors.Spec) []SourceShard {
		var all []safetensors.Spec
		for l := 0; l < d.layers; l++ {
			all = append(all, edit(l, d.expertSpecs(l))...)
			all = append(all, d.denseSpecs(l)...)
		}
		return []SourceShard{mkShard(t, "model.safetensors", all)}
	}
	keep := func(l int, s []safetensors.Spec) []safetensors.Spec { return s }
	drop := func(l int, s []safetensors.Spec, suffix string) []safetensors.Spec {
		var out []safetensors.Spec
		for _, x := range s {
			if !strings.HasSuffix(x.Name, suffix) {
				out = append(out, x)
			}
		}
		return out
	}
	cases := []struct {
		name   string
		cfg    func(*ModelConfig)
		shards func() []SourceShard
		want   string
	}{
		{"missing layer", nil, func() []SourceShard {
			return build(func(l int, s []safetensors.Spec) []safetensors.Spec {
				if l == 1 {
					return nil
				}
				return s
			})
		}, "layer 1 has no routed-expert tensors"},
		{"section table differs", nil, func() []SourceShard {
			return build(func(l int, s []safetensors.Spec) []safetensors.Spec {
				if l == 2 {
					return drop(l, s, "down_proj.biases")
				}
				return s
			})
		}, "layer 2 has expert sections"},
		{"experts count differs from config", func(c *ModelConfig) { c.Experts = 8 }, func() []SourceShard { return build(keep) },
			"does not start with the 8 experts"},
		{"per-expert shape differs", nil, func() []SourceShard {
			return build(func(l int, s []safetensors.Spec) []safetensors.Spec {
				if l == 1 {
					s[0].Shape = []int64{4, 32, 16}
				}
				return s
			})
		}, `model.layers.1.mlp.switch_mlp.gate_proj.weight`},
		{"layer beyond config", func(c *ModelConfig) { c.Layers = 2; c.Linear = c.Linear[:2] }, func() []SourceShard { return build(keep) },
			"layer 2 is outside the config's 2 layers"},
		{"declared bits differ", func(c *ModelConfig) { c.QuantBits = 8 }, func() []SourceShard { return build(keep) },
			"declares 8-bit but the tensor shapes are 4-bit"},
		{"no group size", func(c *ModelConfig) { c.QuantBits, c.QuantGroup = 0, 0 }, func() []SourceShard { return build(keep) },
			"declares no group size"},
		{"scales without biases", nil, func() []SourceShard {
			return build(func(l int, s []safetensors.Spec) []safetensors.Spec { return drop(l, s, "up_proj.biases") })
		}, "has scales but no biases"},
		{"unknown projection", nil, func() []SourceShard {
			return build(func(l int, s []safetensors.Spec) []safetensors.Spec {
				return append(s, safetensors.Spec{Name: fmt.Sprintf("model.layers.%d.mlp.switch_mlp.gate_up_proj.weight", l), DType: safetensors.U32, Shape: []int64{4, 2, 2}})
			})
		}, "gate_up_proj"},
		{"not MLX (per-expert tensors)", nil, func() []SourceShard {
			var specs []safetensors.Spec
			for e := 0; e < 4; e++ {
				specs = append(specs, safetensors.Spec{Name: fmt.Sprintf("model.layers.0.mlp.experts.%d.gate_proj.weight", e), DType: safetensors.BF16, Shape: []int64{8, 8}})
			}
			return []SourceShard{mkShard(t, "model.safetensors", specs)}
		}, "not an MLX"},
		{"duplicate tensor across shards", nil, func() []SourceShard {
			a := build(keep)[0]
			b := mkShard(t, "model-2.safetensors", []safetensors.Spec{d.denseSpecs(0)[0]})
			return []SourceShard{a, b}
		}, "is in both"},
		{"no shards", nil, func() []SourceShard { return nil }, "no safetensors shards"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg()
			if tc.cfg != nil {
				tc.cfg(c)
			}
			_, err := BuildPlan(c, tc.shards())
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// A stacked tensor whose byte size is not E x the section size (possible
// only with a header the safetensors reader did not produce) is refused by
// the layout map rather than copied wrongly.
func TestUnevenExpertBytes(t *testing.T) {
	d := moeDims{prefix: "model.", layers: 1, E: 4, hidden: 128, inter: 64, bits: 4, group: 32}
	cfg := &ModelConfig{Layers: 1, Experts: 4, Linear: make([]bool, 1), QuantBits: 4, QuantGroup: 32}
	sh := d.shards(t, 1, nil)
	for i, tn := range sh[0].Header.Tensors {
		if strings.HasSuffix(tn.Name, "gate_proj.scales") {
			sh[0].Header.Tensors[i].Size -= 2
		}
	}
	p, err := BuildPlan(cfg, sh)
	if err == nil {
		_, err = newLayoutMap(p, 1<<20)
	}
	if err == nil || !strings.Contains(err.Error(), "gate_proj.scales") {
		t.Fatalf("err = %v, want one naming gate_proj.scales", err)
	}
}

func TestParseConfigReal(t *testing.T) {
	p80 := refConfigs + "Qwen3-Next-80B-A3B-Instruct-4bit.MLX.RECONSTRUCTED.config.json"
	p35 := refConfigs + "Qwen3.6-35B-A3B-4bit.MLX-LM.RECONSTRUCTED.config.json"
	if _, err := os.Stat(p80); err != nil {
		t.Skip(err)
	}
	c := mustConfig(t, p80)
	if c.ModelType != "qwen3_next" || c.Layers != 48 || c.Experts != 512 || c.QuantBits != 4 || c.QuantGroup != 64 {
		t.Errorf("80B: %+v", c)
	}
	if b, g := c.quantFor("model.layers.7.mlp.gate"); b != 8 || g != 64 {
		t.Errorf("router override %d/%d", b, g)
	}
	if b, g := c.quantFor("model.layers.7.mlp.switch_mlp.gate_proj"); b != 4 || g != 64 {
		t.Errorf("expert quant %d/%d", b, g)
	}
	for l, lin := range c.Linear {
		if lin != ((l+1)%4 != 0) {
			t.Errorf("80B layer %d linear=%v", l, lin)
		}
	}
	c = mustConfig(t, p35)
	if c.ModelType != "qwen3_5_moe" || c.Layers != 40 || c.Experts != 256 || c.QuantBits != 4 {
		t.Errorf("35B: %+v", c)
	}
	if b, _ := c.quantFor("language_model.model.layers.3.mlp.shared_expert_gate"); b != 8 {
		t.Errorf("35B shared_expert_gate override %d", b)
	}
	if !c.Linear[0] || c.Linear[3] {
		t.Errorf("35B layer types %v", c.Linear[:4])
	}
	ov := c.Overrides()
	if len(ov) != 80 || ov[0].Module > ov[1].Module || ov[0].Bits != 8 || !ov[0].Quantized {
		t.Errorf("overrides: %d, first %+v", len(ov), ov[0])
	}
}

// The variants and refusals are modelconfig's tables; these check that
// repack takes them from there: what the runner refuses, the planner
// refuses, with an error naming the file and the field.
func TestParseConfigErrors(t *testing.T) {
	base, err := os.ReadFile("../testdata/tiny/qwen3_next-q4g64/config.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{`"model_type": "qwen3_next"`, `"model_type": "llama"`, `model_type: "llama" is not supported (supported: gemma4, qwen3_5_moe, qwen3_next)`},
		{`"num_experts_per_tok": 2`, `"num_experts_per_tok": 9`, "num_experts_per_tok: 9 is more than num_experts 8"},
		{`"num_hidden_layers": 8`, `"num_hidden_layers": -8`, "num_hidden_layers: -8 is below the minimum 1"},
		{`"hidden_size": 64`, `"hidden_size": 1e12`, "hidden_size: 1000000000000 is above the limit"},
		{`"bits": 4,`, `"bits": 7,`, "quantization.bits: 7 is not supported"},
	} {
		doc := strings.Replace(string(base), tc.from, tc.to, 1)
		if doc == string(base) {
			t.Fatalf("edit %q not applied", tc.from)
		}
		_, err := ParseConfig([]byte(doc), "config.json")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "config.json: ") || !errors.Is(err, modelconfig.ErrConfig) {
			t.Errorf("%s: err %v, want one naming config.json and containing %q", tc.to, err, tc.want)
		}
	}
	if _, err := ParseConfig(bytes.Repeat([]byte(" "), maxConfigSize+1), "config.json"); err == nil {
		t.Error("oversized config accepted")
	}
	// Layer kinds from the interval when there is no list; an override of
	// false leaves the module unquantized.
	doc := strings.Replace(string(base), `"full_attention_interval": 4`, `"full_attention_interval": 3`, 1)
	doc = strings.Replace(doc, `"model.layers.0.mlp.gate": {
      "bits": 8,
      "group_size": 64
    }`, `"model.layers.0.mlp.gate": false`, 1)
	c, err := ParseConfig([]byte(doc), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, false, true, true, false, true, true}; fmt.Sprint(c.Linear) != fmt.Sprint(want) {
		t.Errorf("linear %v, want %v", c.Linear, want)
	}
	if b, g := c.quantFor("model.layers.0.mlp.gate"); b != 0 || g != 0 {
		t.Errorf("unquantized override gives %d/%d", b, g)
	}
	if b, g := c.quantFor("layers.1.mlp.gate"); b != 8 || g != 64 {
		t.Errorf("override without the model. prefix gives %d/%d", b, g)
	}
}
