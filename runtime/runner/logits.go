package runner

import (
	"sync"
	"unsafe"

	"github.com/qpack-go/qpack/runtime"
)

// logitsPool lends each running decode loop a logits buffer of one row
// from the backend's Allocator (pinned memory on CUDA: the device copies a
// step's logits straight into it, where a Go slice costs a pass through
// staging, 1 MB at a 248K vocabulary). A loop takes one for its whole
// decode and gives it back when it returns; the pool frees them all at
// Close. Without an Allocator it lends nothing and the loop reuses its
// own slice.
type logitsPool struct {
	al    runtime.Allocator // nil: none
	n     int               // floats a buffer holds (the vocabulary)
	mu    sync.Mutex
	free  [][]float32
	all   [][]byte // every buffer made, for close
	fails int      // allocations refused (then the loop goes without)
}

// newLogitsPool lends buffers of vocab floats from al (nil: none).
func newLogitsPool(al runtime.Allocator, vocab int) *logitsPool {
	return &logitsPool{al: al, n: vocab}
}

// take returns a buffer (nil: none; the caller uses a Go slice).
func (p *logitsPool) take() []float32 {
	if p == nil || p.al == nil || p.n <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free = p.free[:k-1]
		return b
	}
	mem, err := p.al.Alloc(4 * p.n)
	if err != nil {
		p.fails++
		return nil
	}
	p.all = append(p.all, mem)
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(mem))), p.n)
}

// give returns a buffer from take (nil is ignored).
func (p *logitsPool) give(b []float32) {
	if b == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, b[:p.n])
}

// close frees every buffer; none may be in use.
func (p *logitsPool) close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for _, mem := range p.all {
		if err := p.al.Free(mem); err != nil && first == nil {
			first = err
		}
	}
	p.all, p.free = nil, nil
	return first
}
