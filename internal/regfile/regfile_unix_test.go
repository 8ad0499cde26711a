//go:build unix

package regfile

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qpack-go/qpack/internal/bounded"
)

func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("fifo", link); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	if l, err := net.Listen("unix", sock); err == nil {
		defer l.Close()
	}
	reg := filepath.Join(dir, "reg")
	os.WriteFile(reg, []byte("hello"), 0o644)
	for _, c := range []struct{ path, want string }{
		{fifo, "a FIFO"}, {link, "a FIFO"}, {dir, "a directory"}, {"/dev/null", "a character device"}, {sock, "a socket"},
	} {
		if _, err := os.Lstat(c.path); err != nil {
			continue
		}
		bounded.Within(t, 5*time.Second, "Open("+c.path+")", func() {
			_, _, err := Open(c.path)
			if err == nil || !IsNotRegular(err) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Errorf("Open(%s) = %v, want a NotRegularError saying %q", c.path, err, c.want)
			}
			if _, err := ReadFile(c.path, 100); err == nil || !IsNotRegular(err) {
				t.Errorf("ReadFile(%s) = %v, want a NotRegularError", c.path, err)
			}
		})
	}
	data, err := ReadFile(reg, 5)
	if err != nil || string(data) != "hello" {
		t.Fatalf("ReadFile = %q, %v", data, err)
	}
	if _, err := ReadFile(reg, 4); err == nil || !strings.Contains(err.Error(), "more than the 4 allowed") {
		t.Fatalf("ReadFile over the limit = %v", err)
	}
}
