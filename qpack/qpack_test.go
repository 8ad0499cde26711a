package qpack

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/zeebo/blake3"
)

// A tiny MLX-style 4-bit layout: hidden 64, intermediate 32, group 32.
func tinySpecs() []SectionSpec {
	return []SectionSpec{
		{"gate_proj.weight", "U32", []int64{32, 8}},  // 1024 B
		{"gate_proj.scales", "BF16", []int64{32, 2}}, // 128 B
		{"gate_proj.biases", "BF16", []int64{32, 2}}, // 128 B
		{"up_proj.weight", "U32", []int64{32, 8}},    // 1024 B
		{"up_proj.scales", "BF16", []int64{32, 2}},   // 128 B
		{"up_proj.biases", "BF16", []int64{32, 2}},   // 128 B
		{"down_proj.weight", "U32", []int64{64, 4}},  // 1024 B
		{"down_proj.scales", "BF16", []int64{64, 1}}, // 128 B
		{"down_proj.biases", "BF16", []int64{64, 1}}, // 128 B
	}
}

const tinyPayload = 3 * (1024 + 128 + 128)

func tinyLayout(t *testing.T) *Layout {
	t.Helper()
	l, err := NewLayout(3, 2, []bool{true, false}, tinySpecs())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// expertBytes is the payload the tests write for (layer, expert).
func expertBytes(l, e int) []byte {
	r := rand.New(rand.NewPCG(uint64(l)+1, uint64(e)+100))
	b := make([]byte, tinyPayload)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func b3(data []byte) string {
	s := blake3.Sum256(data)
	return hex.EncodeToString(s[:])
}

// safetensorsBytes builds a safetensors file by hand (independently of the
// safetensors package): 8-byte little-endian header length, JSON, data.
func safetensorsBytes(header string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// swiftFixture describes a container in the form Swiftlet writes it: only
// the required manifest keys, JSON as Swift's JSONEncoder prints it
// (" : " separators, escaped slashes), no "qpack" extension.
type swiftFixture struct {
	manifest string
	layout   string
	files    map[string][]byte
}

const swiftLayout = `{
  "expertCount" : 3,
  "expertStride" : 16384,
  "layerCount" : 2,
  "linearLayers" : [
    true,
    false
  ],
  "sections" : [
    {"dtype" : "U32", "name" : "gate_proj.weight", "offset" : 0, "shape" : [32, 8], "size" : 1024},
    {"dtype" : "BF16", "name" : "gate_proj.scales", "offset" : 1024, "shape" : [32, 2], "size" : 128},
    {"dtype" : "BF16", "name" : "gate_proj.biases", "offset" : 1152, "shape" : [32, 2], "size" : 128},
    {"dtype" : "U32", "name" : "up_proj.weight", "offset" : 1280, "shape" : [32, 8], "size" : 1024},
    {"dtype" : "BF16", "name" : "up_proj.scales", "offset" : 2304, "shape" : [32, 2], "size" : 128},
    {"dtype" : "BF16", "name" : "up_proj.biases", "offset" : 2432, "shape" : [32, 2], "size" : 128},
    {"dtype" : "U32", "name" : "down_proj.weight", "offset" : 2560, "shape" : [64, 4], "size" : 1024},
    {"dtype" : "BF16", "name" : "down_proj.scales", "offset" : 3584, "shape" : [64, 1], "size" : 128},
    {"dtype" : "BF16", "name" : "down_proj.biases", "offset" : 3712, "shape" : [64, 1], "size" : 128}
  ]
}`

func newSwiftFixture() *swiftFixture {
	f := &swiftFixture{layout: swiftLayout, files: map[string][]byte{}}
	f.files["config.json"] = []byte(`{"model_type": "qwen3_next"}` + "\n")
	f.files["tokenizer.json"] = []byte(`{"model": {}}`)
	f.files[DenseName] = safetensorsBytes(
		`{"a.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b.weight":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]}}`,
		[]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14})
	for l := 0; l < 2; l++ {
		blob := make([]byte, 3*16384)
		for e := 0; e < 3; e++ {
			copy(blob[e*16384:], expertBytes(l, e))
		}
		f.files[LayerFile(l)] = blob
	}
	return f
}

// swiftManifest prints the manifest for the fixture's current files.
func (f *swiftFixture) swiftManifest(extra string) string {
	sizes := map[string]int{LayoutName: len(f.layout)}
	for p, b := range f.files {
		sizes[p] = len(b)
	}
	var lines []string
	for _, p := range sortedKeys(sizes) {
		lines = append(lines, fmt.Sprintf("    \"%s\" : %d", strings.ReplaceAll(p, "/", `\/`), sizes[p]))
	}
	return `{
  "files" : {
` + strings.Join(lines, ",\n") + `
  },
  "magic" : "QPACK",
  "modelName" : "qwen3_next",
  "quantBits" : 4,
  "quantGroupSize" : 32,` + extra + `
  "sourceCheckpoint" : "Qwen3-Next-tiny-4bit",
  "version" : 1
}`
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := range out { // insertion sort keeps this helper dependency-free
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// write materializes the fixture in a fresh directory and returns it.
func (f *swiftFixture) write(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny.qpack")
	if f.manifest == "" {
		f.manifest = f.swiftManifest("")
	}
	writeFile(t, filepath.Join(dir, ManifestName), []byte(f.manifest))
	writeFile(t, filepath.Join(dir, filepath.FromSlash(LayoutName)), []byte(f.layout))
	for p, b := range f.files {
		writeFile(t, filepath.Join(dir, filepath.FromSlash(p)), b)
	}
	return dir
}

func TestOpenSwiftletContainer(t *testing.T) {
	fx := newSwiftFixture()
	dir := fx.write(t)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := c.Manifest
	if m.ModelName != "qwen3_next" || m.SourceCheckpoint != "Qwen3-Next-tiny-4bit" || m.Ext != nil {
		t.Errorf("manifest = %+v", m)
	}
	if m.QuantBits == nil || *m.QuantBits != 4 || m.QuantGroupSize == nil || *m.QuantGroupSize != 32 {
		t.Errorf("quant fields = %v %v", m.QuantBits, m.QuantGroupSize)
	}
	if m.Files[LayerFile(1)] != 3*16384 || m.Files["config.json"] != int64(len(fx.files["config.json"])) {
		t.Errorf("files = %v", m.Files)
	}
	want := &Layout{ExpertCount: 3, LayerCount: 2, ExpertStride: 16384, LinearLayers: []bool{true, false}}
	offs := []int64{0, 1024, 1152, 1280, 2304, 2432, 2560, 3584, 3712}
	for i, s := range tinySpecs() {
		size := int64(128)
		if strings.HasSuffix(s.Name, "weight") {
			size = 1024
		}
		want.Sections = append(want.Sections, Section{s.Name, s.DType, s.Shape, offs[i], size})
	}
	if !reflect.DeepEqual(c.Layout, want) {
		t.Errorf("layout =\n%+v\nwant\n%+v", c.Layout, want)
	}
	if len(c.Dense.Tensors) != 2 || c.Dense.Tensors[1].Name != "b.weight" || c.Dense.Tensors[1].Size != 6 {
		t.Errorf("dense = %+v", c.Dense.Tensors)
	}
	buf := make([]byte, 16384)
	for l := 0; l < 2; l++ {
		for e := 0; e < 3; e++ {
			if err := c.ReadExpert(l, e, buf); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:tinyPayload], expertBytes(l, e)) || !allZero(buf[tinyPayload:]) {
				t.Errorf("layer %d expert %d: wrong bytes", l, e)
			}
			s, _ := c.Section("up_proj.scales")
			if !bytes.Equal(s.Slice(buf), expertBytes(l, e)[2304:2432]) {
				t.Errorf("layer %d expert %d: up_proj.scales slice wrong", l, e)
			}
		}
	}
	if off, err := c.ExpertOffset(1, 2); err != nil || off != 2*16384 {
		t.Errorf("ExpertOffset(1,2) = %d, %v", off, err)
	}
	if _, err := c.ExpertOffset(2, 0); err == nil {
		t.Error("ExpertOffset(2,0) on a 2-layer container gave no error")
	}
	if err := c.ReadExpert(0, 3, buf); err == nil {
		t.Error("ReadExpert of expert 3 of 3 gave no error")
	}
	if err := c.ReadExpert(0, 0, buf[:100]); err == nil {
		t.Error("ReadExpert into a short buffer gave no error")
	}
	if extra, err := c.ExtraFiles(); err != nil || len(extra) != 0 {
		t.Errorf("ExtraFiles = %v, %v", extra, err)
	}
	writeFile(t, filepath.Join(dir, "notes", "x.txt"), []byte("x"))
	if extra, err := c.ExtraFiles(); err != nil || len(extra) != 1 || extra[0] != "notes/x.txt" {
		t.Errorf("ExtraFiles = %v, %v", extra, err)
	}
	if got := c.LayerPath(1); got != filepath.Join(dir, "packed_experts", "layer_01.bin") {
		t.Errorf("LayerPath(1) = %s", got)
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func TestLayerFileNames(t *testing.T) {
	for l, want := range map[int]string{0: "packed_experts/layer_00.bin", 7: "packed_experts/layer_07.bin",
		47: "packed_experts/layer_47.bin", 100: "packed_experts/layer_100.bin"} {
		if got := LayerFile(l); got != want {
			t.Errorf("LayerFile(%d) = %s, want %s", l, got, want)
		}
		if n, ok := parseLayerFile(want); !ok || n != l {
			t.Errorf("parseLayerFile(%s) = %d, %v", want, n, ok)
		}
	}
	for _, bad := range []string{"packed_experts/layer_7.bin", "packed_experts/layer_007.bin", "packed_experts/layer_xx.bin", "layer_00.bin"} {
		if _, ok := parseLayerFile(bad); ok {
			t.Errorf("parseLayerFile(%s) accepted", bad)
		}
	}
}

// The worked example of docs/FORMAT.md: Qwen3-Next-80B-A3B at MLX 4-bit,
// group 64 (hidden 2048, moe_intermediate 512, 512 experts, 48 layers).
// Expected numbers are worked out by hand: weight = rows x (cols x 4 / 32)
// u32 words x 4 B, scales and biases = rows x cols/64 x 2 B.
func TestQwen3NextLayout(t *testing.T) {
	specs := []SectionSpec{
		{"gate_proj.weight", "U32", []int64{512, 256}},
		{"gate_proj.scales", "BF16", []int64{512, 32}},
		{"gate_proj.biases", "BF16", []int64{512, 32}},
		{"up_proj.weight", "U32", []int64{512, 256}},
		{"up_proj.scales", "BF16", []int64{512, 32}},
		{"up_proj.biases", "BF16", []int64{512, 32}},
		{"down_proj.weight", "U32", []int64{2048, 64}},
		{"down_proj.scales", "BF16", []int64{2048, 8}},
		{"down_proj.biases", "BF16", []int64{2048, 8}},
	}
	linear := make([]bool, 48)
	for i := range linear {
		linear[i] = (i+1)%4 != 0
	}
	l, err := NewLayout(512, 48, linear, specs)
	if err != nil {
		t.Fatal(err)
	}
	wantOff := []int64{0, 524288, 557056, 589824, 1114112, 1146880, 1179648, 1703936, 1736704}
	wantSize := []int64{524288, 32768, 32768, 524288, 32768, 32768, 524288, 32768, 32768}
	for i, s := range l.Sections {
		if s.Offset != wantOff[i] || s.Size != wantSize[i] {
			t.Errorf("%s: offset %d size %d, want %d %d", s.Name, s.Offset, s.Size, wantOff[i], wantSize[i])
		}
	}
	if l.Payload() != 1769472 || l.ExpertStride != 108*16384 {
		t.Errorf("payload %d stride %d, want 1769472 both", l.Payload(), l.ExpertStride)
	}
	if l.LayerSize() != 905969664 {
		t.Errorf("layer size %d, want 905969664", l.LayerSize())
	}
}

func TestNewLayoutStrideRounding(t *testing.T) {
	specs := []SectionSpec{
		{"gate_proj.weight", "U8", []int64{16385}},
		{"up_proj.weight", "U8", []int64{1}},
		{"down_proj.weight", "U8", []int64{1}},
	}
	l, err := NewLayout(1, 1, []bool{false}, specs)
	if err != nil {
		t.Fatal(err)
	}
	if l.Payload() != 16387 || l.ExpertStride != 32768 {
		t.Errorf("payload %d stride %d, want 16387 32768", l.Payload(), l.ExpertStride)
	}
	// A float checkpoint: weights only.
	specs = []SectionSpec{
		{"gate_proj.weight", "BF16", []int64{8, 8}},
		{"up_proj.weight", "BF16", []int64{8, 8}},
		{"down_proj.weight", "BF16", []int64{8, 8}},
	}
	if l, err = NewLayout(2, 1, []bool{false}, specs); err != nil || l.ExpertStride != 16384 || l.Sections[2].Offset != 256 {
		t.Errorf("float layout: %+v, %v", l, err)
	}
}

func TestNewLayoutErrors(t *testing.T) {
	good := tinySpecs()
	cases := []struct {
		name   string
		e, l   int
		linear []bool
		specs  []SectionSpec
		want   string
	}{
		{"no sections", 3, 2, []bool{false, false}, nil, "sections: empty"},
		{"linear length", 3, 2, []bool{false}, good, "linearLayers"},
		{"zero experts", 0, 2, []bool{false, false}, good, "expertCount"},
		{"too many layers", 3, 1025, make([]bool, 1025), good, "layerCount"},
		{"unknown dtype", 3, 1, []bool{false}, []SectionSpec{{"gate_proj.weight", "Q4", []int64{1}}, good[3], good[6]}, "unknown dtype"},
		{"sub-byte dtype", 3, 1, []bool{false}, []SectionSpec{{"gate_proj.weight", "F4", []int64{2}}, good[3], good[6]}, "sub-byte"},
		{"wrong order", 3, 1, []bool{false}, []SectionSpec{good[3], good[0], good[6]}, "out of order"},
		{"unknown name", 3, 1, []bool{false}, []SectionSpec{good[0], {"gate_proj.bias", "BF16", []int64{1}}, good[3], good[6]}, "unknown section name"},
		{"missing down", 3, 1, []bool{false}, []SectionSpec{good[0], good[3]}, "no down_proj.weight"},
		{"zero dim", 3, 1, []bool{false}, []SectionSpec{{"gate_proj.weight", "U32", []int64{0, 4}}, good[3], good[6]}, "positive"},
		{"overflow", 3, 1, []bool{false}, []SectionSpec{{"gate_proj.weight", "U32", []int64{1 << 31, 1 << 31, 1 << 2}}, good[3], good[6]}, "overflows"},
		{"layer size overflow", 65536, 1, []bool{false}, []SectionSpec{{"gate_proj.weight", "U8", []int64{1 << 50}}, good[3], good[6]}, "overflows"},
	}
	for _, c := range cases {
		_, err := NewLayout(c.e, c.l, c.linear, c.specs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}
