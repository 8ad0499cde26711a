package synthetic

import (
	"bytes"
	"testing"

	"github.com/qpack-go/qpack/runtime"
)

func TestUniqueTiles(t *testing.T) {
	d := Tiny(runtime.TypeQwen35MoE)
	d.Bits, d.Group, d.Unique = 4, 32, 3
	m, err := Generate(d, 1)
	if err != nil {
		t.Fatal(err)
	}
	up := m.Tensors["language_model.model.layers.0.mlp.switch_mlp.up_proj.weight"]
	if up.Shape[0] != 8 {
		t.Fatalf("shape %v", up.Shape)
	}
	per := len(up.Data) / 8
	slab := func(e int) []byte { return up.Data[e*per : (e+1)*per] }
	if !bytes.Equal(slab(0), slab(3)) || !bytes.Equal(slab(2), slab(5)) || bytes.Equal(slab(0), slab(1)) {
		t.Fatal("experts not tiled from the first 3")
	}
	emb := m.Tensors["language_model.model.embed_tokens.scales"]
	if emb.Shape[0] != 384 || len(emb.Data) != 384*2*2 {
		t.Fatalf("embed scales %v %d", emb.Shape, len(emb.Data))
	}
	// The embedding and the head are drawn whole: no two tokens share a row
	// (tiled rows made the benchmarks' logits repeat every Unique entries).
	for _, name := range []string{"language_model.model.embed_tokens.weight", "language_model.lm_head.weight"} {
		w, ok := m.Tensors[name]
		if !ok {
			continue // a tied head
		}
		row := len(w.Data) / int(w.Shape[0])
		if bytes.Equal(w.Data[0:row], w.Data[3*row:4*row]) || bytes.Equal(w.Data[row:2*row], w.Data[4*row:5*row]) {
			t.Fatalf("%s: rows repeat every %d", name, d.Unique)
		}
	}
	if _, err := m.Build(nil); err != nil {
		t.Fatal(err)
	}
}
