package tinymodel

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/safetensors"
)

// The committed copies in testdata/tiny must be exactly what the generator
// makes: same file list, same bytes.
func TestCommittedCopiesMatchGenerator(t *testing.T) {
	root := generatedVariants(t)
	for _, v := range Variants() {
		t.Run(v.Name, func(t *testing.T) {
			gen := filepath.Join(root, v.Name)
			com := filepath.Join(committedDir, v.Name)
			gl, cl := listFiles(t, gen), listFiles(t, com)
			if !slices.Equal(gl, cl) {
				t.Fatalf("files differ:\n generated %v\n committed %v\n(regenerate: go run ./internal/tinymodel/cmd/gentiny -out testdata/tiny)", gl, cl)
			}
			for _, f := range gl {
				a, err := os.ReadFile(filepath.Join(gen, f))
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(com, f))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(a, b) {
					t.Errorf("%s/%s differs from the generator's output (%d vs %d bytes)", v.Name, f, len(b), len(a))
				}
			}
		})
	}
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// Generating twice gives the same bytes (in particular the map-ordered BPE
// trainer and JSON writers are deterministic).
func TestGenerateDeterministic(t *testing.T) {
	v := Variants()[4] // sharded, quantized
	a, b := t.TempDir(), t.TempDir()
	if err := Generate(a, v.Spec); err != nil {
		t.Fatal(err)
	}
	if err := Generate(b, v.Spec); err != nil {
		t.Fatal(err)
	}
	for _, f := range listFiles(t, a) {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, err := os.ReadFile(filepath.Join(b, f))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs between two runs (%v)", f, err)
		}
	}
}

// Expected names and shapes, written out from model-math.md 2.1/2.2 and the
// TINY.md dims (H=64, Kd=32, Vd=64, C=128, Nv=4, heads 4x16, kv 2x16, E=8,
// I=Is=64, V=384), not from the generator.
func expectedFloatShapes(arch string) map[string][]int64 {
	body, head := "model.", "lm_head"
	if arch == ArchQwen35MoE {
		body, head = "language_model.model.", "language_model.lm_head"
	}
	m := map[string][]int64{
		body + "embed_tokens.weight": {384, 64},
		head + ".weight":             {384, 64},
		body + "norm.weight":         {64},
	}
	for l := range 8 {
		p := fmt.Sprintf("%slayers.%d.", body, l)
		m[p+"input_layernorm.weight"] = []int64{64}
		m[p+"post_attention_layernorm.weight"] = []int64{64}
		if l == 3 || l == 7 {
			m[p+"self_attn.q_proj.weight"] = []int64{128, 64}
			m[p+"self_attn.k_proj.weight"] = []int64{32, 64}
			m[p+"self_attn.v_proj.weight"] = []int64{32, 64}
			m[p+"self_attn.o_proj.weight"] = []int64{64, 64}
			m[p+"self_attn.q_norm.weight"] = []int64{16}
			m[p+"self_attn.k_norm.weight"] = []int64{16}
		} else {
			a := p + "linear_attn."
			if arch == ArchQwen3Next {
				m[a+"in_proj_qkvz.weight"] = []int64{192, 64}
				m[a+"in_proj_ba.weight"] = []int64{8, 64}
			} else {
				m[a+"in_proj_qkv.weight"] = []int64{128, 64}
				m[a+"in_proj_z.weight"] = []int64{64, 64}
				m[a+"in_proj_b.weight"] = []int64{4, 64}
				m[a+"in_proj_a.weight"] = []int64{4, 64}
			}
			m[a+"conv1d.weight"] = []int64{128, 4, 1}
			m[a+"A_log"] = []int64{4}
			m[a+"dt_bias"] = []int64{4}
			m[a+"norm.weight"] = []int64{16}
			m[a+"out_proj.weight"] = []int64{64, 64}
		}
		m[p+"mlp.gate.weight"] = []int64{8, 64}
		m[p+"mlp.shared_expert_gate.weight"] = []int64{1, 64}
		m[p+"mlp.shared_expert.gate_proj.weight"] = []int64{64, 64}
		m[p+"mlp.shared_expert.up_proj.weight"] = []int64{64, 64}
		m[p+"mlp.shared_expert.down_proj.weight"] = []int64{64, 64}
		m[p+"mlp.switch_mlp.gate_proj.weight"] = []int64{8, 64, 64}
		m[p+"mlp.switch_mlp.up_proj.weight"] = []int64{8, 64, 64}
		m[p+"mlp.switch_mlp.down_proj.weight"] = []int64{8, 64, 64}
	}
	return m
}

