package cpurun

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

// scaleParams is the Unary block of the scale kernel (x *= c for n
// elements) with x at byte off of buffer 0.
func scaleParams(off, n int, c float32) []byte {
	p := binary.LittleEndian.AppendUint64(nil, Addr(0, off))
	p = binary.LittleEndian.AppendUint32(p, uint32(n))
	return binary.LittleEndian.AppendUint32(p, math.Float32bits(c))
}

func floats(v ...float32) []byte {
	var b []byte
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// One executor serves launch after launch; a launch that writes past its
// buffer (the guard page) or that the executor refuses ends the process
// with an error naming the kernel, and the next launch gets a fresh one;
// Close ends it.
func TestHarnessLaunches(t *testing.T) {
	h, err := Build(t.TempDir())
	if errors.Is(err, ErrNoCompiler) {
		t.Skip("g++ not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	scale := func(buf []byte, off, n int, c float32) error {
		return h.Launch("scale", (n+255)/256, scaleParams(off, n, c), [][]byte{buf})
	}
	check := func(what string, buf []byte, want ...float32) {
		t.Helper()
		if got := string(buf); got != string(floats(want...)) {
			t.Fatalf("%s: got % x, want %v", what, buf, want)
		}
	}
	buf := floats(1, 2, 3, 4)
	if err := scale(buf, 4, 2, 10); err != nil {
		t.Fatal(err)
	}
	check("first launch", buf, 1, 20, 30, 4)
	first := h.proc
	if err := scale(buf, 0, 4, 0.5); err != nil {
		t.Fatal(err)
	}
	check("second launch", buf, 0.5, 10, 15, 2)
	if h.proc != first || first == nil {
		t.Fatal("the second launch did not reuse the executor")
	}

	// 300 elements of a 4-element buffer: the write past its end faults.
	err = scale(floats(1, 2, 3, 4), 0, 300, 2)
	if err == nil || !strings.Contains(err.Error(), "scale") {
		t.Fatalf("a launch past its buffer: %v", err)
	}
	if h.proc != nil {
		t.Fatal("the crashed executor is still the harness's")
	}
	if err := scale(buf, 0, 1, 4); err != nil {
		t.Fatalf("the launch after a crash: %v", err)
	}
	check("after a crash", buf, 2, 10, 15, 2)

	// A parameter block of the wrong size: refused by the executor.
	err = h.Launch("scale", 1, append(scaleParams(0, 1, 1), 0, 0, 0, 0), [][]byte{buf})
	if err == nil || !strings.Contains(err.Error(), "parameter block of 20 bytes") {
		t.Fatalf("a parameter block of 20 bytes: %v", err)
	}
	if err := scale(buf, 12, 1, -1); err != nil {
		t.Fatalf("the launch after a refusal: %v", err)
	}
	check("after a refusal", buf, 2, 10, 15, -2)

	p := h.proc
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if h.proc != nil || p.cmd.ProcessState == nil || !p.cmd.ProcessState.Exited() || p.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("after Close: %v", p.cmd.ProcessState)
	}
}
