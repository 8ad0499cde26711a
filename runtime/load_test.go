package runtime_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/synthetic"
)

func gen(t testing.TB, d synthetic.Dims, seed uint64) *synthetic.Model {
	t.Helper()
	g, err := synthetic.Generate(d, seed)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func logitsOf(t testing.TB, m *runtime.Model) []float32 {
	t.Helper()
	return fullLogits(t, m, testTokens)
}

// A checkpoint directory (single file or sharded) and the .qpack made from
// it load to models that give bit-identical logits, equal to the in-memory
// model's; experts are read with one pread per section (checkpoint) or one
// per blob (container).
func TestLoadCheckpointAndContainer(t *testing.T) {
	for _, d := range []synthetic.Dims{
		tinyDims(runtime.TypeQwen3Next, 4, 64),
		tinyDims(runtime.TypeQwen35MoE, 0, 0),
		tinyDims(runtime.TypeQwen35MoE, 8, 32),
	} {
		t.Run(name(d), func(t *testing.T) {
			g := gen(t, d, 3)
			mem, err := g.Build(nil)
			if err != nil {
				t.Fatal(err)
			}
			want := logitsOf(t, mem)
			tmp := t.TempDir()
			for _, shards := range []int{1, 3} {
				dir := filepath.Join(tmp, "ck"+string(rune('0'+shards)))
				if err := g.WriteCheckpoint(dir, shards); err != nil {
					t.Fatal(err)
				}
				m, err := runtime.Load(dir, &runtime.LoadOptions{ExpertCacheBytes: -1})
				if err != nil {
					t.Fatal(err)
				}
				if diff := maxAbsDiff(logitsOf(t, m), want); diff != 0 {
					t.Fatalf("checkpoint (%d shards) logits differ from the in-memory model by %g", shards, diff)
				}
				st := m.Experts.(*runtime.ExpertCache).Stats()
				perExpert := int64(3)
				if d.Bits > 0 {
					perExpert = 9
				}
				if st.Misses == 0 || st.Hits != 0 || st.Reads != perExpert*st.Misses {
					t.Fatalf("checkpoint expert reads: %+v, want %d preads per expert", st, perExpert)
				}
				m.Close()
			}
			qp := filepath.Join(tmp, "model.qpack")
			if err := g.WriteContainer(qp); err != nil {
				t.Fatal(err)
			}
			if !runtime.IsContainer(qp) {
				t.Fatal("container not detected")
			}
			m, err := runtime.Load(qp, &runtime.LoadOptions{ExpertCacheBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if diff := maxAbsDiff(logitsOf(t, m), want); diff != 0 {
				t.Fatalf(".qpack logits differ from the checkpoint's by %g", diff)
			}
			st := m.Experts.(*runtime.ExpertCache).Stats()
			if st.Misses == 0 || st.Reads != st.Misses {
				t.Fatalf("container expert reads: %+v, want one pread per expert", st)
			}
			// With a cache, a second pass hits.
			m2, err := runtime.Load(qp, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m2.Close()
			logitsOf(t, m2)
			logitsOf(t, m2)
			st = m2.Experts.(*runtime.ExpertCache).Stats()
			if st.Hits == 0 || st.Misses > int64(d.Layers*d.Experts) {
				t.Fatalf("cached container: %+v", st)
			}
		})
	}
}

func writeTiny(t *testing.T, d synthetic.Dims, edit func(dir string)) error {
	t.Helper()
	dir := t.TempDir()
	if err := gen(t, d, 5).WriteCheckpoint(dir, 1); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(dir)
	}
	m, err := runtime.Load(dir, nil)
	if err == nil {
		m.Close()
	}
	return err
}

func editConfig(t *testing.T, from, to string) func(string) {
	return func(dir string) {
		p := filepath.Join(dir, "config.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(b), from, to, 1)
		if s == string(b) {
			t.Fatalf("config edit %q not applied", from)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	q4 := tinyDims(runtime.TypeQwen3Next, 4, 64)
	// Global bits disagree with the stored shapes: the cross-check names the tensor.
	err := writeTiny(t, q4, editConfig(t, `"bits": 4,`, `"bits": 8,`))
	if err == nil || !strings.Contains(err.Error(), "mlp.switch_mlp.gate_proj.weight: config says 8 bits group 64") ||
		!strings.Contains(err.Error(), "implies 4 bits") {
		t.Fatalf("bits mismatch: %v", err)
	}
	err = writeTiny(t, q4, editConfig(t, `"mode": "affine"`, `"mode": "mxfp4"`))
	if err == nil || !strings.Contains(err.Error(), `mode "mxfp4" is not supported`) {
		t.Fatalf("mode: %v", err)
	}
	// A per-module override with the wrong bits names that module's tensor.
	err = writeTiny(t, q4, editConfig(t, `"model.layers.2.mlp.gate": {
      "bits": 8,`, `"model.layers.2.mlp.gate": {
      "bits": 4,`))
	if err == nil || !strings.Contains(err.Error(), "model.layers.2.mlp.gate.weight: config says 4 bits") {
		t.Fatalf("override mismatch: %v", err)
	}
	// Quantized tensors but no quantization in config.
	err = writeTiny(t, q4, func(dir string) {
		editConfig(t, `"quantization"`, `"quantization_x"`)(dir)
		editConfig(t, `"quantization_config"`, `"quantization_y"`)(dir)
	})
	if err == nil || !strings.Contains(err.Error(), "declares no quantization") {
		t.Fatalf("no quantization: %v", err)
	}
	// Shape disagreement with the config.
	err = writeTiny(t, tinyDims(runtime.TypeQwen35MoE, 0, 0), editConfig(t, `"vocab_size": 384`, `"vocab_size": 385`))
	if err == nil || !strings.Contains(err.Error(), "language_model.model.embed_tokens.weight: shape [384, 64], want [385, 64]") {
		t.Fatalf("shape: %v", err)
	}
	err = writeTiny(t, tinyDims(runtime.TypeQwen35MoE, 0, 0), editConfig(t, `"num_experts": 8`, `"num_experts": 16`))
	if err == nil || !strings.Contains(err.Error(), "mlp.switch_mlp.gate_proj.weight: shape [8, 64, 64], want [16, ...]") {
		t.Fatalf("experts: %v", err)
	}
}

func TestForwardErrors(t *testing.T) {
	m := mustModel(t, tinyDims(runtime.TypeQwen35MoE, 0, 0), 1)
	if _, err := m.Forward(m.NewState(), []int{1, 384}, nil); err == nil || !strings.Contains(err.Error(), "token 384 at index 1 out of range") {
		t.Fatalf("token range: %v", err)
	}
	if _, err := m.Forward(m.NewState(), nil, nil); err == nil {
		t.Fatal("empty chunk accepted")
	}
	other := mustModel(t, tinyDims(runtime.TypeQwen35MoE, 0, 0), 1)
	if _, err := m.Forward(other.NewState(), []int{1}, nil); err == nil {
		t.Fatal("foreign state accepted")
	}
}

// Tied embeddings: without lm_head the embedding matrix is the head, which
// is what an untied model whose lm_head holds the same bytes computes.
func TestTiedEmbeddings(t *testing.T) {
	for _, bits := range []int{0, 4} {
		d := tinyDims(runtime.TypeQwen35MoE, bits, 32)
		d.Tied = true
		g := gen(t, d, 9)
		if _, ok := g.Tensors["language_model.lm_head.weight"]; ok {
			t.Fatal("tied model has an lm_head")
		}
		tied, err := g.Build(nil)
		if err != nil {
			t.Fatal(err)
		}
		untiedCfg := *g.Config
		untiedCfg.TieWordEmbeddings = false
		tensors := runtime.MapTensors{}
		for n, v := range g.Tensors {
			tensors[n] = v
			if rest, ok := strings.CutPrefix(n, "language_model.model.embed_tokens."); ok {
				tensors["language_model.lm_head."+rest] = v
			}
		}
		untied, err := runtime.NewModel(&untiedCfg, tensors, g.Experts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := maxAbsDiff(logitsOf(t, tied), logitsOf(t, untied)); diff != 0 {
			t.Fatalf("bits %d: tied logits differ from the explicit head by %g", bits, diff)
		}
		// Untied without lm_head is an error naming the tensor.
		delete(tensors, "language_model.lm_head.weight")
		if _, err := runtime.NewModel(&untiedCfg, tensors, g.Experts, nil); err == nil ||
			!strings.Contains(err.Error(), "language_model.lm_head.weight missing") {
			t.Fatalf("missing head: %v", err)
		}
	}
}

// Layers listed in mlp_only_layers use a dense MLP; the model still loads
// from a checkpoint and a container and agrees with itself in memory.
func TestDenseMLPLayers(t *testing.T) {
	d := tinyDims(runtime.TypeQwen3Next, 4, 32)
	d.DenseLayers = []int{0, 5}
	g := gen(t, d, 11)
	if g.Config.Sparse[0] || g.Config.Sparse[5] || !g.Config.Sparse[1] {
		t.Fatalf("sparse = %v", g.Config.Sparse)
	}
	mem, err := g.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := logitsOf(t, mem)
	dir := filepath.Join(t.TempDir(), "ck")
	if err := g.WriteCheckpoint(dir, 2); err != nil {
		t.Fatal(err)
	}
	qp := filepath.Join(t.TempDir(), "m.qpack")
	if err := g.WriteContainer(qp); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, qp} {
		m, err := runtime.Load(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := maxAbsDiff(logitsOf(t, m), want); diff != 0 {
			t.Fatalf("%s: logits differ by %g", p, diff)
		}
		if _, err := m.Experts.Expert(0, 1); err == nil || !strings.Contains(err.Error(), "layer has no routed experts") {
			t.Fatalf("expert of a dense layer: %v", err)
		}
		if _, err := m.Experts.Expert(1, 8); err == nil || !strings.Contains(err.Error(), "expert 8 of layer 1: expert out of range [0, 8)") {
			t.Fatalf("expert range: %v", err)
		}
		m.Close()
	}
}
