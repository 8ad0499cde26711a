//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qpack-go/qpack/internal/bounded"
)

// A FIFO, or a link to one, in a local checkpoint is refused (exit 2, the
// file named) by repack --from-dir, inspect and verify-install --deep
// --source, without blocking.
func TestLocalSourcesRefuseFIFO(t *testing.T) {
	good := srcCopy(t, srcTiny)
	container := filepath.Join(t.TempDir(), "m.qpack")
	if out, err := runCLI(t, "repack", "--from-dir", good, "--output", container, "--reserve", "-1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, name := range []string{"model-00002-of-00003.safetensors", "config.json", "model.safetensors.index.json"} {
		for _, viaLink := range []bool{false, true} {
			dir := srcCopy(t, srcTiny)
			p := filepath.Join(dir, name)
			os.Remove(p)
			fifo := p
			if viaLink {
				fifo = filepath.Join(t.TempDir(), "pipe")
				os.Symlink(fifo, p)
			}
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Skip("no FIFOs:", err)
			}
			cases := [][]string{
				{"repack", "--from-dir", dir, "--output", filepath.Join(t.TempDir(), "x.qpack"), "--reserve", "-1"},
				{"inspect", dir},
			}
			if name != "config.json" { // the deep check reads no config.json from the source
				cases = append(cases, []string{"verify-install", container, "--deep", "--source", dir, "--no-receipt"})
			}
			if strings.HasSuffix(name, ".safetensors") {
				cases = append(cases, []string{"inspect", p})
			}
			for _, args := range cases {
				what := strings.Join(args[:2], " ") + " with " + name
				if viaLink {
					what += " (a link to a FIFO)"
				}
				bounded.Within(t, 15*time.Second, what, func() {
					out, err := runCLI(t, args...)
					if err == nil || vfExitCode(err) != 2 || !strings.Contains(err.Error()+out, name) || !strings.Contains(err.Error()+out, "not a regular file") {
						t.Errorf("%s: exit %d, %v\n%s", what, vfExitCode(err), err, out)
					}
				})
			}
		}
	}
}
