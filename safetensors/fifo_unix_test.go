//go:build unix

package safetensors

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qpack-go/qpack/internal/bounded"
)

// The runner loads checkpoint directories through OpenCheckpoint: a FIFO
// (or a link to one) as a shard or as the index is refused without
// blocking.
func TestOpenCheckpointRefusesFIFO(t *testing.T) {
	for _, name := range []string{"model.safetensors", IndexFile} {
		dir := t.TempDir()
		if name == IndexFile {
			os.WriteFile(filepath.Join(dir, "model-00001-of-00001.safetensors"), []byte{}, 0o644)
		}
		fifo := filepath.Join(t.TempDir(), "pipe")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Skip("no FIFOs:", err)
		}
		if err := os.Symlink(fifo, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		bounded.Within(t, 10*time.Second, "OpenCheckpoint with a FIFO "+name, func() {
			_, err := OpenCheckpoint(dir)
			if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), name) {
				t.Errorf("%s: err = %v", name, err)
			}
		})
	}
}
