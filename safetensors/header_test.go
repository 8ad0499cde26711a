package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
)

// rawFile builds a file from header JSON (unpadded, as given) and a data
// area of dataLen bytes, each byte its index mod 251.
func rawFile(js string, dataLen int) []byte {
	b := make([]byte, 8, 8+len(js)+dataLen)
	binary.LittleEndian.PutUint64(b, uint64(len(js)))
	b = append(b, js...)
	for i := 0; i < dataLen; i++ {
		b = append(b, byte(i%251))
	}
	return b
}

func readRaw(t *testing.T, file []byte, name string) (*Header, error) {
	t.Helper()
	return ReadHeader(bytes.NewReader(file), int64(len(file)), name)
}

func TestReadHeaderValid(t *testing.T) {
	// Keys deliberately out of offset order; a zero-size tensor in the
	// middle and one at the very end of the data area; a scalar.
	js := `{"w2":{"dtype":"BF16","shape":[2,3],"data_offsets":[24,36]},` +
		`"__metadata__":{"format":"pt","note":"x"},` +
		`"empty":{"dtype":"F32","shape":[0,4],"data_offsets":[24,24]},` +
		`"w1":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},` +
		`"s":{"dtype":"I64","shape":[],"data_offsets":[36,44]},` +
		`"tail":{"dtype":"U8","shape":[0],"data_offsets":[44,44]}}`
	file := rawFile(js, 44)
	h, err := readRaw(t, file, "a.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if h.File != "a.safetensors" || h.FileSize != int64(len(file)) || h.DataStart != int64(8+len(js)) {
		t.Fatalf("File %q FileSize %d DataStart %d", h.File, h.FileSize, h.DataStart)
	}
	if len(h.Metadata) != 2 || h.Metadata["format"] != "pt" || h.Metadata["note"] != "x" {
		t.Fatalf("metadata %v", h.Metadata)
	}
	ds := h.DataStart
	want := []Tensor{
		{"w1", F32, []int64{2, 3}, ds + 0, 24},
		{"empty", F32, []int64{0, 4}, ds + 24, 0},
		{"w2", BF16, []int64{2, 3}, ds + 24, 12},
		{"s", I64, []int64{}, ds + 36, 8},
		{"tail", U8, []int64{0}, ds + 44, 0},
	}
	if fmt.Sprint(h.Tensors) != fmt.Sprint(want) {
		t.Fatalf("tensors\n got %v\nwant %v", h.Tensors, want)
	}
	for _, w := range want {
		got, ok := h.Tensor(w.Name)
		if !ok || got.Offset != w.Offset || got.Size != w.Size {
			t.Errorf("Tensor(%q) = %v, %v", w.Name, got, ok)
		}
	}
	if _, ok := h.Tensor("nope"); ok {
		t.Error("Tensor(nope) found")
	}
	if s, _ := h.Tensor("s"); s.NumElements() != 1 {
		t.Errorf("scalar NumElements = %d", s.NumElements())
	}
	if e, _ := h.Tensor("empty"); e.NumElements() != 0 {
		t.Errorf("empty NumElements = %d", e.NumElements())
	}
	if !h.Contiguous() {
		t.Error("Contiguous = false")
	}
	if h.DataSize() != 44 {
		t.Errorf("DataSize = %d", h.DataSize())
	}
	// A hand-built Header (no index) still finds tensors.
	h2 := &Header{Tensors: want}
	if got, ok := h2.Tensor("s"); !ok || got.Size != 8 {
		t.Errorf("hand-built Tensor(s) = %v, %v", got, ok)
	}
}

func TestReadHeaderNoMetadataEmpty(t *testing.T) {
	h, err := readRaw(t, rawFile(`{}`, 0), "e")
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata != nil || len(h.Tensors) != 0 || !h.Contiguous() {
		t.Fatalf("%+v", h)
	}
	h, err = readRaw(t, rawFile(`{"__metadata__":null}  `, 0), "e")
	if err != nil || h.Metadata != nil {
		t.Fatalf("null metadata: %v %v", h, err)
	}
}

func TestReadHeaderGapsAllowed(t *testing.T) {
	js := `{"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`
	h, err := readRaw(t, rawFile(js, 12), "g")
	if err != nil {
		t.Fatal(err)
	}
	if h.Contiguous() {
		t.Error("gap before and after tensor, but Contiguous = true")
	}
}

