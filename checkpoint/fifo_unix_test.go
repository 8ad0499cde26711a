//go:build unix

package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qpack-go/qpack/internal/bounded"

	"github.com/qpack-go/qpack/internal/regfile"
)

// A FIFO (or a link to one) as a shard, as the index or as config.json is
// refused with an error naming it, without blocking.
func TestOpenDirRefusesFIFO(t *testing.T) {
	for _, name := range []string{"model-00002-of-00003.safetensors", "model.safetensors.index.json", "config.json"} {
		for _, viaLink := range []bool{false, true} {
			dir := copyDir(t, tinyDir)
			p := filepath.Join(dir, name)
			os.Remove(p)
			fifo := p
			if viaLink {
				fifo = filepath.Join(t.TempDir(), "fifo")
				if err := os.Symlink(fifo, p); err != nil {
					t.Fatal(err)
				}
			}
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Skip("no FIFOs:", err)
			}
			bounded.Within(t, 10*time.Second, "OpenDir with a FIFO "+name, func() {
				s, err := OpenDir(dir)
				if err == nil && name == "config.json" {
					_, err = s.ReadFile(context.Background(), name, 1<<20)
					s.Close()
				}
				if err == nil || !regfile.IsNotRegular(err) || !strings.Contains(err.Error(), name) {
					t.Errorf("%s (link %v): err = %v, want a not-a-regular-file error naming it", name, viaLink, err)
				}
			})
		}
	}
}
