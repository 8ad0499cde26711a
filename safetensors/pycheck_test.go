package safetensors

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// The Python cross-check (testdata/pycheck/safetensors_roundtrip.py, run
// once with the reference `safetensors` library, output recorded in
// safetensors_roundtrip.out):
//   - qpack_written.safetensors (and qpack_written_e8m0.safetensors, kept
//     apart for Python libraries without F8_E8M0) is written by this package; the Python
//     library read it and compared every value against literals in the
//     script. TestPycheckOursUpToDate keeps it equal to what the writer
//     produces now (regenerate with -update-pycheck, then rerun the script).
//   - python_written.safetensors was written by the Python library;
//     TestPycheckPython reads it and checks every tensor's bytes against bit
//     patterns written out by hand here.

var updatePycheck = flag.Bool("update-pycheck", false, "rewrite ../testdata/pycheck/qpack_written*.safetensors")

const pycheckDir = "../testdata/pycheck"

func le16(v ...uint16) []byte {
	b := make([]byte, 0, 2*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint16(b, x)
	}
	return b
}

func le32(v ...uint32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

func le64(v ...uint64) []byte {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

func f32s(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func f64s(v ...float64) []byte {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

type pyTensor struct {
	spec Spec
	data []byte
}

// ourPycheckTensors are the tensors of qpack_written.safetensors. The
// values the Python script expects are spelled out again there:
// f16/bf16/f8 bit patterns are written by hand.
func ourPycheckTensors() []pyTensor {
	var minI64 int64 = -1
	var minI32 int32 = math.MinInt32
	var i16a, i16b int16 = -32768, 32767
	var i8s = []int8{-128, -1, 0, 127}
	i8b := make([]byte, len(i8s))
	for i, v := range i8s {
		i8b[i] = byte(v)
	}
	return []pyTensor{
		{Spec{"bf16", BF16, []int64{4}}, le16(0x3F80, 0xC000, 0x3F00, 0x4050)}, // 1, -2, 0.5, 3.25
		{Spec{"u8", U8, []int64{2, 2}}, []byte{0, 1, 254, 255}},
		{Spec{"f64", F64, []int64{3}}, f64s(1.5, -2.25, 0.1)},
		{Spec{"empty", F32, []int64{0, 4}}, nil},
		{Spec{"f32", F32, []int64{2, 3}}, f32s(0, 1, -1, 0.5, 3.25, -1024)},
		{Spec{"f16", F16, []int64{4}}, le16(0x3C00, 0xC000, 0x3800, 0x7BFF)}, // 1, -2, 0.5, 65504
		{Spec{"i64", I64, []int64{3}}, le64(uint64(minI64), 1<<40, math.MaxInt64)},
		{Spec{"i32", I32, []int64{3}}, le32(uint32(minI32), 0, 123456)},
		{Spec{"i16", I16, []int64{2}}, le16(uint16(i16a), uint16(i16b))},
		{Spec{"i8", I8, []int64{4}}, i8b},
		{Spec{"u64", U64, []int64{2}}, le64(0, math.MaxUint64)},
		{Spec{"u32", U32, []int64{2}}, le32(0, math.MaxUint32)},
		{Spec{"u16", U16, []int64{2}}, le16(0, 65535)},
		{Spec{"bool", BOOL, []int64{3}}, []byte{1, 0, 1}},
		{Spec{"f8_e4m3", F8E4M3, []int64{4}}, []byte{0x38, 0xC0, 0x30, 0x7E}}, // 1, -2, 0.5, 448
		{Spec{"f8_e5m2", F8E5M2, []int64{4}}, []byte{0x3C, 0xC0, 0x38, 0x42}}, // 1, -2, 0.5, 3
		{Spec{"scalar", F32, []int64{}}, f32s(7.5)},
	}
}

// ourPycheckE8M0Tensors go in a file of their own, so that a Python
// safetensors too old for F8_E8M0 can still check the main file.
func ourPycheckE8M0Tensors() []pyTensor {
	return []pyTensor{
		{Spec{"f8_e8m0", F8E8M0, []int64{3}}, []byte{127, 124, 137}}, // 1, 0.125, 1024
		{Spec{"after", U8, []int64{2}}, []byte{9, 8}},
	}
}

var ourPycheckMetadata = map[string]string{"format": "pt", "producer": "qpack"}

func buildOurPycheckFile(t *testing.T, ts []pyTensor) []byte {
	t.Helper()
	specs := make([]Spec, len(ts))
	for i, x := range ts {
		specs[i] = x.spec
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, specs, ourPycheckMetadata)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		if err := w.WriteTensor(x.spec.Name, bytes.NewReader(x.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPycheckOursUpToDate(t *testing.T) {
	for name, ts := range map[string][]pyTensor{
		"qpack_written.safetensors":      ourPycheckTensors(),
		"qpack_written_e8m0.safetensors": ourPycheckE8M0Tensors(),
	} {
		want := buildOurPycheckFile(t, ts)
		path := filepath.Join(pycheckDir, name)
		if *updatePycheck {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the writer produces now; run go test -run TestPycheckOursUpToDate -update-pycheck and rerun the Python check", path)
		}
	}
}

// pyExpected is what the script asked torch to store, as bytes worked out
// by hand (optional: only if that torch/safetensors supported the dtype).
var pyExpected = []struct {
	name     string
	dtype    DType
	shape    []int64
	data     []byte
	optional bool
}{
	{"py.bf16", BF16, []int64{4}, le16(0x3F80, 0xC000, 0x3F00, 0x4050), false},
	{"py.f16", F16, []int64{2, 2}, le16(0x3C00, 0xB800, 0x7BFF, 0x0000), false},
	{"py.f32", F32, []int64{2, 3}, f32s(0, 0.25, 0.5, 0.75, 1, 1.25), false},
	{"py.f64", F64, []int64{2}, f64s(1.0/3, -1e300), false},
	{"py.i64", I64, []int64{2}, le64(uint64(0xFFFFFFFFFFFFFFFB), 1<<40), false},
	{"py.i32", I32, []int64{2}, le32(0xFFFFFFF9, 7), false},
	{"py.i16", I16, []int64{2}, le16(0xFED4, 300), false},
	{"py.i8", I8, []int64{2}, []byte{0xFD, 3}, false},
	{"py.u8", U8, []int64{3}, []byte{0, 200, 255}, false},
	{"py.bool", BOOL, []int64{2}, []byte{1, 0}, false},
	{"py.f8_e4m3", F8E4M3, []int64{4}, []byte{0x38, 0xC0, 0x30, 0x7E}, false},
	{"py.f8_e5m2", F8E5M2, []int64{4}, []byte{0x3C, 0xC0, 0x38, 0x42}, false},
	{"py.empty", F32, []int64{0, 3}, nil, false},
	{"py.scalar", F32, []int64{}, f32s(2.5), false},
	{"py.u16", U16, []int64{2}, le16(0, 65535), true},
	{"py.u32", U32, []int64{2}, le32(1, math.MaxUint32), true},
	{"py.u64", U64, []int64{2}, le64(1, math.MaxUint64), true},
	{"py.f8_e8m0", F8E8M0, []int64{3}, []byte{0x7F, 0x7C, 0x89}, true},
}

func TestPycheckPython(t *testing.T) {
	path := filepath.Join(pycheckDir, "python_written.safetensors")
	h, err := ReadFileHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if h.DataStart%8 != 0 || !h.Contiguous() {
		t.Errorf("DataStart %d, Contiguous %v", h.DataStart, h.Contiguous())
	}
	if len(h.Metadata) != 1 || h.Metadata["format"] != "pt" {
		t.Errorf("metadata %v", h.Metadata)
	}
	found := 0
	for _, e := range pyExpected {
		tn, ok := h.Tensor(e.name)
		if !ok {
			if !e.optional {
				t.Errorf("%s missing", e.name)
			} else {
				t.Logf("%s not written by this Python safetensors (optional)", e.name)
			}
			continue
		}
		found++
		if tn.DType != e.dtype || fmt.Sprint(tn.Shape) != fmt.Sprint(e.shape) {
			t.Errorf("%s: %s %v, want %s %v", e.name, tn.DType, tn.Shape, e.dtype, e.shape)
		}
		got := raw[tn.Offset : tn.Offset+tn.Size]
		if !bytes.Equal(got, e.data) {
			t.Errorf("%s: bytes % x, want % x", e.name, got, e.data)
		}
	}
	if found != len(h.Tensors) {
		t.Errorf("file has %d tensors, %d expected ones found", len(h.Tensors), found)
	}

	// Rewriting Python's tensors in Python's order with our writer gives
	// Python's file byte for byte (header JSON spelling and padding too).
	specs := make([]Spec, len(h.Tensors))
	for i, tn := range h.Tensors {
		specs[i] = Spec{tn.Name, tn.DType, tn.Shape}
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, specs, h.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tn := range h.Tensors {
		if err := w.WriteTensor(tn.Name, io.NewSectionReader(f, tn.Offset, tn.Size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), raw) {
		n := min(len(raw), buf.Len(), int(h.DataStart))
		t.Errorf("rewrite differs from Python's file\n ours %q\n  py  %q", buf.Bytes()[:n], raw[:n])
	}
}
