package nn

import (
	"sync"
	"unsafe"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// Binding is a graph's residency hook on one Device: each dense matrix and
// vector the graph uses is made resident on the device the first time it
// is asked for (a GPU uploads it once), and the handle is kept for the
// graph's lifetime. Keys are the addresses of the graph's own, immutable
// weights; routed experts never go through a Binding (Device.Expert).
type Binding struct {
	Dev  Device
	mu   sync.Mutex
	mats map[*mlxq.Matrix]Mat
	vecs map[vecKey]Tensor
	err  error
}

type vecKey struct {
	p *float32
	n int
}

// NewBinding returns an empty binding to dev.
func NewBinding(dev Device) *Binding {
	return &Binding{Dev: dev, mats: map[*mlxq.Matrix]Mat{}, vecs: map[vecKey]Tensor{}}
}

// M returns the resident handle of *m.
func (b *Binding) M(m *mlxq.Matrix) Mat {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.mats[m]; ok {
		return h
	}
	h, err := b.Dev.Resident(*m)
	if err != nil {
		b.fail(err)
		return Mat{W: *m}
	}
	b.mats[m] = h
	return h
}

// V returns the resident tensor of v (nil or empty: an empty tensor).
func (b *Binding) V(v []float32) Tensor {
	if len(v) == 0 {
		return Tensor{}
	}
	k := vecKey{p: unsafe.SliceData(v), n: len(v)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t, ok := b.vecs[k]; ok {
		return t
	}
	t, err := b.Dev.Constant(v)
	if err != nil {
		b.fail(err)
		return Tensor{}
	}
	b.vecs[k] = t
	return t
}

func (b *Binding) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// Err is the first error making a weight resident.
func (b *Binding) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Bindings holds a graph's Binding to the device it last ran on (a graph
// embeds one; safe for concurrent use).
type Bindings struct {
	mu sync.Mutex
	b  *Binding
}

// For returns the binding to dev, made on first use or when the device
// changed; fresh says it was just made (state derived from the old one
// must be made again).
func (s *Bindings) For(dev Device) (b *Binding, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b == nil || s.b.Dev != dev {
		s.b, fresh = NewBinding(dev), true
	}
	return s.b, fresh
}