func TestFloatInventory(t *testing.T) {
	root := generatedVariants(t)
	for _, tc := range []struct {
		variant, arch string
		count         int
	}{
		{"qwen3_next-f32", ArchQwen3Next, 6*17 + 2*16 + 3},
		{"qwen3_5_moe-f32", ArchQwen35MoE, 6*19 + 2*16 + 3},
	} {
		t.Run(tc.variant, func(t *testing.T) {
			k := openCkpt(t, filepath.Join(root, tc.variant))
			want := expectedFloatShapes(tc.arch)
			if len(want) != tc.count {
				t.Fatalf("test table has %d tensors, expected %d", len(want), tc.count)
			}
			names := k.c.Names()
			if len(names) != len(want) {
				t.Errorf("%d tensors, want %d", len(names), len(want))
			}
			for _, n := range names {
				tn, _ := k.tensor(n)
				w, ok := want[n]
				switch {
				case !ok:
					t.Errorf("unexpected tensor %s", n)
				case !sameShape(tn.Shape, w...):
					t.Errorf("%s: shape %v, want %v", n, tn.Shape, w)
				case tn.DType != safetensors.F32:
					t.Errorf("%s: dtype %s, want F32", n, tn.DType)
				}
			}
			if md := k.c.Shards[0].Header.Metadata; md["format"] != "mlx" {
				t.Errorf("metadata %v, want format=mlx", md)
			}
		})
	}
}

func meanStd(v []float64) (mean, std float64) {
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	for _, x := range v {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(v)))
}

// The value distributions the brief asks for.
func TestFloatDistributions(t *testing.T) {
	root := generatedVariants(t)
	k := openCkpt(t, filepath.Join(root, "qwen3_next-f32"))
	check := func(name string, wantMean, wantStd, tol float64) {
		t.Helper()
		_, v := k.floats(name)
		m, s := meanStd(v)
		if math.Abs(m-wantMean) > tol || math.Abs(s-wantStd) > tol*3 {
			t.Errorf("%s: mean %.4f std %.4f, want about %.3f / %.3f", name, m, s, wantMean, wantStd)
		}
	}
	check("model.embed_tokens.weight", 0, 0.08, 0.005)
	check("model.layers.0.mlp.switch_mlp.down_proj.weight", 0, 0.08, 0.003)
	check("model.layers.0.linear_attn.in_proj_qkvz.weight", 0, 0.08, 0.005)
	check("model.layers.3.self_attn.q_proj.weight", 0, 0.08, 0.005)
	check("model.layers.0.linear_attn.conv1d.weight", 0, 0.3, 0.05)
	check("model.layers.0.mlp.gate.weight", 0, 0.25, 0.05)

	// Zero-centred norms are stored as 1+w, w ~ N(0, 0.2): all random, none 1.
	var norms []float64
	for _, n := range k.c.Names() {
		if strings.HasSuffix(n, "layernorm.weight") || strings.HasSuffix(n, "_norm.weight") || n == "model.norm.weight" || strings.HasSuffix(n, "linear_attn.norm.weight") {
			_, v := k.floats(n)
			for _, x := range v {
				if x == 1 {
					t.Errorf("%s holds an exact 1", n)
				}
			}
			norms = append(norms, v...)
		}
	}
	if m, s := meanStd(norms); math.Abs(m-1) > 0.02 || math.Abs(s-0.2) > 0.02 {
		t.Errorf("norm weights: mean %.3f std %.3f, want 1 / 0.2", m, s)
	}
	for l := range 8 {
		if l == 3 || l == 7 {
			continue
		}
		p := fmt.Sprintf("model.layers.%d.linear_attn.", l)
		_, alog := k.floats(p + "A_log")
		for _, a := range alog {
			if a < 0 || a >= math.Log(16) {
				t.Errorf("%sA_log %v outside [log 1, log 16)", p, a)
			}
		}
		_, dt := k.floats(p + "dt_bias")
		for _, x := range dt {
			if x < 0 || x >= 1 {
				t.Errorf("%sdt_bias %v outside [0, 1)", p, x)
			}
		}
	}
	// The two architectures do not share weights.
	k2 := openCkpt(t, filepath.Join(root, "qwen3_5_moe-f32"))
	_, a := k.floats("model.norm.weight")
	_, b := k2.floats("language_model.model.norm.weight")
	if slices.Equal(a, b) {
		t.Error("qwen3_next and qwen3_5_moe have identical final norms")
	}
}

