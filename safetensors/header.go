package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/qpack-go/qpack/internal/regfile"
)

// MaxHeaderLen is the largest header JSON this package reads (100 MiB).
// A larger declared length is refused before anything is allocated.
const MaxHeaderLen = 100 << 20

// MaxRank is the most dimensions a tensor may have (numpy's limit). It
// keeps a hostile header from turning into a huge shape allocation.
const MaxRank = 64

// metadataKey is the reserved header key holding free-form string metadata.
const metadataKey = "__metadata__"

// Tensor describes one tensor of a safetensors file.
type Tensor struct {
	Name   string
	DType  DType
	Shape  []int64
	Offset int64 // absolute offset of the first byte in the file
	Size   int64 // bytes
}

// NumElements returns the product of the shape (1 for a scalar), or -1 if a
// dimension is negative or the product overflows int64. Tensors returned by
// ReadHeader never give -1.
func (t Tensor) NumElements() int64 {
	n, ok := numElements(t.Shape)
	if !ok {
		return -1
	}
	return n
}

// numElements multiplies the dims, reporting false on a negative dim or an
// overflow of the product of the non-zero dims.
func numElements(shape []int64) (int64, bool) {
	n := int64(1)
	zero := false
	for _, d := range shape {
		switch {
		case d < 0:
			return 0, false
		case d == 0:
			zero = true
		default:
			if n > math.MaxInt64/d {
				return 0, false
			}
			n *= d
		}
	}
	if zero {
		return 0, true
	}
	return n, true
}

// byteSize returns numel x dtype size, overflow-checked.
func byteSize(dt DType, shape []int64) (int64, error) {
	n, ok := numElements(shape)
	if !ok {
		return 0, fmt.Errorf("shape %s: element count overflows int64", fmtShape(shape))
	}
	sz := int64(dt.Size())
	if sz == 0 {
		_, err := ParseDType(string(dt))
		return 0, err
	}
	if n > math.MaxInt64/sz {
		return 0, fmt.Errorf("dtype %s shape %s: byte size overflows int64", dt, fmtShape(shape))
	}
	return n * sz, nil
}

// Header is the parsed, validated header of one safetensors file.
type Header struct {
	File      string            // the name given to the reader, for messages
	FileSize  int64             // the size of the whole file
	DataStart int64             // 8 + header JSON length: where the data area begins
	Metadata  map[string]string // the __metadata__ entry; nil if absent
	Tensors   []Tensor          // sorted by Offset, then Name

	byName map[string]int // index into Tensors; nil if the Header was built by hand
}

