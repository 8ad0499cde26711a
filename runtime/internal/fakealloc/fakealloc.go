// Package fakealloc is a test double for a backend with its own memory
// (runtime.Allocator): a CPU backend that hands out memory, tracks every
// live allocation, poisons memory when it is freed (so a use after Free
// changes the results), and checks that the weights of every MatMul and
// RMSNorm lie in memory it allocated.
package fakealloc

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
)

// Align is the alignment of the memory Alloc returns (a page, like the
// Metal backend's, and what the runner's direct reads need).
const Align = 4096

// Poison is the byte freed memory is filled with.
const Poison = 0xA5

// Backend is a runtime.Backend (the CPU arithmetic) and runtime.Allocator.
// It is safe for concurrent use.
type Backend struct {
	runtime.CPU

	mu     sync.Mutex
	live   []block // sorted by address
	seq    int     // allocations so far
	frees  int
	bytes  int64 // live bytes
	calls  []Call
	strays []string
}

type block struct {
	addr uintptr
	mem  []byte
	seq  int // 1 for the first allocation
}

// Call is one checked argument of a MatMul or RMSNorm: where its weight
// lay.
type Call struct {
	Op    string // "MatMul" or "RMSNorm"
	Part  string // "weight", "scales", "biases"
	Rows  int
	Cols  int
	Block int // the allocation (1 = first) the bytes lie in; 0: none
}

var _ interface {
	runtime.Backend
	runtime.Allocator
} = (*Backend)(nil)

// New returns an empty Backend.
func New() *Backend { return &Backend{} }

func addr(p []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(p))) }

// Alloc implements runtime.Allocator: n zeroed bytes, Align-aligned.
func (b *Backend) Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("fakealloc: Alloc(%d)", n)
	}
	raw := make([]byte, n+Align)
	s := (Align - int(addr(raw)%Align)) % Align
	mem := raw[s : s+n : s+n]
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	blk := block{addr: addr(mem), mem: mem, seq: b.seq}
	i, _ := slices.BinarySearchFunc(b.live, blk.addr, func(x block, a uintptr) int { return cmpAddr(x.addr, a) })
	b.live = slices.Insert(b.live, i, blk)
	b.bytes += int64(n)
	return mem, nil
}

func cmpAddr(a, b uintptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Free implements runtime.Allocator: p must start where a live allocation
// starts. The whole allocation is poisoned and forgotten.
func (b *Backend) Free(p []byte) error {
	if len(p) == 0 {
		return fmt.Errorf("fakealloc: Free of an empty slice")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, ok := slices.BinarySearchFunc(b.live, addr(p), func(x block, a uintptr) int { return cmpAddr(x.addr, a) })
	if !ok {
		return fmt.Errorf("fakealloc: Free of memory that is not the start of a live allocation")
	}
	blk := b.live[i]
	for j := range blk.mem {
		blk.mem[j] = Poison
	}
	b.live = slices.Delete(b.live, i, i+1)
	b.frees++
	b.bytes -= int64(len(blk.mem))
	return nil
}

// find returns the allocation that holds all of p (0: none). Called with mu
// held.
func (b *Backend) find(p []byte) int {
	a := addr(p)
	i, ok := slices.BinarySearchFunc(b.live, a, func(x block, a uintptr) int { return cmpAddr(x.addr, a) })
	if !ok {
		i--
	}
	if i < 0 {
		return 0
	}
	blk := b.live[i]
	if a < blk.addr || a-blk.addr+uintptr(len(p)) > uintptr(len(blk.mem)) {
		return 0
	}
	return blk.seq
}

func (b *Backend) check(op, part string, rows, cols int, p []byte) {
	if len(p) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	seq := b.find(p)
	b.calls = append(b.calls, Call{Op: op, Part: part, Rows: rows, Cols: cols, Block: seq})
	if seq == 0 {
		b.strays = append(b.strays, fmt.Sprintf("%s [%d, %d] %s: %d bytes outside allocated memory", op, rows, cols, part, len(p)))
	}
}

// MatMul implements runtime.Backend: it checks w's arrays, then computes
// on the CPU.
func (b *Backend) MatMul(w mlxq.Matrix, y, x []float32, n int) {
	b.check("MatMul", "weight", w.Rows, w.Cols, w.Weight)
	b.check("MatMul", "scales", w.Rows, w.Cols, w.Scales)
	b.check("MatMul", "biases", w.Rows, w.Cols, w.Biases)
	b.CPU.MatMul(w, y, x, n)
}

// RMSNorm implements runtime.Backend: it checks w, then computes on the
// CPU.
func (b *Backend) RMSNorm(y, x, w []float32, eps float32) {
	if len(w) > 0 {
		b.check("RMSNorm", "weight", 1, len(w), unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), 4*len(w)))
	}
	b.CPU.RMSNorm(y, x, w, eps)
}

// Holds reports whether all of p lies in one live allocation.
func (b *Backend) Holds(p []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(p) > 0 && b.find(p) != 0
}

// Calls returns the checked arguments so far, in order.
func (b *Backend) Calls() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// Strays describes the checked arguments that lay outside allocated memory.
func (b *Backend) Strays() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.strays)
}

// Reset forgets the calls and strays (not the allocations).
func (b *Backend) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls, b.strays = nil, nil
}

// Counts returns the allocations made, the frees, and the live allocations
// and their bytes.
func (b *Backend) Counts() (allocs, frees, live int, liveBytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq, b.frees, len(b.live), b.bytes
}

// Size returns the size of allocation seq (1 = first) if it is live, else 0.
func (b *Backend) Size(seq int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, blk := range b.live {
		if blk.seq == seq {
			return len(blk.mem)
		}
	}
	return 0
}

// Plain returns a Backend with the same checks and arithmetic that is not
// an Allocator: the default path, where nothing is allocated through it.
func (b *Backend) Plain() runtime.Backend { return plain{b} }

type plain struct{ b *Backend }

func (p plain) MatMul(w mlxq.Matrix, y, x []float32, n int) { p.b.MatMul(w, y, x, n) }
func (p plain) RMSNorm(y, x, w []float32, eps float32)      { p.b.RMSNorm(y, x, w, eps) }
func (p plain) SwiGLU(y, gate, up []float32)                { p.b.SwiGLU(y, gate, up) }
