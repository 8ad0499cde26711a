package tinymodel

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	nst "github.com/nlpodyssey/safetensors"
)

// TestOracleReadsGeneratedTensors reads the checkpoint Generate writes with
// github.com/nlpodyssey/safetensors (an independent reader; qpack's own
// safetensors package wrote the files) and requires exactly the tensors the
// generator computed: every name, dtype, shape and byte, nothing more, each
// once across the shards.
func TestOracleReadsGeneratedTensors(t *testing.T) {
	for _, v := range Variants() {
		t.Run(v.Name, func(t *testing.T) {
			want, _, err := modelTensors(v.Spec)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := Generate(dir, v.Spec); err != nil {
				t.Fatal(err)
			}
			shards, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
			if err != nil || len(shards) != max(1, v.Spec.Shards) {
				t.Fatalf("%d shards (%v), want %d", len(shards), err, max(1, v.Spec.Shards))
			}
			got := map[string]nst.TensorView{}
			for _, sh := range shards {
				data, err := os.ReadFile(sh)
				if err != nil {
					t.Fatal(err)
				}
				st, err := nst.Deserialize(data)
				if err != nil {
					t.Fatalf("%s: the oracle cannot read it: %v", filepath.Base(sh), err)
				}
				for _, tv := range st.Tensors() {
					if _, dup := got[tv.Name]; dup {
						t.Errorf("tensor %s is in two shards", tv.Name)
					}
					got[tv.Name] = tv.TensorView
				}
			}
			if len(got) != len(want) {
				t.Errorf("the oracle reads %d tensors, the generator made %d", len(got), len(want))
			}
			for _, w := range want {
				g, ok := got[w.spec.Name]
				if !ok {
					t.Errorf("tensor %s is missing", w.spec.Name)
					continue
				}
				shape := make([]int64, len(g.Shape()))
				for i, d := range g.Shape() {
					shape[i] = int64(d)
				}
				if g.DType().String() != string(w.spec.DType) || !slices.Equal(shape, w.spec.Shape) {
					t.Errorf("tensor %s: the oracle reads %s%v, the generator made %s%v", w.spec.Name, g.DType(), shape, w.spec.DType, w.spec.Shape)
				}
				if !bytes.Equal(g.Data(), w.data) {
					t.Errorf("tensor %s: %d bytes differ from the generator's", w.spec.Name, len(w.data))
				}
			}
		})
	}
}
