package tinymodel

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/safetensors"
)

// The committed Gemma 4 copies are exactly what the generator makes.
func TestGemma4CommittedCopiesMatchGenerator(t *testing.T) {
	root := t.TempDir()
	for _, v := range Gemma4Variants() {
		t.Run(v.Name, func(t *testing.T) {
			gen := filepath.Join(root, v.Name)
			if err := GenerateGemma4(gen, v.Spec); err != nil {
				t.Fatal(err)
			}
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

// The inventory of each variant is the MLX gemma4 layout: names, dtypes,
// which modules are quantized at which width.
func TestGemma4Inventory(t *testing.T) {
	for _, v := range Gemma4Variants() {
		t.Run(v.Name, func(t *testing.T) {
			c := openCkpt(t, filepath.Join(committedDir, v.Name))
			d := v.Spec.Dims
			names := map[string]safetensors.Tensor{}
			for _, n := range c.c.Names() {
				_, tn, _ := c.c.Lookup(n)
				names[n] = tn
			}
			const body = "language_model.model."
			want := func(name string, dt safetensors.DType, shape ...int64) {
				t.Helper()
				tn, ok := names[name]
				if !ok {
					t.Errorf("no tensor %s", name)
					return
				}
				if tn.DType != dt || !sameShape(tn.Shape, shape...) {
					t.Errorf("%s: %s %v, want %s %v", name, tn.DType, tn.Shape, dt, shape)
				}
			}
			h, E, I := int64(d.HiddenSize), int64(d.NumExperts), int64(d.MoeIntermediateSize)
			for l := range d.NumHiddenLayers {
				p := fmt.Sprintf("%slayers.%d.", body, l)
				hd, kv, kEqV := d.attn(l)
				_, hasV := names[p+"self_attn.v_proj.weight"]
				if hasV == kEqV {
					t.Errorf("layer %d: v_proj present %v with k_eq_v %v", l, hasV, kEqV)
				}
				if v.Spec.Bits == 0 {
					want(p+"experts.switch_glu.gate_proj.weight", safetensors.F32, E, I, h)
					want(p+"experts.switch_glu.down_proj.weight", safetensors.F32, E, h, I)
					want(p+"router.proj.weight", safetensors.F32, E, h)
					want(p+"self_attn.k_proj.weight", safetensors.F32, int64(kv*hd), h)
					want(p+"layer_scalar", safetensors.F32, 1)
					continue
				}
				b, g := int64(v.Spec.Bits), int64(v.Spec.GroupSize)
				want(p+"experts.switch_glu.up_proj.weight", safetensors.U32, E, I, h*b/32)
				want(p+"experts.switch_glu.up_proj.scales", safetensors.BF16, E, I, h/g)
				want(p+"experts.switch_glu.down_proj.biases", safetensors.BF16, E, h, I/g)
				want(p+"router.proj.weight", safetensors.U32, E, h*8/32)
				want(p+"router.proj.scales", safetensors.BF16, E, h/64)
				want(p+"router.scale", safetensors.BF16, h)
				want(p+"router.per_expert_scale", safetensors.BF16, E)
				want(p+"layer_scalar", safetensors.BF16, 1)
				want(p+"self_attn.q_norm.weight", safetensors.BF16, int64(hd))
				if int64(d.IntermediateSize)%g != 0 {
					want(p+"mlp.down_proj.weight", safetensors.BF16, h, int64(d.IntermediateSize))
					if _, ok := names[p+"mlp.down_proj.scales"]; ok {
						t.Errorf("layer %d: mlp.down_proj quantized with input %d not a multiple of group %d", l, d.IntermediateSize, g)
					}
				}
			}
			if _, ok := names["language_model.lm_head.weight"]; ok {
				t.Error("lm_head present: the embedding is tied")
			}
			towers := 0
			for n := range names {
				if !strings.HasPrefix(n, body) {
					towers++
				}
			}
			if v.Spec.Towers != (towers > 0) {
				t.Errorf("%d tensors outside %s with Towers %v", towers, body, v.Spec.Towers)
			}
		})
	}
}

func TestGemma4SpecValidation(t *testing.T) {
	bad := []Gemma4Spec{
		{Bits: 3, GroupSize: 64, Dims: Gemma4DimsA()},
		{GroupSize: 64, Dims: Gemma4DimsA()},
		{Bits: 4, GroupSize: 32, Dims: Gemma4DimsB()}, // hidden 48: router cannot be 8-bit g64
		{Dims: func() Gemma4Dims { d := Gemma4DimsA(); d.LayerTypes = d.LayerTypes[:2]; return d }()},
		{Dims: func() Gemma4Dims { d := Gemma4DimsA(); d.TopKExperts = 9; return d }()},
		{Dims: func() Gemma4Dims { d := Gemma4DimsA(); d.LayerTypes[0] = "chunked"; return d }()},
	}
	for i, s := range bad {
		if err := GenerateGemma4(t.TempDir(), s); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
}