// Tensor returns the tensor called name.
func (h *Header) Tensor(name string) (Tensor, bool) {
	if h.byName != nil {
		i, ok := h.byName[name]
		if ok {
			return h.Tensors[i], true
		}
		return Tensor{}, false
	}
	for _, t := range h.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// DataSize returns the sum of the tensors' byte sizes.
func (h *Header) DataSize() int64 {
	var n int64
	for _, t := range h.Tensors {
		n += t.Size
	}
	return n
}

// ReadFileHeader opens the file at path and reads its header.
// A path that is not a regular file (a FIFO, a device, a socket, a symlink
// to one) is refused before any blocking open.
func ReadFileHeader(path string) (*Header, error) {
	f, st, err := regfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadHeader(f, st.Size(), path)
}

// ReadHeader reads and validates the header of a safetensors file of the
// given size through r, with exactly two reads: the 8-byte little-endian
// header length, then the header JSON. Tensor data is never read. file names
// the file in error messages.
//
// Validation: the header length is at most MaxHeaderLen and fits in the
// file; the JSON is valid UTF-8, a single object with no duplicate keys at
// any level; "__metadata__", if present, maps strings to strings; every
// other key is a tensor with exactly "dtype", "shape" and "data_offsets";
// the dtype is known and whole-byte; dims are non-negative integers;
// data_offsets [begin, end] has begin <= end, lies inside the data area, and
// end-begin equals dtype size x element count; non-empty tensors do not
// overlap. Gaps between tensors and trailing bytes after the last tensor
// are allowed (the Python library refuses them; see Header.Contiguous).
func ReadHeader(r io.ReaderAt, size int64, file string) (*Header, error) {
	if size < 8 {
		return nil, formatErr(file, "", fmt.Sprintf("file is %d bytes, too small for the 8-byte header length", size))
	}
	var lenBuf [8]byte
	if err := readFullAt(r, lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("%s: reading header length: %w", file, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderLen {
		return nil, formatErr(file, "", fmt.Sprintf("header length %d exceeds the limit of %d bytes", n, MaxHeaderLen))
	}
	if n > uint64(size-8) {
		return nil, formatErr(file, "", fmt.Sprintf("header length %d runs past the end of the %d-byte file", n, size))
	}
	js := make([]byte, n)
	if err := readFullAt(r, js, 8); err != nil {
		return nil, fmt.Errorf("%s: reading %d-byte header: %w", file, n, err)
	}
	return parseHeader(js, size, file)
}

// readFullAt fills p from r at off, accepting io.EOF alongside a full read
// as io.ReaderAt allows.
func readFullAt(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// rawTensor is a tensor entry as parsed, before range validation.
type rawTensor struct {
	name       string
	dtype      string
	shape      []int64
	begin, end int64
}

// parseHeader parses and validates the header JSON js of a file of the given
// size.
//
// github.com/nlpodyssey/safetensors is not used here: its ReadMetadata wants
// the whole file in one []byte, it knows no F8 dtypes, it decodes through Go
// maps (so duplicate keys silently win) and its DType.Size panics on bad
// values. The header is decoded here with a small strict JSON scanner
// (jsonscan.go). The tests use it as an independent reader of every file
// qpack writes (oracle_test.go).
func parseHeader(js []byte, size int64, file string) (*Header, error) {
	if !utf8.Valid(js) {
		return nil, formatErr(file, "", "header is not valid UTF-8")
	}
	dataStart := 8 + int64(len(js))
	dataLen := size - dataStart

	sc := newScanner(js, file)
	sc.ws()
	if sc.peek() != '{' {
		return nil, sc.wrongType("", "header", "a JSON object")
	}
	h := &Header{
		File:      file,
		FileSize:  size,
		DataStart: dataStart,
		byName:    make(map[string]int),
	}
	hasMeta := false
	err := sc.object("", "header", true, func(key string) error {
		if key == metadataKey {
			if hasMeta {
				return formatErr(file, "", "duplicate __metadata__ key")
			}
			hasMeta = true
			var err error
			h.Metadata, err = sc.stringMap("__metadata__", true)
			return err
		}
		if _, dup := h.byName[key]; dup {
			return formatErr(file, key, "duplicate tensor name")
		}
		rt, err := sc.tensor(key)
		if err != nil {
			return err
		}
		t, err := checkTensor(rt, dataStart, dataLen, file)
		if err != nil {
			return err
		}
		h.byName[key] = len(h.Tensors)
		h.Tensors = append(h.Tensors, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := sc.end("header"); err != nil {
		return nil, err
	}
	if h.Tensors == nil {
		h.Tensors = []Tensor{}
	}
	sort.Slice(h.Tensors, func(i, j int) bool {
		a, b := &h.Tensors[i], &h.Tensors[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		if a.Size != b.Size {
			return a.Size < b.Size
		}
		return a.Name < b.Name
	})
	// Overlap check: in offset order, every non-empty tensor must begin at
	// or after the furthest end seen so far.
	var (
		maxEnd  int64 = -1
		maxName string
	)
	for _, t := range h.Tensors {
		if t.Size == 0 {
			continue
		}
		if t.Offset < maxEnd {
			return nil, formatErr(file, t.Name, fmt.Sprintf(
				"data_offsets [%d, %d] overlap tensor %s, which ends at %d",
				t.Offset-dataStart, t.Offset-dataStart+t.Size, quoteTrunc(maxName), maxEnd-dataStart))
		}
		maxEnd, maxName = t.Offset+t.Size, t.Name
	}
	// Final order: by Offset, then Name (zero-size tensors may share an
	// offset with a non-empty one).
	sort.SliceStable(h.Tensors, func(i, j int) bool {
		a, b := &h.Tensors[i], &h.Tensors[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		return a.Name < b.Name
	})
	for i, t := range h.Tensors {
		h.byName[t.Name] = i // same keys: updates in place
	}
	return h, nil
}

// Contiguous reports whether the tensors tile the data area exactly, with
// no gap and nothing after the last one, as the Python library requires.
func (h *Header) Contiguous() bool {
	pos := h.DataStart
	for _, t := range h.Tensors {
		if t.Size == 0 {
			if t.Offset < h.DataStart || t.Offset > h.FileSize {
				return false
			}
			continue
		}
		if t.Offset != pos {
			return false
		}
		pos += t.Size
	}
	return pos == h.FileSize
}

// checkTensor validates one parsed entry against the data area.
func checkTensor(rt rawTensor, dataStart, dataLen int64, file string) (Tensor, error) {
	dt, err := ParseDType(rt.dtype)
	if err != nil {
		return Tensor{}, formatErr(file, rt.name, err.Error())
	}
	want, err := byteSize(dt, rt.shape)
	if err != nil {
		return Tensor{}, formatErr(file, rt.name, err.Error())
	}
	if rt.begin > rt.end {
		return Tensor{}, formatErr(file, rt.name, fmt.Sprintf("data_offsets [%d, %d]: begin is after end", rt.begin, rt.end))
	}
	if rt.end > dataLen {
		return Tensor{}, formatErr(file, rt.name, fmt.Sprintf(
			"data_offsets [%d, %d] run past the end of the %d-byte data area", rt.begin, rt.end, dataLen))
	}
	if got := rt.end - rt.begin; got != want {
		return Tensor{}, formatErr(file, rt.name, fmt.Sprintf(
			"data_offsets [%d, %d] span %d bytes but dtype %s shape %s needs %d",
			rt.begin, rt.end, got, dt, fmtShape(rt.shape), want))
	}
	return Tensor{
		Name:   rt.name,
		DType:  dt,
		Shape:  rt.shape,
		Offset: dataStart + rt.begin,
		Size:   want,
	}, nil
}

func fmtShape(s []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 16 && len(s) > 20 {
			fmt.Fprintf(&b, "... (%d dims)", len(s))
			break
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// tensor reads one tensor entry {"dtype", "shape", "data_offsets"}.
func (s *scanner) tensor(name string) (rawTensor, error) {
	rt := rawTensor{name: name}
	if name == "" {
		return rt, formatErr(s.file, "", `tensor with an empty name ""`)
	}
	if s.peek() != '{' {
		return rt, s.wrongType(name, "entry", "an object")
	}
	var haveDType, haveShape, haveOffsets bool
	err := s.object(name, "entry", false, func(k string) error {
		var err error
		switch k {
		case "dtype":
			if haveDType {
				return formatErr(s.file, name, `duplicate key "dtype"`)
			}
			haveDType = true
			if s.peek() != '"' {
				return s.wrongType(name, "dtype", "a string")
			}
			rt.dtype, err = s.str(name, "dtype")
		case "shape":
			if haveShape {
				return formatErr(s.file, name, `duplicate key "shape"`)
			}
			haveShape = true
			rt.shape, err = s.intArray(name, "shape", -MaxRank)
		case "data_offsets":
			if haveOffsets {
				return formatErr(s.file, name, `duplicate key "data_offsets"`)
			}
			haveOffsets = true
			var offs []int64
			offs, err = s.intArray(name, "data_offsets", 2)
			if err == nil {
				rt.begin, rt.end = offs[0], offs[1]
			}
		default:
			return formatErr(s.file, name, fmt.Sprintf("unknown key %s (want dtype, shape, data_offsets)", quoteTrunc(k)))
		}
		return err
	})
	if err != nil {
		return rt, err
	}
	switch {
	case !haveDType:
		return rt, formatErr(s.file, name, "missing dtype")
	case !haveShape:
		return rt, formatErr(s.file, name, "missing shape")
	case !haveOffsets:
		return rt, formatErr(s.file, name, "missing data_offsets")
	}
	return rt, nil
}

// parseNonNegInt parses a JSON number literal that must be a non-negative
// integer fitting in int64 (no fraction, no exponent).
func parseNonNegInt(s string) (int64, error) {
	if strings.HasPrefix(s, "-") {
		return 0, errors.New("negative")
	}
	if strings.ContainsAny(s, ".eE") {
		return 0, errors.New("not an integer")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("out of range for int64")
	}
	return v, nil
}

func truncate(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:40] + "..."
}
