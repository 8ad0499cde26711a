package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/internal/tinymodel"
	"github.com/qpack-go/qpack/safetensors"
)

// The committed Gemma 4 checkpoints repack, verify deeply against their
// source and inspect from the CLI: the routed experts packed, the 8-bit
// router and every other tensor copied as it is, the vision and audio
// towers skipped and reported.
func TestGemma4RepackVerifyInspect(t *testing.T) {
	for _, v := range tinymodel.Gemma4Variants() {
		t.Run(v.Name, func(t *testing.T) {
			src := filepath.Join("..", "..", "testdata", "tiny", v.Name)
			out := filepath.Join(t.TempDir(), v.Name+".qpack")

			stdout, stderr, code := runMain(t, "repack", "--from-dir", src, "--output", out, "--json", "--reserve", "-1")
			if code != 0 {
				t.Fatalf("repack: exit %d: %s", code, stderr)
			}
			var rep struct {
				Skipped []struct{ Name, Reason string } `json:"skipped_tensors"`
			}
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatalf("repack --json: %v\n%s", err, stdout)
			}
			var skipped []string
			for _, s := range rep.Skipped {
				skipped = append(skipped, s.Name)
				if !strings.Contains(s.Reason, "vision") && !strings.Contains(s.Reason, "audio") {
					t.Errorf("skipped %s: reason %q", s.Name, s.Reason)
				}
			}
			if v.Spec.Towers {
				for _, p := range []string{"vision_tower.", "embed_vision.", "audio_tower.", "embed_audio."} {
					if !slices.ContainsFunc(skipped, func(n string) bool { return strings.HasPrefix(n, p) }) {
						t.Errorf("no %s* tensor reported skipped: %v", p, skipped)
					}
				}
			} else if len(skipped) != 0 {
				t.Errorf("skipped %v", skipped)
			}

			checkGemma4Dense(t, src, out, v.Spec)

			_, stderr, code = runMain(t, "verify-install", "--deep", "--source", src, out)
			if code != 0 {
				t.Fatalf("verify-install --deep: exit %d: %s", code, stderr)
			}

			for _, target := range []string{src, out} {
				checkGemma4Inspect(t, target, v.Spec)
			}
		})
	}
}

// checkGemma4Inspect: inspect --json of a Gemma 4 checkpoint or container
// reports its experts, each layer's attention kind and the 8-bit routers.
func checkGemma4Inspect(t *testing.T, target string, s tinymodel.Gemma4Spec) {
	t.Helper()
	d := s.Dims
	stdout, stderr, code := runMain(t, "inspect", "--json", target)
	if code != 0 {
		t.Fatalf("inspect %s: exit %d: %s", target, code, stderr)
	}
	var ins struct {
		ModelType string `json:"model_type"`
		Experts   struct {
			Count, Layers int
		} `json:"experts"`
		Layers []struct{ Kind string } `json:"layers"`
		Quant  *struct {
			ExpertBits int `json:"expert_bits"`
			Overrides  []struct {
				Module string
				Bits   int
			} `json:"overrides"`
		} `json:"quantization"`
	}
	if err := json.Unmarshal([]byte(stdout), &ins); err != nil {
		t.Fatal(err)
	}
	if ins.ModelType != "gemma4" || ins.Experts.Count != d.NumExperts || ins.Experts.Layers != d.NumHiddenLayers || len(ins.Layers) != d.NumHiddenLayers {
		t.Errorf("inspect %s: %s", target, stdout)
	}
	for l, lr := range ins.Layers {
		if lr.Kind != d.LayerTypes[l] {
			t.Errorf("inspect %s: layer %d: kind %q, want %q", target, l, lr.Kind, d.LayerTypes[l])
		}
	}
	if s.Bits != 0 {
		if ins.Quant == nil || ins.Quant.ExpertBits != s.Bits || len(ins.Quant.Overrides) != d.NumHiddenLayers {
			t.Errorf("inspect quantization: %s", stdout)
		} else {
			for _, o := range ins.Quant.Overrides {
				if o.Bits != 8 || !strings.HasSuffix(o.Module, ".router.proj") {
					t.Errorf("override %+v", o)
				}
			}
		}
	}
}

