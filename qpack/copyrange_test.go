package qpack

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tempFileWith(t *testing.T, data []byte) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "src.bin")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// CopyFrom and CopyDenseFrom place the source bytes exactly where asked,
// with the same checks as the writes.
func TestCopyFrom(t *testing.T) {
	lay := bigLayout(t, 3, 2)
	src := randBytes(int(lay.LayerSize())+5000, 77)
	f := tempFileWith(t, src)
	dst := filepath.Join(t.TempDir(), "out.qpack")
	w, err := Create(dst, lay, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	plan, err := w.CreateDense(denseSpecs, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Layer 0 whole from byte 5000 of the source, in three uneven copies;
	// layer 1 one piece of 3 MiB + 1 at an odd offset.
	size := lay.LayerSize()
	cuts := []int64{0, 12345, size / 2, size}
	for i := 0; i+1 < len(cuts); i++ {
		if err := w.CopyFrom(0, f, 5000+cuts[i], cuts[i], cuts[i+1]-cuts[i]); err != nil {
			t.Fatal(err)
		}
	}
	const n1 = 3<<20 + 1
	if err := w.CopyFrom(1, f, 17, 999, n1); err != nil {
		t.Fatal(err)
	}
	start := int64(len(plan.Header))
	if err := w.CopyDenseFrom(f, 3, start, plan.Size-start); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	read := func(rel string) []byte {
		b, err := os.ReadFile(filepath.Join(w.Dir(), filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(read(LayerFile(0)), src[5000:5000+size]) {
		t.Error("layer 0 differs from the source bytes copied")
	}
	want1 := make([]byte, size)
	copy(want1[999:], src[17:17+n1])
	if !bytes.Equal(read(LayerFile(1)), want1) {
		t.Error("layer 1 differs from the source bytes copied")
	}
	if d := read(DenseName); !bytes.Equal(d[:start], plan.Header) || !bytes.Equal(d[start:], src[3:3+plan.Size-start]) {
		t.Error("model.safetensors differs from its header and the source bytes copied")
	}

	// Checks.
	if err := w.CopyFrom(0, f, 0, size-10, 11); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("copy past the end of a layer: %v", err)
	}
	if err := w.CopyFrom(0, f, -1, 0, 1); err == nil {
		t.Error("copy from a negative source offset: no error")
	}
	if err := w.CopyFrom(2, f, 0, 0, 1); err == nil {
		t.Error("copy to a layer out of range: no error")
	}
	if err := w.CopyDenseFrom(f, 0, start-1, 2); err == nil || !strings.Contains(err.Error(), "data area") {
		t.Errorf("copy over the dense header: %v", err)
	}
	if err := w.CopyFrom(1, f, int64(len(src))-10, 0, 11); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("copy past the end of the source: %v", err)
	}
	if err := w.SealLayer(1); err != nil {
		t.Fatal(err)
	}
	if err := w.CopyFrom(1, f, 0, 0, 10); err == nil || !strings.Contains(err.Error(), "sealed") {
		t.Errorf("copy to a sealed layer: %v", err)
	}
}

// The read/write fallback gives the same bytes as the kernel copy.
func TestCopyRangeFallback(t *testing.T) {
	src := randBytes(3<<20+77, 5)
	f := tempFileWith(t, src)
	out, err := os.Create(filepath.Join(t.TempDir(), "dst.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := copyRangeRW(out, 10, f, 7, int64(len(src))-7); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out.Name())
	if !bytes.Equal(got[10:], src[7:]) || len(got) != len(src)+3 {
		t.Error("fallback copy differs")
	}
	if err := copyRangeRW(out, 0, f, int64(len(src))-5, 6); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("fallback copy past the end: %v", err)
	}
}