// recReader records every ReadAt.
type recReader struct {
	r     io.ReaderAt
	reads [][2]int64
}

func (r *recReader) ReadAt(p []byte, off int64) (int, error) {
	r.reads = append(r.reads, [2]int64{off, int64(len(p))})
	return r.r.ReadAt(p, off)
}

func TestReadHeaderTwoReadsNoData(t *testing.T) {
	js := `{"a":{"dtype":"F32","shape":[1000],"data_offsets":[0,4000]}}`
	file := rawFile(js, 4000)
	rr := &recReader{r: bytes.NewReader(file)}
	h, err := ReadHeader(rr, int64(len(file)), "x")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]int64{{0, 8}, {8, int64(len(js))}}
	if fmt.Sprint(rr.reads) != fmt.Sprint(want) {
		t.Fatalf("reads %v, want %v", rr.reads, want)
	}
	if h.DataStart != 8+int64(len(js)) {
		t.Fatal(h.DataStart)
	}
}

// eofReader returns io.EOF together with a full final read, as ReaderAt
// allows.
type eofReader struct{ b []byte }

func (r eofReader) ReadAt(p []byte, off int64) (int, error) {
	n := copy(p, r.b[off:])
	if off+int64(n) == int64(len(r.b)) {
		return n, io.EOF
	}
	return n, nil
}

func TestReadHeaderEOFWithFullRead(t *testing.T) {
	file := rawFile(`{}`, 0)
	if _, err := ReadHeader(eofReader{file}, int64(len(file)), "x"); err != nil {
		t.Fatal(err)
	}
}

type errReader struct{}

func (errReader) ReadAt(p []byte, off int64) (int, error) { return 0, errors.New("disk on fire") }

func TestReadHeaderIOError(t *testing.T) {
	_, err := ReadHeader(errReader{}, 100, "x.safetensors")
	if err == nil || !strings.Contains(err.Error(), "x.safetensors") || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("err = %v", err)
	}
	// The declared size is larger than what the reader has.
	file := rawFile(`{}`, 0)
	_, err = ReadHeader(bytes.NewReader(file[:6]), int64(len(file)), "short")
	if err == nil || !strings.Contains(err.Error(), "short") {
		t.Fatalf("err = %v", err)
	}
}

func TestErrorMessageFormat(t *testing.T) {
	js := `{"model.layers.0.mlp.gate.weight":{"dtype":"U8","shape":[0],"data_offsets":[10,4]}}`
	_, err := readRaw(t, rawFile(js, 16), "model-00001-of-00002.safetensors")
	want := `model-00001-of-00002.safetensors: tensor "model.layers.0.mlp.gate.weight": data_offsets [10, 4]: begin is after end`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant  %s", err, want)
	}
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Tensor != "model.layers.0.mlp.gate.weight" || fe.File != "model-00001-of-00002.safetensors" {
		t.Fatalf("FormatError = %#v", fe)
	}
}

func lenPrefix(n uint64, rest string) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, n)
	return append(b, rest...)
}

