//go:build unix

package sample

import (
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/internal/fifotest"
)

// A FIFO in place of generation_config.json (or config.json, read for the
// EOS ids) is refused, not waited on.
func TestLoadRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "generation_config.json")
	fifotest.Make(t, p)
	fifotest.Refused(t, p, func() error { _, err := LoadGenerationConfig(dir); return err })
	fifotest.Refused(t, p, func() error { _, err := LoadEOS(dir); return err })

	dir = t.TempDir()
	p = filepath.Join(dir, "config.json")
	fifotest.Make(t, p)
	fifotest.Refused(t, p, func() error { _, err := LoadEOS(dir); return err })
}
