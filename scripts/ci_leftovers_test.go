package scripts

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runLeftovers runs ci-leftovers.sh on dir and returns its exit status and
// output.
func runLeftovers(t *testing.T, dir string) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", "ci-leftovers.sh", dir)
	cmd.Env = append(os.Environ(), "CI_LEFTOVER_WAIT=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

func TestCILeftovers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("uses /proc")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if status, out := runLeftovers(t, dir); status != 0 {
		t.Fatalf("nothing running from %s: exit status %d:\n%s", dir, status, out)
	}

	// A process whose executable lies in dir, still running.
	bin := filepath.Join(dir, "lingerer")
	must(t, os.WriteFile(bin, data, 0o755))
	p := exec.Command(bin, "60")
	must(t, p.Start())
	exited := make(chan struct{})
	go func() { _ = p.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = p.Process.Kill()
		<-exited
	})
	status, out := runLeftovers(t, dir)
	if status != 1 || !strings.Contains(out, strconv.Itoa(p.Process.Pid)) || !strings.Contains(out, "lingerer") {
		t.Fatalf("a process left running from %s: exit status %d, output:\n%s", dir, status, out)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the leftover process was not killed")
	}
}