// badHeaders are hand-corrupted files; each must fail with an error naming
// the file, the tensor (if any) and containing the given text.
var badHeaders = []struct {
	name   string
	file   []byte
	tensor string
	want   string
}{
	{"tiny file", []byte{1, 2, 3}, "", "too small"},
	{"huge length", lenPrefix(math.MaxUint64, "{}"), "", "exceeds the limit"},
	{"length just over limit", lenPrefix(MaxHeaderLen+1, "{}"), "", "exceeds the limit"},
	{"length past file end", lenPrefix(1000, "{}"), "", "past the end of the"},
	{"empty header", lenPrefix(0, ""), "", "unexpected end of JSON"},
	{"array json", rawFile(`[]`, 0), "", "header is an array, want a JSON object"},
	{"string json", rawFile(`"x"`, 0), "", "header is a string"},
	{"null json", rawFile(`null`, 0), "", "header is null"},
	{"number json", rawFile(`12`, 0), "", "header is a number"},
	{"truncated json", rawFile(`{"a":{"dtype":"F32"`, 0), "a", "unexpected end of JSON"},
	{"syntax error", rawFile(`{"a" 1}`, 0), "a", "invalid JSON"},
	{"two objects", rawFile(`{} {}`, 0), "", "after the JSON object"},
	{"nul padding", rawFile("{}\x00\x00\x00\x00\x00\x00", 0), "", "after the JSON object"},
	{"invalid utf8", rawFile("{\"a\xff\":{}}", 0), "", "not valid UTF-8"},
	{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12),
		"b", `overlap tensor "a"`},
	{"overlap contained", rawFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, 8),
		"b", `overlap tensor "a"`},
	{"identical ranges", rawFile(`{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, 8),
		"b", `overlap tensor "a"`},
	{"offset past end", rawFile(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 12), "a", "run past the end of the 12-byte data area"},
	{"begin past end", rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[20,20]}}`, 12), "a", "run past the end"},
	{"huge offsets", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[9223372036854775806,9223372036854775807]}}`, 4), "a", "run past the end"},
	{"offset beyond int64", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551616]}}`, 4), "a", "out of range"},
	{"begin after end", rawFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}}`, 8), "a", "begin is after end"},
	{"wrong dtype size", rawFile(`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}}`, 16), "a", "span 8 bytes but dtype F32 shape [2, 2] needs 16"},
	{"bf16 counted as 4 bytes", rawFile(`{"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,12]}}`, 16), "a", "needs 6"},
	{"duplicate names", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), "a", "duplicate tensor name"},
	{"duplicate metadata", rawFile(`{"__metadata__":{},"__metadata__":{}}`, 0), "", "duplicate __metadata__"},
	{"duplicate metadata key", rawFile(`{"__metadata__":{"k":"1","k":"2"}}`, 0), "", `duplicate key "k"`},
	{"duplicate field", rawFile(`{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), "a", `duplicate key "dtype"`},
	{"metadata number", rawFile(`{"__metadata__":{"k":1}}`, 0), "", `value of "k" is a number`},
	{"metadata array", rawFile(`{"__metadata__":["k"]}`, 0), "", "__metadata__ is an array"},
	{"nan string dim", rawFile(`{"a":{"dtype":"U8","shape":["NaN"],"data_offsets":[0,1]}}`, 1), "a", "shape[0] is a string"},
	{"nan bare", rawFile(`{"a":{"dtype":"U8","shape":[NaN],"data_offsets":[0,1]}}`, 1), "a", "invalid JSON"},
	{"inf dim", rawFile(`{"a":{"dtype":"U8","shape":[1e999],"data_offsets":[0,1]}}`, 1), "a", "not an integer"},
	{"fraction dim", rawFile(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, 1), "a", "not an integer"},
	{"integral float dim", rawFile(`{"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}}`, 1), "a", "not an integer"},
	{"null dim", rawFile(`{"a":{"dtype":"U8","shape":[null],"data_offsets":[0,1]}}`, 1), "a", "shape[0] is null"},
	{"nested dim", rawFile(`{"a":{"dtype":"U8","shape":[[1]],"data_offsets":[0,1]}}`, 1), "a", "shape[0] is an array"},
	{"negative dim", rawFile(`{"a":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,0]}}`, 1), "a", "shape[1] = -1: negative"},
	{"negative offset", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, 1), "a", "data_offsets[0] = -1: negative"},
	{"shape overflow", rawFile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, 1), "a", "overflows"},
	{"byte size overflow", rawFile(`{"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,1]}}`, 1), "a", "overflows"},
	{"shape not array", rawFile(`{"a":{"dtype":"U8","shape":3,"data_offsets":[0,3]}}`, 3), "a", "shape is a number"},
	{"three offsets", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 2), "a", "more than 2 elements"},
	{"one offset", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}}`, 2), "a", "has 1 elements, want 2"},
	{"unknown dtype", rawFile(`{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`, 16), "a", `unknown dtype "F128"`},
	{"sub-byte dtype", rawFile(`{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, 1), "a", "sub-byte type"},
	{"lowercase dtype", rawFile(`{"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, 4), "a", "unknown dtype"},
	{"dtype not string", rawFile(`{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, 4), "a", "dtype is a number"},
	{"missing dtype", rawFile(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4), "a", "missing dtype"},
	{"missing shape", rawFile(`{"a":{"dtype":"U8","data_offsets":[0,4]}}`, 4), "a", "missing shape"},
	{"missing offsets", rawFile(`{"a":{"dtype":"U8","shape":[4]}}`, 4), "a", "missing data_offsets"},
	{"unknown field", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}}`, 1), "a", `unknown key "extra"`},
	{"tensor not object", rawFile(`{"a":[1,2]}`, 0), "a", "entry is an array"},
	{"rank 65", rawFile(`{"a":{"dtype":"U8","shape":[`+strings.Repeat("1,", 64)+`1],"data_offsets":[0,1]}}`, 1), "a", "shape has more than 64 elements"},
	{"empty name", rawFile(`{"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, 1), "", "empty name"},
}

