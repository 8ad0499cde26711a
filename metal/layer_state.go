package metal

import (
	"fmt"
	goruntime "runtime"

	"github.com/qpack-go/qpack/runtime/nn"
)

// Layer states of the Device: KV caches and the DeltaNet tensors, in Alloc
// memory of their own (the GPU uses them in place). A state's memory is
// given back when the state is no longer reachable (a cleanup) or when the
// backend closes.

// stateMem is the memory of one state, what its cleanup releases.
type stateMem struct {
	d    *Device
	bufs []*mbuf
}

func (d *Device) newStateMem() *stateMem { return &stateMem{d: d} }

// attach registers the cleanup of s's memory once owner is unreachable.
func attach[T any](owner *T, m *stateMem) {
	goruntime.AddCleanup(owner, func(m *stateMem) { m.release() }, m)
}

func (m *stateMem) release() {
	d := m.d
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range m.bufs {
		if d.owned[b.r] {
			d.release(b.r)
		}
	}
	m.bufs = nil
}

// kvState is the Device's KV cache. Layout (the shared attention kernel's):
// K rows of kW floats and V rows of vW floats; a full cache holds position
// j at row j (its rows grow by doubling), a sliding-window cache (window W)
// position j at row j % W.
type kvState struct {
	d              *Device
	kW, vW, window int
	k, v           nn.Tensor // rows × kW, rows × vW
	rows           int
	n              int
	mem            *stateMem
}

