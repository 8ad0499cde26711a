package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the master, and the slave's path.
func openPTY() (*os.File, string, error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, "", err
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, "", fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, "", fmt.Errorf("ptsname: %w", err)
	}
	return m, fmt.Sprintf("/dev/pts/%d", n), nil
}

// chat with no turns on a terminal is an interactive conversation: a
// prompt per turn; Ctrl-C (typed on the terminal, so the line discipline
// sends SIGINT) stops the reply and returns to the prompt; /reset starts
// over; Ctrl-C twice at the prompt exits 130.
func TestChatInteractivePTY(t *testing.T) {
	bin := qpackBinary(t)
	model := endlessModel(t)
	master, slavePath, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer master.Close()
	slave, err := os.OpenFile(slavePath, os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	cmd := exec.Command(bin, "chat", model, "-m", "1000000", "--no-think")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var out syncBuffer
	go io.Copy(&out, master)
	const d = 30 * time.Second

	n := waitFor(t, &out, 0, ">> ", d)
	io.WriteString(master, "hello\n")
	n = waitFor(t, &out, n, "hello\r\n", d)
	waitMore(t, &out, n+8, d) // the reply is streaming
	io.WriteString(master, "\x03")
	n = waitFor(t, &out, n, "stopped by an interrupt;", d)
	n = waitFor(t, &out, n, ">> ", d)
	if cmd.ProcessState != nil {
		t.Fatal("exited after Ctrl-C during a reply")
	}
	io.WriteString(master, "/reset\n")
	n = waitFor(t, &out, n, "[new conversation]", d)
	n = waitFor(t, &out, n, ">> ", d)
	io.WriteString(master, "\x03")
	n = waitFor(t, &out, n, "[Ctrl-C again, /exit or Ctrl-D to quit]", d)
	waitFor(t, &out, n, ">> ", d)
	io.WriteString(master, "\x03")
	if code := waitExit(t, cmd, d); code != 130 {
		t.Fatalf("exit %d after Ctrl-C twice at the prompt, want 130; output:\n%s", code, out.String())
	}
}

// A FIFO where generate reads a small file (generation_config.json in the
// model, refs/main in the cache) is refused at once with exit 2, not
// opened (which would block until a writer came).
func TestGenerateRefusesFIFO(t *testing.T) {
	model := copyModel(t, func(dir string) {
		p := filepath.Join(dir, "generation_config.json")
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
	})
	root, _ := fakeCache(t)
	ref := filepath.Join(root, "models--org--tiny", "refs", "main")
	os.Remove(ref)
	if err := syscall.Mkfifo(ref, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	t.Setenv("HF_HUB_CACHE", root)
	for _, m := range []string{model, "org/tiny"} {
		done := make(chan error, 1)
		go func() {
			_, _, err := runGenCLI(t, "generate", m, "--prompt", "x")
			done <- err
		}()
		select {
		case err := <-done:
			wantExit2(t, err, "not a regular file", m)
		case <-time.After(20 * time.Second):
			t.Fatalf("generate %s blocked on a FIFO", m)
		}
	}
}
