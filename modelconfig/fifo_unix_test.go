//go:build unix

package modelconfig

import (
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/internal/fifotest"
)

// A FIFO in place of config.json is refused, not waited on (runtime's
// LoadConfig reads through Load).
func TestLoadRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, FileName)
	fifotest.Make(t, p)
	fifotest.Refused(t, p, func() error { _, err := Load(dir); return err })
}