// NewKV implements nn.Device.
func (d *Device) NewKV(kWidth, vWidth, window int) (nn.KVState, error) {
	if kWidth < 1 || vWidth < 1 || window < 0 {
		return nil, fmt.Errorf("metal: NewKV(%d, %d, %d)", kWidth, vWidth, window)
	}
	c := &kvState{d: d, kW: kWidth, vW: vWidth, window: window, mem: d.newStateMem()}
	attach(c, c.mem)
	if window > 0 {
		d.mu.Lock()
		err := c.grow(window)
		d.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// grow makes room for rows rows (d.mu held, nothing in flight).
func (c *kvState) grow(rows int) error {
	if rows <= c.rows {
		return nil
	}
	if c.window == 0 {
		rows = max(rows, 2*c.rows, 16)
	}
	k, err := c.d.alloc(rows * c.kW)
	if err != nil {
		return err
	}
	v, err := c.d.alloc(rows * c.vW)
	if err != nil {
		c.d.release(k.r)
		return err
	}
	nk, nv := nn.Tensor{Buf: k, N: rows * c.kW}, nn.Tensor{Buf: v, N: rows * c.vW}
	if c.rows > 0 {
		copy(host(nk), host(c.k))
		copy(host(nv), host(c.v))
		c.d.release(buf(c.k).r)
		c.d.release(buf(c.v).r)
	}
	c.k, c.v, c.rows = nk, nv, rows
	c.mem.bufs = []*mbuf{k, v}
	return nil
}

// Len implements nn.KVState.
func (c *kvState) Len() int { return c.n }

// Reset implements nn.LayerState.
func (c *kvState) Reset() {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	c.d.sync() // queued attention may still use the rows
	c.n = 0
}

// Clone implements nn.LayerState.
func (c *kvState) Clone() nn.LayerState {
	d := c.d
	cl := &kvState{d: d, kW: c.kW, vW: c.vW, window: c.window, mem: d.newStateMem()}
	attach(cl, cl.mem)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sync()
	if err := cl.copyFrom(c); err != nil {
		d.fail(err)
	}
	return cl
}

// copyFrom makes c a copy of f (same shape; d.mu held, nothing in flight).
func (c *kvState) copyFrom(f *kvState) error {
	rows := f.rows
	if f.window == 0 {
		rows = f.n
	}
	if err := c.grow(rows); err != nil {
		return err
	}
	if rows > 0 {
		copy(host(c.k), host(f.k)[:rows*f.kW])
		copy(host(c.v), host(f.v)[:rows*f.vW])
	}
	c.n = f.n
	return nil
}

// Restore implements nn.LayerState.
func (c *kvState) Restore(from nn.LayerState) bool {
	f, ok := from.(*kvState)
	if !ok || f.kW != c.kW || f.vW != c.vW || f.window != c.window {
		return false
	}
	if f == c {
		return true
	}
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sync()
	if err := c.copyFrom(f); err != nil {
		d.fail(err)
	}
	return true
}

// Bytes implements nn.LayerState.
func (c *kvState) Bytes() int64 { return 4 * int64(c.rows) * int64(c.kW+c.vW) }

// attend is nn.KVCache.Attend over the cache's memory (d.mu held, nothing
// in flight): the same arithmetic in the same order, so the results are
// the host device's bit for bit.
func (c *kvState) attend(O, Q, K, V []float32, T int, d nn.AttnDims) error {
	pos := c.n
	kw, vw := c.kW, c.vW
	W := c.window
	if W == 0 {
		if err := c.grow(pos + T); err != nil {
			return err
		}
	}
	kc, vc := host(c.k), host(c.v)
	nn.AttendRows(O, Q, K, V, kc, vc, pos, T, W, kw, vw, d)
	if W == 0 {
		copy(kc[pos*kw:], K[:T*kw])
		copy(vc[pos*vw:], V[:T*vw])
	} else {
		for i := max(0, T-W); i < T; i++ {
			s := (pos + i) % W
			copy(kc[s*kw:(s+1)*kw], K[i*kw:(i+1)*kw])
			copy(vc[s*vw:(s+1)*vw], V[i*vw:(i+1)*vw])
		}
	}
	c.n += T
	return nil
}

// tensorState is the Device's TensorState: one Alloc'd tensor per size.
type tensorState struct {
	d   *Device
	t   []nn.Tensor
	mem *stateMem
}

// NewTensors implements nn.Device.
func (d *Device) NewTensors(sizes ...int) (nn.TensorState, error) {
	s := &tensorState{d: d, mem: d.newStateMem()}
	attach(s, s.mem)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range sizes {
		m, err := d.alloc(max(n, 1))
		if err != nil {
			return nil, err
		}
		s.mem.bufs = append(s.mem.bufs, m)
		s.t = append(s.t, nn.Tensor{Buf: m, N: n})
	}
	return s, nil
}

// Tensor implements nn.TensorState.
func (s *tensorState) Tensor(i int) nn.Tensor { return s.t[i] }

// Reset implements nn.LayerState.
func (s *tensorState) Reset() {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.sync()
	for _, t := range s.t {
		clear(host(t))
	}
}

// Clone implements nn.LayerState.
func (s *tensorState) Clone() nn.LayerState {
	sizes := make([]int, len(s.t))
	for i, t := range s.t {
		sizes[i] = t.N
	}
	c, err := s.d.NewTensors(sizes...)
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.fail(err)
		return &tensorState{d: d, t: append([]nn.Tensor(nil), s.t...), mem: d.newStateMem()}
	}
	cs := c.(*tensorState)
	d.sync()
	for i := range s.t {
		copy(host(cs.t[i]), host(s.t[i]))
	}
	return cs
}

// Restore implements nn.LayerState.
func (s *tensorState) Restore(from nn.LayerState) bool {
	f, ok := from.(*tensorState)
	if !ok || len(f.t) != len(s.t) {
		return false
	}
	for i := range s.t {
		if f.t[i].N != s.t[i].N {
			return false
		}
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.sync()
	for i := range s.t {
		copy(host(s.t[i]), host(f.t[i]))
	}
	return true
}

// Bytes implements nn.LayerState.
func (s *tensorState) Bytes() int64 {
	var n int64
	for _, t := range s.t {
		n += 4 * int64(t.N)
	}
	return n
}