func TestReadHeaderBad(t *testing.T) {
	for _, tc := range badHeaders {
		t.Run(tc.name, func(t *testing.T) {
			h, err := readRaw(t, tc.file, "bad.safetensors")
			if err == nil {
				t.Fatalf("no error; header %+v", h)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "bad.safetensors: ") {
				t.Errorf("error does not start with the file name: %s", msg)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not contain %q", msg, tc.want)
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("not a *FormatError: %T %v", err, err)
			}
			if fe.Tensor != tc.tensor {
				t.Errorf("Tensor = %q, want %q (%s)", fe.Tensor, tc.tensor, msg)
			}
		})
	}
}

func TestLongNameTruncatedInError(t *testing.T) {
	name := strings.Repeat("é", 5000)
	js := `{"` + name + `":{"dtype":"U8","shape":[1],"data_offsets":[0,9]}}`
	_, err := readRaw(t, rawFile(js, 9), "f")
	if err == nil {
		t.Fatal("no error")
	}
	if len(err.Error()) > 600 || !strings.Contains(err.Error(), "(10000 bytes)") {
		t.Fatalf("error not truncated (%d bytes): %.300s", len(err.Error()), err)
	}
}

func TestDTypeSizes(t *testing.T) {
	want := map[DType]int{
		F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1,
		U64: 8, U32: 4, U16: 2, U8: 1, BOOL: 1, F8E4M3: 1, F8E5M2: 1,
		F8E8M0: 1, F8E4M3FNUZ: 1, F8E5M2FNUZ: 1, C64: 8,
		F4: 0, F6E2M3: 0, F6E3M2: 0, "E8M0": 0, "": 0, "f32": 0,
	}
	for d, n := range want {
		if d.Size() != n {
			t.Errorf("%q.Size() = %d, want %d", d, d.Size(), n)
		}
		_, err := ParseDType(string(d))
		if (err == nil) != (n > 0) {
			t.Errorf("ParseDType(%q) err = %v", d, err)
		}
	}
	// The constants are spelled as in safetensors headers.
	spelled := map[DType]string{F8E4M3: "F8_E4M3", F8E5M2: "F8_E5M2", F8E8M0: "F8_E8M0", BOOL: "BOOL", BF16: "BF16"}
	for d, s := range spelled {
		if string(d) != s {
			t.Errorf("%v spelled %q", d, string(d))
		}
	}
}

func TestNumElements(t *testing.T) {
	cases := []struct {
		shape []int64
		want  int64
	}{
		{nil, 1}, {[]int64{}, 1}, {[]int64{3}, 3}, {[]int64{2, 3, 4}, 24},
		{[]int64{0, 5}, 0}, {[]int64{-1}, -1}, {[]int64{1 << 32, 1 << 32}, -1},
		{[]int64{1 << 31, 1 << 31}, 1 << 62},
	}
	for _, c := range cases {
		if got := (Tensor{Shape: c.shape}).NumElements(); got != c.want {
			t.Errorf("NumElements(%v) = %d, want %d", c.shape, got, c.want)
		}
	}
}

func TestReadHeaderMaxRank(t *testing.T) {
	js := `{"a":{"dtype":"U8","shape":[` + strings.Repeat("1,", MaxRank-1) + `1],"data_offsets":[0,1]}}`
	h, err := readRaw(t, rawFile(js, 1), "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Tensors[0].Shape) != 64 {
		t.Fatalf("rank %d", len(h.Tensors[0].Shape))
	}
}