func TestSplitShards(t *testing.T) {
	for _, tc := range []struct {
		sizes []int64
		n     int
		want  []int
	}{
		{[]int64{10, 10, 10, 10}, 2, []int{0, 2}},
		{[]int64{10, 10, 10, 10}, 4, []int{0, 1, 2, 3}},
		{[]int64{100, 1, 1, 1}, 2, []int{0, 1}},
		{[]int64{1, 1, 1, 100}, 2, []int{0, 3}},
		{[]int64{1, 1, 1, 100}, 3, []int{0, 2, 3}},
		{[]int64{5, 5, 5, 5, 5, 5}, 3, []int{0, 2, 4}},
	} {
		got, err := splitShards(tc.sizes, tc.n)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("splitShards(%v, %d) = %v, %v; want %v", tc.sizes, tc.n, got, err, tc.want)
		}
	}
	if _, err := splitShards([]int64{1, 2}, 3); err == nil {
		t.Error("3 shards of 2 tensors: no error")
	}
}

func TestShardedIndex(t *testing.T) {
	root := generatedVariants(t)
	for _, v := range Variants() {
		if v.Spec.Shards < 2 {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			dir := filepath.Join(root, v.Name)
			var ix struct {
				Metadata  map[string]int64  `json:"metadata"`
				WeightMap map[string]string `json:"weight_map"`
			}
			readJSON(t, filepath.Join(dir, IndexFile), &ix)
			var total int64
			files := map[string]int{}
			for i := range v.Spec.Shards {
				name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, v.Spec.Shards)
				h, err := safetensors.ReadFileHeader(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if h.Metadata["format"] != "mlx" {
					t.Errorf("%s: metadata %v", name, h.Metadata)
				}
				files[name] = len(h.Tensors)
				total += h.DataSize()
				for _, tn := range h.Tensors {
					if ix.WeightMap[tn.Name] != name {
						t.Errorf("weight_map[%s] = %q, want %s", tn.Name, ix.WeightMap[tn.Name], name)
					}
				}
			}
			if ix.Metadata["total_size"] != total {
				t.Errorf("total_size %d, shards hold %d", ix.Metadata["total_size"], total)
			}
			n := 0
			for _, c := range files {
				n += c
			}
			if n != len(ix.WeightMap) {
				t.Errorf("weight_map has %d entries, shards %d tensors", len(ix.WeightMap), n)
			}
			// Roughly equal: no shard under a third of the average.
			for name := range files {
				st, _ := os.Stat(filepath.Join(dir, name))
				if avg := total / int64(v.Spec.Shards); st.Size() < avg/3 {
					t.Errorf("%s: %d bytes, average %d", name, st.Size(), avg)
				}
			}
			k := openCkpt(t, dir) // cross-checks index and headers
			if len(k.c.Shards) != v.Spec.Shards {
				t.Errorf("%d shards, want %d", len(k.c.Shards), v.Spec.Shards)
			}
		})
	}
}

