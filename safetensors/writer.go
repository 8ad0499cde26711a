package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"unicode/utf8"

	"github.com/qpack-go/qpack/internal/regfile"
)

// Spec describes a tensor to write.
type Spec struct {
	Name  string
	DType DType
	Shape []int64
}

// Plan is the layout of a file to write: its header bytes and where every
// tensor goes. Writers that use positional writes (pwrite) fill a
// pre-sized file from it.
type Plan struct {
	Header  []byte   // the 8-byte length followed by the JSON, padded with spaces to a multiple of 8
	Tensors []Tensor // absolute offsets, in spec order, back to back
	Size    int64    // total file size
}

// PlanFile lays out a file holding specs in the given order, with metadata
// as "__metadata__" (omitted if empty). Names must be non-empty, unique,
// valid UTF-8 and not "__metadata__"; dtypes known and whole-byte; dims
// non-negative; sizes must not overflow.
func PlanFile(specs []Spec, metadata map[string]string) (*Plan, error) {
	type entry struct {
		DType       DType    `json:"dtype"`
		Shape       []int64  `json:"shape"`
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetEscapeHTML(false)
	// encode appends v's JSON without the encoder's trailing newline.
	encode := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		js.Truncate(js.Len() - 1)
		return nil
	}

	js.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k, v := range metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, fmt.Errorf("metadata key %s: key or value is not valid UTF-8", quoteTrunc(k))
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		js.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				js.WriteByte(',')
			}
			if err := encode(k); err != nil {
				return nil, err
			}
			js.WriteByte(':')
			if err := encode(metadata[k]); err != nil {
				return nil, err
			}
		}
		js.WriteByte('}')
		first = false
	}

	seen := make(map[string]struct{}, len(specs))
	rel := make([][2]int64, len(specs))
	var pos int64
	for i, s := range specs {
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("spec %d: empty tensor name", i)
		case s.Name == metadataKey:
			return nil, fmt.Errorf("spec %d: tensor name %q is reserved", i, metadataKey)
		case !utf8.ValidString(s.Name):
			return nil, fmt.Errorf("tensor %s: name is not valid UTF-8", quoteTrunc(s.Name))
		}
		if _, dup := seen[s.Name]; dup {
			return nil, fmt.Errorf("tensor %s: duplicate name", quoteTrunc(s.Name))
		}
		seen[s.Name] = struct{}{}
		if _, err := ParseDType(string(s.DType)); err != nil {
			return nil, fmt.Errorf("tensor %s: %v", quoteTrunc(s.Name), err)
		}
		for j, d := range s.Shape {
			if d < 0 {
				return nil, fmt.Errorf("tensor %s: shape[%d] = %d is negative", quoteTrunc(s.Name), j, d)
			}
		}
		n, err := byteSize(s.DType, s.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %v", quoteTrunc(s.Name), err)
		}
		if n > math.MaxInt64-pos {
			return nil, fmt.Errorf("tensor %s: file size overflows int64", quoteTrunc(s.Name))
		}
		rel[i] = [2]int64{pos, pos + n}
		pos += n

		if !first {
			js.WriteByte(',')
		}
		first = false
		if err := encode(s.Name); err != nil {
			return nil, err
		}
		js.WriteByte(':')
		shape := s.Shape
		if shape == nil {
			shape = []int64{} // a scalar: "shape":[]
		}
		if err := encode(entry{s.DType, shape, rel[i]}); err != nil {
			return nil, err
		}
	}
	js.WriteByte('}')
	// Pad with spaces so the data area starts 8-byte aligned, as the Python
	// library does.
	for js.Len()%8 != 0 {
		js.WriteByte(' ')
	}
	if js.Len() > MaxHeaderLen {
		return nil, fmt.Errorf("header would be %d bytes, over the limit of %d", js.Len(), MaxHeaderLen)
	}
	dataStart := 8 + int64(js.Len())
	if pos > math.MaxInt64-dataStart {
		return nil, errors.New("file size overflows int64")
	}
	hdr := make([]byte, 8, dataStart)
	binary.LittleEndian.PutUint64(hdr, uint64(js.Len()))
	hdr = append(hdr, js.Bytes()...)

	p := &Plan{Header: hdr, Tensors: make([]Tensor, len(specs)), Size: dataStart + pos}
	for i, s := range specs {
		p.Tensors[i] = Tensor{
			Name:   s.Name,
			DType:  s.DType,
			Shape:  append([]int64(nil), s.Shape...),
			Offset: dataStart + rel[i][0],
			Size:   rel[i][1] - rel[i][0],
		}
	}
	return p, nil
}

