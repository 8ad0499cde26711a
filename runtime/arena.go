package runtime

import (
	"fmt"
	"math"
	"unsafe"
)

// arenaAlign is the alignment of every tensor in a dense arena: more than
// the 2 bytes the quantized kernels need and the 4 of float32 vectors, and a
// cache line.
const arenaAlign = 64

// denseArena holds the dense tensors a Model keeps in one allocation from an
// Allocator. A Model is built twice when it has one: a sizing pass (mem nil)
// that checks every tensor and adds up its place, then the real pass that
// reads each tensor straight into its place.
type denseArena struct {
	al  Allocator
	mem []byte // nil while sizing
	off int64  // bytes placed (sizing: bytes needed)
}

func arenaAlignUp(n int64) int64 { return (n + arenaAlign - 1) &^ (arenaAlign - 1) }

// reserve adds n bytes to the size (sizing pass).
func (a *denseArena) reserve(n int64) { a.off = arenaAlignUp(a.off) + n }

// newDenseArena allocates size bytes (at least one) from al.
func newDenseArena(al Allocator, size int64) (*denseArena, error) {
	if size > math.MaxInt {
		return nil, fmt.Errorf("dense weights: %d bytes do not fit this platform's address space", size)
	}
	mem, err := al.Alloc(int(max(size, 1)))
	if err != nil {
		return nil, fmt.Errorf("dense weights: allocating %d bytes: %w", size, err)
	}
	if int64(len(mem)) < size {
		al.Free(mem)
		return nil, fmt.Errorf("dense weights: the allocator returned %d bytes for %d", len(mem), size)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%arenaAlign != 0 {
		al.Free(mem)
		return nil, fmt.Errorf("dense weights: the allocator returned memory that is not %d-byte aligned", arenaAlign)
	}
	return &denseArena{al: al, mem: mem}, nil
}

// take places n bytes at the next aligned offset.
func (a *denseArena) take(n int64) ([]byte, error) {
	start := arenaAlignUp(a.off)
	if n < 0 || start+n > int64(len(a.mem)) {
		return nil, fmt.Errorf("%d bytes do not fit the %d-byte dense arena at offset %d (the tensors changed since it was sized)", n, len(a.mem), start)
	}
	a.off = start + n
	return a.mem[start : start+n : start+n], nil
}

// float32s places n float32 values.
func (a *denseArena) float32s(n int64) ([]float32, error) {
	if n == 0 {
		return []float32{}, nil
	}
	b, err := a.take(4 * n)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
}

// free gives the arena back to its allocator.
func (a *denseArena) free() error {
	if a == nil || a.mem == nil {
		return nil
	}
	mem := a.mem
	a.mem = nil
	if err := a.al.Free(mem); err != nil {
		return fmt.Errorf("dense weights: freeing the arena: %w", err)
	}
	return nil
}

// tensorReaderInto is an optional TensorSource method: read a tensor into
// dst, which has exactly its size, without an intermediate copy.
type tensorReaderInto interface {
	ReadInto(name string, dst []byte) error
}

// readInto fills dst with tensor name from src.
func readInto(src TensorSource, name string, dst []byte) error {
	if r, ok := src.(tensorReaderInto); ok {
		return r.ReadInto(name, dst)
	}
	data, err := src.Read(name)
	if err != nil {
		return err
	}
	if len(data) != len(dst) {
		return fmt.Errorf("tensor %s: %d bytes, want %d", name, len(data), len(dst))
	}
	copy(dst, data)
	return nil
}

// ArenaBytes returns the bytes the Model's dense weights take in memory
// from its Allocator (0 when it has none: they are then in the Go heap or
// wherever its TensorSource keeps them).
func (m *Model) ArenaBytes() int64 {
	if m.arena == nil {
		return 0
	}
	return int64(len(m.arena.mem))
}
