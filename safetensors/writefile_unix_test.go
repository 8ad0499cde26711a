//go:build unix

package safetensors

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/qpack-go/qpack/internal/regfile"
)

// WriteFile refuses a path that is a FIFO (as it would a device such as
// /dev/null): renaming the temporary file over it would replace it. A
// regular file is still replaced.
func TestWriteFileRefusesNotRegular(t *testing.T) {
	dir := t.TempDir()
	specs := []Spec{{Name: "x", DType: U8, Shape: []int64{2}}}
	data := func(int, Spec) (io.Reader, error) { return bytes.NewReader([]byte{1, 2}), nil }
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no FIFOs:", err)
	}
	err := WriteFile(fifo, specs, nil, data)
	var nr *regfile.NotRegularError
	if !errors.As(err, &nr) || nr.Path != fifo {
		t.Fatalf("WriteFile onto a FIFO: err = %v, want a *regfile.NotRegularError for %s", err, fifo)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced: %v %v", st, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("files left behind: %v", entries)
	}
	reg := filepath.Join(dir, "old.safetensors")
	if err := os.WriteFile(reg, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(reg, specs, nil, data); err != nil {
		t.Fatalf("WriteFile onto a regular file: %v", err)
	}
	if b, _ := os.ReadFile(reg); bytes.Equal(b, []byte("old")) {
		t.Fatal("the regular file was not replaced")
	}
}