// Writer streams a safetensors file: the header first, then each tensor's
// bytes in spec order. It holds one tensor's worth of nothing: bytes go
// straight from each reader to the underlying writer.
type Writer struct {
	w    io.Writer
	plan *Plan
	next int
	err  error // sticky: after a failure every call returns it
}

// NewWriter plans the file and writes its header to w.
func NewWriter(w io.Writer, specs []Spec, metadata map[string]string) (*Writer, error) {
	p, err := PlanFile(specs, metadata)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(p.Header); err != nil {
		return nil, fmt.Errorf("writing header: %w", err)
	}
	return &Writer{w: w, plan: p}, nil
}

// Plan returns the layout being written.
func (w *Writer) Plan() *Plan { return w.plan }

// WriteTensor copies the next tensor's bytes from r. Tensors must come in
// spec order, and r must yield exactly the tensor's size: fewer or more
// bytes is an error naming the tensor.
func (w *Writer) WriteTensor(name string, r io.Reader) error {
	if w.err != nil {
		return w.err
	}
	if w.next >= len(w.plan.Tensors) {
		w.err = fmt.Errorf("tensor %s: all %d tensors already written", quoteTrunc(name), len(w.plan.Tensors))
		return w.err
	}
	t := w.plan.Tensors[w.next]
	if name != t.Name {
		w.err = fmt.Errorf("tensor %s written out of order: next is %s", quoteTrunc(name), quoteTrunc(t.Name))
		return w.err
	}
	n, err := io.CopyN(w.w, r, t.Size)
	if err != nil {
		if err == io.EOF {
			w.err = fmt.Errorf("tensor %s: reader gave %d bytes, want %d", quoteTrunc(name), n, t.Size)
		} else {
			w.err = fmt.Errorf("tensor %s: after %d of %d bytes: %w", quoteTrunc(name), n, t.Size, err)
		}
		return w.err
	}
	// The reader must be exhausted: one more read must give io.EOF.
	var extra [1]byte
	for tries := 0; ; tries++ {
		if tries == 100 {
			w.err = fmt.Errorf("tensor %s: reader returns no data and no io.EOF after its %d bytes", quoteTrunc(name), t.Size)
			return w.err
		}
		m, err := r.Read(extra[:])
		if m > 0 {
			w.err = fmt.Errorf("tensor %s: reader gave more than %d bytes", quoteTrunc(name), t.Size)
			return w.err
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			w.err = fmt.Errorf("tensor %s: after its %d bytes: %w", quoteTrunc(name), t.Size, err)
			return w.err
		}
	}
	w.next++
	return nil
}

// Close checks that every tensor was written. It does not close the
// underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.next < len(w.plan.Tensors) {
		w.err = fmt.Errorf("closed after %d of %d tensors: tensor %s not written",
			w.next, len(w.plan.Tensors), quoteTrunc(w.plan.Tensors[w.next].Name))
		return w.err
	}
	return nil
}

// WriteFile writes a safetensors file at path atomically: into a temporary
// file in the same directory, fsynced, renamed over path, and the directory
// fsynced. data supplies each tensor's bytes in spec order; a reader that is
// also an io.Closer is closed after use. On error nothing is left at path's
// temporary name and path is untouched. An existing path that is not a
// regular file (a device such as /dev/null, a FIFO, a directory) is refused
// with a *regfile.NotRegularError: the rename would replace it.
func WriteFile(path string, specs []Spec, metadata map[string]string, data func(i int, s Spec) (io.Reader, error)) (err error) {
	if err := CheckOutputPath(path); err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := NewWriter(bw, specs, metadata)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for i, s := range specs {
		r, err := data(i, s)
		if err != nil {
			return fmt.Errorf("%s: tensor %s: %w", path, quoteTrunc(s.Name), err)
		}
		werr := w.WriteTensor(s.Name, r)
		if c, ok := r.(io.Closer); ok {
			if cerr := c.Close(); cerr != nil && werr == nil {
				werr = fmt.Errorf("tensor %s: closing reader: %w", quoteTrunc(s.Name), cerr)
			}
		}
		if werr != nil {
			return fmt.Errorf("%s: %w", path, werr)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// CheckOutputPath reports whether WriteFile may write path: nothing there
// yet, or a regular file (or a symlink to one) that the rename replaces.
// Anything else is a *regfile.NotRegularError.
func CheckOutputPath(path string) error {
	if _, err := regfile.Check(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
