//go:build unix

package tokenizer

import (
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/internal/fifotest"
)

// A FIFO in place of tokenizer.json is refused, not waited on.
func TestLoadRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	fifotest.Make(t, p)
	fifotest.Refused(t, p, func() error { _, err := LoadDir(dir); return err })
}
