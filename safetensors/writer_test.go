package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlanFileExactBytes(t *testing.T) {
	specs := []Spec{
		{"b.weight", U8, []int64{3}},
		{"a<&>", F32, []int64{2}},
		{"scalar", BF16, nil},
	}
	p, err := PlanFile(specs, map[string]string{"z": "1", "format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	// Written by hand: metadata keys sorted, tensors in spec order, HTML
	// characters not escaped, padded with spaces to a multiple of 8.
	js := `{"__metadata__":{"format":"pt","z":"1"},` +
		`"b.weight":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},` +
		`"a<&>":{"dtype":"F32","shape":[2],"data_offsets":[3,11]},` +
		`"scalar":{"dtype":"BF16","shape":[],"data_offsets":[11,13]}}`
	for len(js)%8 != 0 {
		js += " "
	}
	want := make([]byte, 8)
	binary.LittleEndian.PutUint64(want, uint64(len(js)))
	want = append(want, js...)
	if !bytes.Equal(p.Header, want) {
		t.Fatalf("header\n got %q\nwant %q", p.Header, want)
	}
	ds := int64(len(want))
	wantT := []Tensor{
		{"b.weight", U8, []int64{3}, ds, 3},
		{"a<&>", F32, []int64{2}, ds + 3, 8},
		{"scalar", BF16, nil, ds + 11, 2},
	}
	if fmt.Sprint(p.Tensors) != fmt.Sprint(wantT) {
		t.Fatalf("tensors\n got %v\nwant %v", p.Tensors, wantT)
	}
	if p.Size != ds+13 {
		t.Fatalf("Size = %d, want %d", p.Size, ds+13)
	}
}

func TestPlanFileNoMetadata(t *testing.T) {
	for _, md := range []map[string]string{nil, {}} {
		p, err := PlanFile([]Spec{{"x", I8, []int64{1}}}, md)
		if err != nil {
			t.Fatal(err)
		}
		js := string(p.Header[8:])
		if want := `{"x":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}`; strings.TrimRight(js, " ") != want {
			t.Fatalf("got %q want %q", js, want)
		}
	}
	p, err := PlanFile(nil, nil)
	if err != nil || string(p.Header[8:]) != "{}      " || p.Size != 16 {
		t.Fatalf("empty plan: %q %v", p.Header, err)
	}
}

func TestPlanFileBad(t *testing.T) {
	cases := []struct {
		specs []Spec
		want  string
	}{
		{[]Spec{{"a", F32, []int64{1}}, {"a", F32, []int64{1}}}, `tensor "a": duplicate name`},
		{[]Spec{{"", F32, []int64{1}}}, "empty tensor name"},
		{[]Spec{{"__metadata__", F32, []int64{1}}}, "reserved"},
		{[]Spec{{"a", F32, []int64{2, -3}}}, `tensor "a": shape[1] = -3 is negative`},
		{[]Spec{{"a", "F12", []int64{1}}}, `tensor "a": unknown dtype "F12"`},
		{[]Spec{{"a", F4, []int64{2}}}, `tensor "a": dtype F4 is a sub-byte type`},
		{[]Spec{{"a", F64, []int64{1 << 62}}}, `tensor "a": dtype F64 shape [4611686018427387904]: byte size overflows`},
		{[]Spec{{"a", U8, []int64{1 << 62}}, {"b", U8, []int64{1 << 62}}}, `tensor "b": file size overflows`},
		{[]Spec{{"a\xff", U8, []int64{1}}}, "not valid UTF-8"},
	}
	for _, c := range cases {
		_, err := PlanFile(c.specs, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("PlanFile(%v) err = %v, want %q", c.specs, err, c.want)
		}
	}
	if _, err := PlanFile(nil, map[string]string{"k": "\xff"}); err == nil {
		t.Error("invalid UTF-8 metadata accepted")
	}
}

// allDTypeSpecs has one tensor of every supported dtype, a zero-size tensor
// and a scalar.
func allDTypeSpecs() []Spec {
	return []Spec{
		{"u8", U8, []int64{3, 5}},
		{"f64", F64, []int64{7}},
		{"f32", F32, []int64{2, 3, 4}},
		{"f16", F16, []int64{9}},
		{"bf16", BF16, []int64{4, 4}},
		{"empty", F32, []int64{0, 128}},
		{"i64", I64, []int64{3}},
		{"i32", I32, []int64{5}},
		{"i16", I16, []int64{6}},
		{"i8", I8, []int64{11}},
		{"u64", U64, []int64{2}},
		{"u32", U32, []int64{3}},
		{"u16", U16, []int64{3}},
		{"bool", BOOL, []int64{13}},
		{"f8e4m3", F8E4M3, []int64{17}},
		{"f8e5m2", F8E5M2, []int64{1, 19}},
		{"f8e8m0", F8E8M0, []int64{4}},
		{"scalar", F32, []int64{}},
		{"c64", C64, []int64{2}},
	}
}

func TestWriterRoundTrip(t *testing.T) {
	specs := allDTypeSpecs()
	sizes := map[string]int{ // element size x count, by hand
		"u8": 15, "f64": 56, "f32": 96, "f16": 18, "bf16": 32, "empty": 0, "i64": 24,
		"i32": 20, "i16": 12, "i8": 11, "u64": 16, "u32": 12, "u16": 6, "bool": 13,
		"f8e4m3": 17, "f8e5m2": 19, "f8e8m0": 4, "scalar": 4, "c64": 16,
	}
	rng := rand.New(rand.NewSource(1))
	payload := map[string][]byte{}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		b := make([]byte, sizes[s.Name])
		rng.Read(b)
		payload[s.Name] = b
		if err := w.WriteTensor(s.Name, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	file := buf.Bytes()
	if int64(len(file)) != w.Plan().Size {
		t.Fatalf("wrote %d bytes, plan says %d", len(file), w.Plan().Size)
	}
	h, err := ReadHeader(bytes.NewReader(file), int64(len(file)), "rt")
	if err != nil {
		t.Fatal(err)
	}
	if h.DataStart%8 != 0 {
		t.Errorf("DataStart %d not 8-aligned", h.DataStart)
	}
	if !h.Contiguous() || h.Metadata["format"] != "pt" || len(h.Tensors) != len(specs) {
		t.Fatalf("header %+v", h)
	}
	// Data in spec order.
	prev := int64(-1)
	for _, s := range specs {
		tn, ok := h.Tensor(s.Name)
		if !ok {
			t.Fatalf("%s missing", s.Name)
		}
		if tn.DType != s.DType || fmt.Sprint(tn.Shape) != fmt.Sprint(s.Shape) {
			t.Errorf("%s: %v %v", s.Name, tn.DType, tn.Shape)
		}
		if !bytes.Equal(file[tn.Offset:tn.Offset+tn.Size], payload[s.Name]) {
			t.Errorf("%s: bytes differ", s.Name)
		}
		if tn.Offset < prev {
			t.Errorf("%s at %d, before previous spec at %d", s.Name, tn.Offset, prev)
		}
		prev = tn.Offset
	}
}

// oneByteReader yields one byte per Read, to exercise partial reads.
type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	p[0] = r.b[0]
	r.b = r.b[1:]
	return 1, nil
}

func TestWriterSlowReader(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, []Spec{{"a", U16, []int64{5}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("a", &oneByteReader{[]byte("0123456789")}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(buf.String(), "0123456789") {
		t.Fatalf("%q", buf.String())
	}
}

type stuckReader struct{}

func (stuckReader) Read(p []byte) (int, error) { return 0, nil }

type failReader struct{ n int }

func (r *failReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("network gone")
	}
	k := min(r.n, len(p))
	r.n -= k
	return k, nil
}

func TestWriterErrors(t *testing.T) {
	specs := []Spec{{"first", F32, []int64{2}}, {"second", U8, []int64{4}}}
	newW := func() *Writer {
		w, err := NewWriter(io.Discard, specs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	cases := []struct {
		name string
		run  func(w *Writer) error
		want string
	}{
		{"short", func(w *Writer) error { return w.WriteTensor("first", bytes.NewReader(make([]byte, 7))) },
			`tensor "first": reader gave 7 bytes, want 8`},
		{"long", func(w *Writer) error { return w.WriteTensor("first", bytes.NewReader(make([]byte, 9))) },
			`tensor "first": reader gave more than 8 bytes`},
		{"order", func(w *Writer) error { return w.WriteTensor("second", bytes.NewReader(make([]byte, 4))) },
			`tensor "second" written out of order: next is "first"`},
		{"stuck", func(w *Writer) error {
			return w.WriteTensor("first", io.MultiReader(bytes.NewReader(make([]byte, 8)), stuckReader{}))
		},
			`tensor "first": reader returns no data`},
		{"read error", func(w *Writer) error { return w.WriteTensor("first", &failReader{3}) },
			`tensor "first": after 3 of 8 bytes: network gone`},
		{"missing", func(w *Writer) error {
			if err := w.WriteTensor("first", bytes.NewReader(make([]byte, 8))); err != nil {
				return err
			}
			return w.Close()
		}, `closed after 1 of 2 tensors: tensor "second" not written`},
		{"extra", func(w *Writer) error {
			w.WriteTensor("first", bytes.NewReader(make([]byte, 8)))
			w.WriteTensor("second", bytes.NewReader(make([]byte, 4)))
			return w.WriteTensor("third", bytes.NewReader(nil))
		}, `tensor "third": all 2 tensors already written`},
	}
	for _, c := range cases {
		w := newW()
		err := c.run(w)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
			continue
		}
		// Errors are sticky.
		if err2 := w.Close(); err2 == nil {
			t.Errorf("%s: Close after error succeeded", c.name)
		}
	}
}

type failWriter struct{}

func (failWriter) Write(p []byte) (int, error) { return 0, errors.New("disk full") }

func TestNewWriterWriteError(t *testing.T) {
	_, err := NewWriter(failWriter{}, []Spec{{"a", U8, []int64{1}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v", err)
	}
}

type closeRecorder struct {
	io.Reader
	closed *int
}

func (c closeRecorder) Close() error { *c.closed++; return nil }

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.safetensors")
	specs := []Spec{{"a", I32, []int64{2}}, {"b", U8, []int64{3}}}
	data := map[string][]byte{"a": {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, "b": {7, 8, 9}}
	closed := 0
	err := WriteFile(path, specs, nil, func(i int, s Spec) (io.Reader, error) {
		if specs[i].Name != s.Name {
			t.Errorf("data(%d, %s): wrong spec", i, s.Name)
		}
		return closeRecorder{bytes.NewReader(data[s.Name]), &closed}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if closed != 2 {
		t.Errorf("closed %d readers, want 2", closed)
	}
	h, err := ReadFileHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	for _, s := range specs {
		tn, _ := h.Tensor(s.Name)
		if !bytes.Equal(raw[tn.Offset:tn.Offset+tn.Size], data[s.Name]) {
			t.Errorf("%s: bytes differ", s.Name)
		}
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", st.Mode())
	}

	// A failure leaves the existing file untouched and no temporary behind.
	err = WriteFile(path, specs, nil, func(i int, s Spec) (io.Reader, error) {
		if i == 1 {
			return nil, errors.New("source vanished")
		}
		return bytes.NewReader(make([]byte, 8)), nil
	})
	if err == nil || !strings.Contains(err.Error(), `tensor "b": source vanished`) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v", err)
	}
	raw2, _ := os.ReadFile(path)
	if !bytes.Equal(raw, raw2) {
		t.Error("failed WriteFile changed the existing file")
	}
	err = WriteFile(path, specs, nil, func(i int, s Spec) (io.Reader, error) {
		return bytes.NewReader(make([]byte, 2)), nil // too short
	})
	if err == nil || !strings.Contains(err.Error(), `tensor "a": reader gave 2 bytes`) {
		t.Fatalf("err = %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("directory holds %v, want only out.safetensors", names)
	}
}