func TestSpecValidation(t *testing.T) {
	d := DefaultDims()
	d.VocabSize = 300
	d2 := DefaultDims()
	d2.PartialRotaryFactor = 0.3
	d3 := DefaultDims()
	d3.LinearNumValueHeads = 3
	for _, tc := range []struct {
		s    Spec
		want string
	}{
		{Spec{Arch: "llama"}, "unknown arch"},
		{Spec{Arch: ArchQwen3Next, Bits: 7, GroupSize: 64}, "bits 7"},
		{Spec{Arch: ArchQwen3Next, Bits: 4, GroupSize: 48}, "group size 48"},
		{Spec{Arch: ArchQwen3Next, GroupSize: 64}, "float checkpoint"},
		{Spec{Arch: ArchQwen3Next, Shards: -1}, "shard count"},
		{Spec{Arch: ArchQwen3Next, Dims: &d}, "vocab_size 300"},
		{Spec{Arch: ArchQwen3Next, Dims: &d2}, "partial_rotary_factor"},
		{Spec{Arch: ArchQwen3Next, Dims: &d3}, "linear_num_value_heads 3"},
		{Spec{Arch: ArchQwen3Next, Shards: 99999}, "shard count"},
	} {
		err := Generate(t.TempDir(), tc.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.s, err, tc.want)
		}
	}
}

// Other shapes: a larger hidden size with group 128, and a dims override
// that changes the layer pattern, reach the files and config.json.
func TestDimsOverride(t *testing.T) {
	d := DefaultDims()
	d.HiddenSize = 128
	d.NumHiddenLayers = 3
	d.FullAttentionInterval = 2
	d.MoeIntermediateSize = 128
	dir := t.TempDir()
	if err := Generate(dir, Spec{Arch: ArchQwen35MoE, Bits: 3, GroupSize: 128, Shards: 2, Seed: 7, Dims: &d}); err != nil {
		t.Fatal(err)
	}
	k := openCkpt(t, dir)
	tn, _ := k.tensor("language_model.model.layers.1.self_attn.q_proj.weight")
	if !sameShape(tn.Shape, 128, 128*3/32) || tn.DType != safetensors.U32 {
		t.Errorf("q_proj weight %s %v", tn.DType, tn.Shape)
	}
	tn, _ = k.tensor("language_model.model.layers.2.mlp.switch_mlp.down_proj.scales")
	if !sameShape(tn.Shape, 8, 128, 1) {
		t.Errorf("down_proj scales %v", tn.Shape)
	}
	if _, _, ok := k.c.Lookup("language_model.model.layers.3.input_layernorm.weight"); ok {
		t.Error("layer 3 exists in a 3-layer model")
	}
	var cfg struct {
		TextConfig struct {
			HiddenSize int      `json:"hidden_size"`
			LayerTypes []string `json:"layer_types"`
			Rope       struct {
				Section []int `json:"mrope_section"`
			} `json:"rope_parameters"`
		} `json:"text_config"`
	}
	readJSON(t, filepath.Join(dir, "config.json"), &cfg)
	if cfg.TextConfig.HiddenSize != 128 || !slices.Equal(cfg.TextConfig.LayerTypes, []string{"linear_attention", "full_attention", "linear_attention"}) {
		t.Errorf("config %+v", cfg.TextConfig)
	}
	if !slices.Equal(cfg.TextConfig.Rope.Section, []int{1, 1, 0}) {
		t.Errorf("mrope_section %v", cfg.TextConfig.Rope.Section)
	}
}

func TestMropeSection(t *testing.T) {
	for half, want := range map[int][]int{32: {11, 11, 10}, 2: {1, 1, 0}, 3: {1, 1, 1}, 8: {3, 3, 2}} {
		if got := mropeSection(half); !slices.Equal(got, want) {
			t.Errorf("mropeSection(%d) = %v, want %v", half, got, want)
		}
	}
}

// Regenerating into a directory that held a different shard set leaves no
// stale shard behind.
func TestGenerateRemovesStaleShards(t *testing.T) {
	dir := t.TempDir()
	if err := Generate(dir, Spec{Arch: ArchQwen3Next, Bits: 4, GroupSize: 64, Shards: 3, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := Generate(dir, Spec{Arch: ArchQwen3Next, Bits: 4, GroupSize: 64, Shards: 1, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	got := listFiles(t, dir)
	want := []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
	if !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
}
