package cpurun

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/qpack-go/qpack/internal/gpukernels"
)

//go:embed src/prelude_cpu.h
var prelude string

//go:embed src/exec.cpp
var executor string

//go:embed src/fiber.h
var fiber string

// ErrNoCompiler is returned by Build when g++ is not installed.
var ErrNoCompiler = errors.New("cpurun: g++ not found")

// Harness is the compiled executor of every kernel body. Launches go to
// one executor process, in turn (a launch that fails or crashes ends it;
// the next starts another); Close ends it.
type Harness struct {
	bin  string
	nptr map[string]int // pointer fields of each kernel's parameter struct

	mu   sync.Mutex
	proc *execProc // the running executor process, or nil
}

// execProc is a running executor process.
type execProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer // written by the process's copier until Wait returns
}

// Build compiles the bodies and the executor into dir.
func Build(dir string) (*Harness, error) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		return nil, ErrNoCompiler
	}
	files := map[string]string{
		"prelude_cpu.h": prelude,
		"exec.cpp":      executor,
		"fiber.h":       fiber,
		"kernels.cpp":   "#include \"prelude_cpu.h\"\n" + gpukernels.Bodies(),
	}
	for n, s := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(s), 0o644); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(dir, "qkexec")
	cmd := exec.Command(gxx, "-std=c++17", "-O1", "-Wall", "-Werror", "-Wno-unused-function", "-o", bin, "exec.cpp", "kernels.cpp")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("cpurun: g++: %v\n%s", err, out)
	}
	nptr, err := pointerFields(gpukernels.Bodies())
	if err != nil {
		return nil, err
	}
	return &Harness{bin: bin, nptr: nptr}, nil
}

// pointerFields maps each kernel to the number of QP_GLOBAL fields its
// parameter struct starts with.
func pointerFields(src string) (map[string]int, error) {
	structs := map[string]int{}
	for _, m := range regexp.MustCompile(`(?s)struct (\w+) \{(.*?)\};`).FindAllStringSubmatch(src, -1) {
		structs[m[1]] = strings.Count(m[2], "QP_GLOBAL")
	}
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`QP_ENTRY\((\w+), (\w+)\)`).FindAllStringSubmatch(src, -1) {
		n, ok := structs[m[2]]
		if !ok {
			return nil, fmt.Errorf("cpurun: kernel %s: no struct %s", m[1], m[2])
		}
		out[m[1]] = n
	}
	return out, nil
}

// Addr is the address of byte off of buffer i, as a parameter block holds
// it for Launch.
func Addr(i, off int) uint64 { return uint64(i+1)<<40 | uint64(off) }

// start starts an executor process; h.mu held.
func (h *Harness) start() error {
	cmd := exec.Command(h.bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cpurun: starting the executor: %w", err)
	}
	h.proc = &execProc{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), stderr: &stderr}
	return nil
}

// stop ends the executor (closing its input ends its loop) and returns
// what it wrote to stderr; h.mu held.
func (h *Harness) stop() string {
	p := h.proc
	if p == nil {
		return ""
	}
	h.proc = nil
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		return fmt.Sprintf("%v %s", err, p.stderr.String())
	}
	return p.stderr.String()
}

// Close ends the executor process, if one is running.
func (h *Harness) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stop()
	return nil
}

// Launch runs kernel over groups groups of 256 threads with the parameter
// block params, whose pointer fields hold Addr addresses into bufs; bufs
// are updated with what the kernel wrote.
func (h *Harness) Launch(kernel string, groups int, params []byte, bufs [][]byte) error {
	nptr, ok := h.nptr[kernel]
	if !ok {
		return fmt.Errorf("cpurun: no kernel %s", kernel)
	}
	var in bytes.Buffer
	le := binary.LittleEndian
	w32 := func(v int) { in.Write(le.AppendUint32(nil, uint32(v))) }
	w32(len(kernel))
	in.WriteString(kernel)
	w32(groups)
	w32(len(bufs))
	for _, b := range bufs {
		in.Write(le.AppendUint64(nil, uint64(len(b))))
		in.Write(b)
	}
	w32(len(params))
	in.Write(params)
	w32(nptr)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil {
		if err := h.start(); err != nil {
			return err
		}
	}
	p := h.proc
	// The executor reads the whole request before it writes (a reply
	// never blocks the request's write).
	_, err := p.in.Write(in.Bytes())
	var status [4]byte
	if err == nil {
		_, err = io.ReadFull(p.out, status[:])
	}
	if err != nil {
		return fmt.Errorf("cpurun: kernel %s: %v (out of bounds?) %s", kernel, err, h.stop())
	}
	if le.Uint32(status[:]) != 0 {
		var n [4]byte
		var msg []byte
		if _, err = io.ReadFull(p.out, n[:]); err == nil && le.Uint32(n[:]) >= 1<<20 {
			err = fmt.Errorf("a message of %d bytes", le.Uint32(n[:]))
		}
		if err == nil {
			msg = make([]byte, le.Uint32(n[:]))
			_, err = io.ReadFull(p.out, msg)
		}
		h.stop() // it ended after the message
		if err != nil {
			return fmt.Errorf("cpurun: kernel %s: a failure without its message: %v", kernel, err)
		}
		return fmt.Errorf("cpurun: kernel %s: %s", kernel, msg)
	}
	for _, b := range bufs {
		if _, err := io.ReadFull(p.out, b); err != nil {
			return fmt.Errorf("cpurun: kernel %s: short reply: %v %s", kernel, err, h.stop())
		}
	}
	return nil
}
