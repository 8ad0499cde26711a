// Package reference reads the recorded transformers references of
// testdata/reference (safetensors files of I64 token ids and F32 logits and
// hidden states) for the runtime's tests.
package reference

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/qpack-go/qpack/safetensors"
)

// File is one reference file, read whole.
type File struct {
	path string
	h    *safetensors.Header
	data []byte
}

// Open reads a reference file.
func Open(path string) (*File, error) {
	h, err := safetensors.ReadFileHeader(path)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return &File{path: path, h: h, data: data}, nil
}

// Has reports whether the file holds tensor name.
func (f *File) Has(name string) bool {
	_, ok := f.h.Tensor(name)
	return ok
}

func (f *File) raw(name string, dt safetensors.DType) ([]byte, error) {
	t, ok := f.h.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %s", f.path, name)
	}
	if t.DType != dt {
		return nil, fmt.Errorf("%s: tensor %s is %s, want %s", f.path, name, t.DType, dt)
	}
	if t.Offset < 0 || t.Size < 0 || t.Offset+t.Size > int64(len(f.data)) {
		return nil, fmt.Errorf("%s: tensor %s lies outside the file", f.path, name)
	}
	return f.data[t.Offset : t.Offset+t.Size], nil
}

// Ints reads an I64 tensor.
func (f *File) Ints(name string) ([]int, error) {
	b, err := f.raw(name, safetensors.I64)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(b)/8)
	for i := range out {
		out[i] = int(int64(binary.LittleEndian.Uint64(b[8*i:])))
	}
	return out, nil
}

// Floats reads an F32 tensor.
func (f *File) Floats(name string) ([]float32, error) {
	b, err := f.raw(name, safetensors.F32)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// MaxAbsDiff is the largest |a[i] − b[i]| (+Inf if the lengths differ).
func MaxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}
