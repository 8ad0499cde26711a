package synthetic

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/qpack-go/qpack/modelconfig"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/runner"
)

// Gemma26B at 30 layers and the real vocab parses to what the reconstructed
// config of the real model parses to.
func TestGemma26BMatchesRealConfig(t *testing.T) {
	real := filepath.Join("..", "..", "..", "shared", "refdata", "configs", "gemma-4-26b-a4b-it-4bit.MLX.RECONSTRUCTED.config.json")
	data, err := os.ReadFile(real)
	if err != nil {
		t.Skipf("the real config is not here: %v", err)
	}
	want, err := modelconfig.Parse(data, real)
	if err != nil {
		t.Fatal(err)
	}
	got, err := modelconfig.Parse(Gemma26B(30, 262144).ConfigJSON(), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		a, b any
	}{
		{"hidden", got.Hidden, want.Hidden}, {"layers", got.Layers, want.Layers}, {"vocab", got.Vocab, want.Vocab},
		{"experts", got.Experts, want.Experts}, {"top-k", got.TopK, want.TopK},
		{"moe intermediate", got.MoEIntermediate, want.MoEIntermediate}, {"intermediate", got.Intermediate, want.Intermediate},
		{"heads", got.Heads, want.Heads}, {"kv heads", got.KVHeads, want.KVHeads}, {"head dim", got.HeadDim, want.HeadDim},
		{"quant", got.Quant, want.Quant}, {"gemma4", got.Extra, want.Extra}, {"tied", got.TieWordEmbeddings, want.TieWordEmbeddings},
	} {
		if !reflect.DeepEqual(f.a, f.b) {
			t.Errorf("%s: synthetic %+v, real %+v", f.name, f.a, f.b)
		}
	}
	// One expert: gate, up [704, 2816] and down [2816, 704] at 4 bits with
	// BF16 scales and biases per 64.
	d := Gemma26B(3, 1)
	mat := func(rows, cols int) int { return rows*cols/2 + 2*2*rows*(cols/64) }
	if got := 2*mat(d.MoEInter, d.Hidden) + mat(d.Hidden, d.MoEInter); got != 3345408 {
		t.Errorf("expert payload %d", got)
	}
	if !reflect.DeepEqual(d.Full, []bool{false, false, true}) {
		t.Errorf("3 layers: full %v", d.Full)
	}
}

// A streamed tiny Gemma 4 container opens, computes finite, varied logits,
// holds every expert (expert e's blob is expert e % Unique's, the others
// differ) and generates through the runner with experts streamed from disk.
func TestStreamGemmaContainer(t *testing.T) {
	d := GemmaTiny()
	d.Unique = 3
	dst := filepath.Join(t.TempDir(), "g.qpack")
	if err := StreamGemmaContainer(dst, d, 7); err != nil {
		t.Fatal(err)
	}
	c, err := qpack.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	stride := c.Layout.ExpertStride
	if c.Layout.ExpertCount != d.Experts || c.Layout.LayerCount != 3 {
		t.Fatalf("layout %+v", c.Layout)
	}
	for l := range 3 {
		b, err := os.ReadFile(c.LayerPath(l))
		if err != nil {
			t.Fatal(err)
		}
		blob := func(e int) []byte { return b[int64(e)*stride : int64(e+1)*stride] }
		if int64(len(b)) < int64(d.Experts)*stride || !bytes.Equal(blob(0), blob(3)) || !bytes.Equal(blob(2), blob(5)) ||
			bytes.Equal(blob(0), blob(1)) || bytes.Equal(blob(0), make([]byte, stride)) {
			t.Fatalf("layer %d: experts not every one written from the first 3", l)
		}
	}
	c.Close()
	m, err := runtime.LoadContainer(dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := m.Forward(m.NewState(), []int{5, 77, 300, 12, 9, 200}, &runtime.ForwardOptions{AllLogits: true})
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, x := range logits {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("logit %d is %g", i, x)
		}
		lo, hi = min(lo, float64(x)), max(hi, float64(x))
	}
	if hi-lo < 1 || hi > 30 || lo < -30 {
		t.Fatalf("logits in [%g, %g]: flat, or past the softcap", lo, hi)
	}
	tok, err := os.ReadFile(filepath.Join("..", "..", "testdata", "tiny", "gemma4-q4g32", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "tokenizer.json"), tok, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := runner.Open(dst, runner.Options{ExpertCache: 2 * stride})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.EOS = nil
	res, err := r.NewSession().Generate(t.Context(), []int{5, 77, 300}, runner.GenOptions{MaxNew: 6})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tokens) != 6 || res.DecodeCache.Misses == 0 {
		t.Fatalf("generated %v, cache %+v", res.Tokens, res.DecodeCache)
	}
}

// StreamContainer writes the container Generate's model writes, byte for
// byte in every layer file and the dense file, without tiling in memory.
func TestStreamContainerMatchesGenerate(t *testing.T) {
	d := Tiny(runtime.TypeQwen35MoE)
	d.Bits, d.Group, d.Unique = 4, 32, 3
	m, err := Generate(d, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.qpack"), filepath.Join(dir, "b.qpack")
	if err := m.WriteContainer(a); err != nil {
		t.Fatal(err)
	}
	if err := StreamContainer(b, d, 1); err != nil {
		t.Fatal(err)
	}
	files := []string{"model.safetensors", "config.json"}
	for l := range d.Layers {
		files = append(files, qpack.LayerFile(l))
	}
	for _, f := range files {
		x, err := os.ReadFile(filepath.Join(a, f))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs (%d and %d bytes)", f, len(x), len(y))
		}
	}
}

// rowBlocks stores every row, drawn block by block: the shape and sizes of
// one matrix, rows past the first block present and distinct.
func TestRowBlocks(t *testing.T) {
	g := gemmaGen(GemmaTiny(), 3)
	rows, cols := 4096+70, 64
	if err := g.rowBlocks("e", rows, cols, 0.1); err != nil {
		t.Fatal(err)
	}
	w, sc := g.tensors["e.weight"], g.tensors["e.scales"]
	if !reflect.DeepEqual(w.Shape, []int64{int64(rows), int64(cols / 8)}) || len(w.Data) != rows*cols/2 ||
		!reflect.DeepEqual(sc.Shape, []int64{int64(rows), 1}) || len(sc.Data) != rows*2 {
		t.Fatalf("weight %v (%d B), scales %v (%d B)", w.Shape, len(w.Data), sc.Shape, len(sc.Data))
	}
	row := func(r int) []byte { return w.Data[r*cols/2 : (r+1)*cols/2] }
	if bytes.Equal(row(0), row(4096)) || bytes.Equal(row(4095), row(rows-1)) || bytes.Equal(row(rows-1), make([]byte, cols/2)) {
		t.Fatal("rows repeat across blocks, or the last is empty")
	}
}