// checkGemma4Dense: the container's model.safetensors holds every source
// tensor that is neither a routed expert nor a tower, with its dtype,
// shape and bytes unchanged (the 8-bit router packed as it came, the
// unquantized modules still float); no switch_glu tensor is left in it.
func checkGemma4Dense(t *testing.T, srcDir, out string, s tinymodel.Gemma4Spec) {
	t.Helper()
	src, err := safetensors.OpenCheckpoint(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	dstPath := filepath.Join(out, "model.safetensors")
	h, err := safetensors.ReadFileHeader(dstPath)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.ReadFile(dstPath)
	if err != nil {
		t.Fatal(err)
	}
	inDst := map[string]bool{}
	for _, tn := range h.Tensors {
		inDst[tn.Name] = true
		if strings.Contains(tn.Name, "switch_glu") {
			t.Errorf("expert tensor %s in model.safetensors", tn.Name)
		}
	}
	want := 0
	for _, name := range src.Names() {
		if strings.Contains(name, ".experts.switch_glu.") || !strings.HasPrefix(name, "language_model.") {
			if inDst[name] {
				t.Errorf("%s copied into model.safetensors", name)
			}
			continue
		}
		want++
		sh, st, _ := src.Lookup(name)
		dt, ok := h.Tensor(name)
		if !ok {
			t.Errorf("%s missing from model.safetensors", name)
			continue
		}
		if dt.DType != st.DType || !slices.Equal(dt.Shape, st.Shape) {
			t.Errorf("%s: %s %v in the container, %s %v in the source", name, dt.DType, dt.Shape, st.DType, st.Shape)
			continue
		}
		f, err := os.Open(sh.Path)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, st.Size)
		_, err = f.ReadAt(b, st.Offset)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, dst[dt.Offset:dt.Offset+dt.Size]) {
			t.Errorf("%s: bytes differ from the source", name)
		}
	}
	if len(h.Tensors) != want {
		t.Errorf("model.safetensors has %d tensors, want %d", len(h.Tensors), want)
	}
	if s.Bits != 0 {
		r, _ := h.Tensor("language_model.model.layers.0.router.proj.weight")
		if r.DType != safetensors.U32 || len(r.Shape) != 2 || r.Shape[1] != int64(s.Dims.HiddenSize*8/32) {
			t.Errorf("router: %s %v, want U32 at 8 bits", r.DType, r.Shape)
		}
	}
}

// A byte flipped in the container's 8-bit router is found by the deep
// verification against the source, naming the tensor, exit 1.
func TestGemma4DeepVerifyNamesRouter(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "tiny", "gemma4-towers-q4g64")
	out := filepath.Join(t.TempDir(), "g.qpack")
	if _, stderr, code := runMain(t, "repack", "--from-dir", src, "--output", out, "--reserve", "-1"); code != 0 {
		t.Fatalf("repack: exit %d: %s", code, stderr)
	}
	path := filepath.Join(out, "model.safetensors")
	h, err := safetensors.ReadFileHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	const name = "language_model.model.layers.2.router.proj.weight"
	tn, ok := h.Tensor(name)
	if !ok {
		t.Fatalf("no %s", name)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[tn.Offset+5] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runMain(t, "verify-install", "--deep", "--source", src, out)
	if code != 1 || !strings.Contains(stdout+stderr, name) {
		t.Fatalf("exit %d, want 1 naming %s:\n%s%s", code, name, stdout, stderr)
	}
}

// A Gemma 4 checkpoint whose config the runner cannot run, or whose
// config its tensors contradict, is refused before anything is written:
// exit 2, the field named.
func TestGemma4RepackRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		edit func(text map[string]any)
		want string
	}{
		{func(x map[string]any) { x["hidden_size_per_layer_input"] = 256 }, "text_config.hidden_size_per_layer_input: 256: per-layer inputs"},
		{func(x map[string]any) { x["num_experts"] = 5 }, "text_config.num_experts"},
		{func(x map[string]any) { x["global_head_dim"] = 32 }, "text_config.global_head_dim"},
		{func(x map[string]any) { delete(x, "enable_moe_block") }, "text_config.enable_moe_block: missing"},
	} {
		src := filepath.Join(t.TempDir(), "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		orig := filepath.Join("..", "..", "testdata", "tiny", "gemma4-towers-q4g64")
		ents, err := os.ReadDir(orig)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(orig, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() == "config.json" {
				var m map[string]any
				if err := json.Unmarshal(b, &m); err != nil {
					t.Fatal(err)
				}
				tc.edit(m["text_config"].(map[string]any))
				if b, err = json.Marshal(m); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(src, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(t.TempDir(), "x.qpack")
		_, stderr, code := runMain(t, "repack", "--from-dir", src, "--output", out, "--reserve", "-1")
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("exit %d, want 2 with %q:\n%s", code, tc.want, stderr)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", out, err)
		}
	}
}

// From the (fake) Hub the sharded 4-bit Gemma 4 repacks to the same
// container as from its directory, and verifies deeply against the Hub
// repository the manifest records.
func TestGemma4RepackFromHub(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "tiny", "gemma4-q4g32")
	hubWith(t, src)
	tmp := t.TempDir()
	a, b := filepath.Join(tmp, "hub.qpack"), filepath.Join(tmp, "dir.qpack")
	if _, stderr, code := runMain(t, "repack", "--from-hf", "org/m", "--output", a, "--reserve", "-1"); code != 0 {
		t.Fatalf("repack --from-hf: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runMain(t, "repack", "--from-dir", src, "--output", b, "--reserve", "-1"); code != 0 {
		t.Fatalf("repack --from-dir: exit %d: %s", code, stderr)
	}
	sameFiles(t, a, b)
	if _, stderr, code := runMain(t, "verify-install", "--deep", a); code != 0 {
		t.Fatalf("verify-install --deep: exit %d: %s", code, stderr)
	}
}
