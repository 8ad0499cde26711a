package cpurun

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

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

// Harness is the compiled executor of every kernel body.
type Harness struct {
	bin  string
	nptr map[string]int // pointer fields of each kernel's parameter struct
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
	cmd := exec.Command(h.bin)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("cpurun: kernel %s: %v (out of bounds?) %s", kernel, err, stderr.String())
	}
	if len(out) < 4 {
		return fmt.Errorf("cpurun: kernel %s: short reply", kernel)
	}
	if le.Uint32(out) != 0 {
		n := int(le.Uint32(out[4:]))
		return fmt.Errorf("cpurun: kernel %s: %s", kernel, out[8:8+n])
	}
	out = out[4:]
	for _, b := range bufs {
		if len(out) < len(b) {
			return fmt.Errorf("cpurun: kernel %s: short reply", kernel)
		}
		copy(b, out[:len(b)])
		out = out[len(b):]
	}
	return nil
}
