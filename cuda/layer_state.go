package cuda

import (
	"fmt"
	goruntime "runtime"
	"sync"

	"github.com/qpack-go/qpack/runtime/nn"
)

// freeList collects device memory to free at the next EndPass (the
// streams are idle then): buffers a KV cache outgrew (queued work may
// still read them) and the memory of states the garbage collector found
// unreachable (runtime.AddCleanup runs on its own goroutine, so the list
// has its own lock).
type freeList struct {
	mu  sync.Mutex
	ptr []devptr
}

func (f *freeList) add(p ...devptr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range p {
		if q != 0 {
			f.ptr = append(f.ptr, q)
		}
	}
}

// drainFrees frees the list (lock held, streams idle). Memory the Layer no
// longer owns (freed by Close already) is skipped.
func (l *Layer) drainFrees() {
	l.frees.mu.Lock()
	ps := l.frees.ptr
	l.frees.ptr = nil
	l.frees.mu.Unlock()
	for _, p := range ps {
		if _, ok := l.owned[p]; ok {
			if err := l.devFree(p); err != nil {
				l.fail("freeing a state", err)
			}
		}
	}
}

// stateMem is the device memory of one state, handed to the free list
// when the state is collected.
type stateMem struct {
	ptr []devptr
}

func track[T any](l *Layer, owner *T, m *stateMem) {
	fl := l.frees
	goruntime.AddCleanup(owner, func(m *stateMem) { fl.add(m.ptr...) }, m)
}

// kvState is a KV cache in device memory: K [rows][kw] and V [rows][vw].
// A full cache (window 0) keeps position j at row j and grows by
// reallocation and a device copy; a ring (window W) keeps position j at row
// j % W.
type kvState struct {
	l              *Layer
	kw, vw, window int
	k, v           devptr
	rows           int // capacity in rows
	n              int // positions seen
	bad            bool
	mem            *stateMem
}

var _ nn.KVState = (*kvState)(nil)

// NewKV implements nn.Device: the buffers are allocated on first use.
func (l *Layer) NewKV(kWidth, vWidth, window int) (nn.KVState, error) {
	if kWidth <= 0 || vWidth <= 0 || window < 0 {
		return nil, fmt.Errorf("cuda: NewKV(%d, %d, %d)", kWidth, vWidth, window)
	}
	s := &kvState{l: l, kw: kWidth, vw: vWidth, window: window, mem: &stateMem{}}
	track(l, s, s.mem)
	return s, nil
}

func (l *Layer) kvOf(s nn.KVState) *kvState {
	kv, ok := s.(*kvState)
	if !ok || kv.l != l {
		panic(fmt.Sprintf("cuda: a %T KV cache used with the cuda layer device", s))
	}
	return kv
}

// Len implements nn.KVState.
func (s *kvState) Len() int { return s.n }

// reserve makes room for rows positions (a ring: its W rows); lock held.
func (s *kvState) reserve(rows int) error {
	if s.window > 0 {
		rows = s.window
	}
	if rows <= s.rows {
		return nil
	}
	if s.window == 0 {
		rows = max(rows, 2*s.rows, 64)
	}
	l := s.l
	what := fmt.Sprintf("a KV cache of %d positions", rows)
	k, err := l.devAlloc(4*int64(rows)*int64(s.kw), what)
	if err != nil {
		return err
	}
	v, err := l.devAlloc(4*int64(rows)*int64(s.vw), what)
	if err != nil {
		l.devFree(k)
		return err
	}
	if s.rows > 0 && s.n > 0 && s.window == 0 {
		if err := l.b.dev.dtod(k, s.k, 4*s.n*s.kw); err != nil {
			return err
		}
		if err := l.b.dev.dtod(v, s.v, 4*s.n*s.vw); err != nil {
			return err
		}
	}
	l.frees.add(s.k, s.v) // queued work may still read them
	s.k, s.v, s.rows = k, v, rows
	s.mem.ptr = []devptr{k, v}
	return nil
}

// used is the number of rows holding positions.
func (s *kvState) used() int {
	if s.window > 0 {
		return min(s.n, s.window)
	}
	return s.n
}

// store queues the copy of a chunk's T keys and values (device addresses)
// into their rows, after the attention that read the cache; lock held.
func (s *kvState) store(K, V devptr, T int) error {
	if s.l.kernels {
		return s.scatter(K, V, T)
	}
	dev := s.l.b.dev
	pos := s.n
	if s.window == 0 {
		if err := dev.dtod(s.k+4*uint64(pos*s.kw), K, 4*T*s.kw); err != nil {
			return err
		}
		return dev.dtod(s.v+4*uint64(pos*s.vw), V, 4*T*s.vw)
	}
	W := s.window
	for i := max(0, T-W); i < T; {
		slot := (pos + i) % W
		run := min(T-i, W-slot)
		if err := dev.dtod(s.k+4*uint64(slot*s.kw), K+4*uint64(i*s.kw), 4*run*s.kw); err != nil {
			return err
		}
		if err := dev.dtod(s.v+4*uint64(slot*s.vw), V+4*uint64(i*s.vw), 4*run*s.vw); err != nil {
			return err
		}
		i += run
	}
	return nil
}

// scatter is store on the kernel path: the rows' indices staged into the
// arena and scatter_rows, so that a decode step's submissions differ from
// the previous step's only in values read from memory (a CUDA graph
// replays them: record.go), not in copy addresses.
func (s *kvState) scatter(K, V devptr, T int) error {
	i0 := 0
	if s.window > 0 {
		i0 = max(0, T-s.window) // a ring keeps the last W rows
	}
	rows := make([]int, T-i0)
	for i := range rows {
		rows[i] = s.n + i0 + i
		if s.window > 0 {
			rows[i] %= s.window
		}
	}
	ix, err := s.l.indexList(rows)
	if err != nil {
		return err
	}
	if s.l.b.fuses(fuseKV) { // both in one launch (else two)
		return s.l.b.kScatterRows2(s.k, K+4*uint64(i0*s.kw), s.v, V+4*uint64(i0*s.vw), ix, len(rows), s.rows, s.kw, s.vw)
	}
	if err := s.l.b.kScatterRows(s.k, K+4*uint64(i0*s.kw), ix, len(rows), s.rows, s.kw); err != nil {
		return err
	}
	return s.l.b.kScatterRows(s.v, V+4*uint64(i0*s.vw), ix, len(rows), s.rows, s.vw)
}

// Reset implements nn.LayerState (buffers kept; as in nn.KVCache a ring's
// stale rows are never read: position j is read only once written).
func (s *kvState) Reset() {
	s.l.b.mu.Lock()
	defer s.l.b.mu.Unlock()
	s.n = 0
}

// Clone implements nn.LayerState: a copy in new device memory. If it
// cannot be made, the error is kept for the next wait and the clone is
// marked so that restoring it reports false.
func (s *kvState) Clone() nn.LayerState {
	l := s.l
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	c := &kvState{l: l, kw: s.kw, vw: s.vw, window: s.window, mem: &stateMem{}, bad: s.bad}
	track(l, c, c.mem)
	if s.rows == 0 || s.used() == 0 && s.window == 0 {
		return c
	}
	if err := c.reserve(max(s.used(), 1)); err != nil {
		l.fail("KV Clone", err)
		c.bad = true
		return c
	}
	rows := s.used()
	if s.window > 0 {
		rows = s.window
	}
	if err := c.copyFrom(s, rows); err != nil {
		l.fail("KV Clone", err)
		c.bad = true
	}
	c.n = s.n
	return c
}

func (s *kvState) copyFrom(f *kvState, rows int) error {
	dev := s.l.b.dev
	if err := dev.dtod(s.k, f.k, 4*rows*s.kw); err != nil {
		return err
	}
	return dev.dtod(s.v, f.v, 4*rows*s.vw)
}

// Restore implements nn.LayerState.
func (s *kvState) Restore(from nn.LayerState) bool {
	f, ok := from.(*kvState)
	if !ok || f.l != s.l || f.kw != s.kw || f.vw != s.vw || f.window != s.window || f.bad {
		return false
	}
	l := s.l
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	s.n = f.n
	if f.rows == 0 || f.used() == 0 && f.window == 0 {
		return true
	}
	rows := f.used()
	if f.window > 0 {
		rows = f.window
	}
	if err := s.reserve(rows); err != nil {
		l.fail("KV Restore", err)
		return true // the error is pending: the pass fails
	}
	if err := s.copyFrom(f, rows); err != nil {
		l.fail("KV Restore", err)
	}
	return true
}

// Bytes implements nn.LayerState: the device memory of its buffers.
func (s *kvState) Bytes() int64 { return 4 * int64(s.rows) * int64(s.kw+s.vw) }

// tensorState is nn.TensorState in device memory.
type tensorState struct {
	l   *Layer
	t   []nn.Tensor
	bad bool
	mem *stateMem
}

var _ nn.TensorState = (*tensorState)(nil)

// NewTensors implements nn.Device.
func (l *Layer) NewTensors(sizes ...int) (nn.TensorState, error) {
	s := &tensorState{l: l, mem: &stateMem{}}
	for _, n := range sizes {
		t, err := l.Alloc(n)
		if err != nil {
			l.b.mu.Lock()
			for _, u := range s.t {
				l.devFree(buf(u).p)
			}
			l.b.mu.Unlock()
			return nil, fmt.Errorf("cuda: a layer state of %v floats: %w", sizes, err)
		}
		s.t = append(s.t, t)
		s.mem.ptr = append(s.mem.ptr, buf(t).p)
	}
	track(l, s, s.mem)
	return s, nil
}

func (l *Layer) tensorsOf(s nn.TensorState) *tensorState {
	ts, ok := s.(*tensorState)
	if !ok || ts.l != l {
		panic(fmt.Sprintf("cuda: a %T state used with the cuda layer device", s))
	}
	return ts
}

// Tensor implements nn.TensorState.
func (s *tensorState) Tensor(i int) nn.Tensor { return s.t[i] }

// Reset implements nn.LayerState.
func (s *tensorState) Reset() {
	s.l.b.mu.Lock()
	defer s.l.b.mu.Unlock()
	for _, t := range s.t {
		if err := s.l.b.dev.memset(buf(t).p, 4*t.N); err != nil {
			s.l.fail("state Reset", err)
		}
	}
}

// Clone implements nn.LayerState (see kvState.Clone on failure).
func (s *tensorState) Clone() nn.LayerState {
	sizes := make([]int, len(s.t))
	for i, t := range s.t {
		sizes[i] = t.N
	}
	c, err := s.l.NewTensors(sizes...)
	if err != nil {
		s.l.b.mu.Lock()
		s.l.fail("state Clone", err)
		s.l.b.mu.Unlock()
		return &tensorState{l: s.l, bad: true, t: s.t[:0:0], mem: &stateMem{}}
	}
	ct := c.(*tensorState)
	ct.bad = s.bad
	ct.copyFrom(s)
	return ct
}

func (s *tensorState) copyFrom(f *tensorState) {
	s.l.b.mu.Lock()
	defer s.l.b.mu.Unlock()
	for i, t := range f.t {
		if t.N == 0 {
			continue
		}
		if err := s.l.b.dev.dtod(buf(s.t[i]).p, buf(t).p, 4*t.N); err != nil {
			s.l.fail("state copy", err)
		}
	}
}

// Restore implements nn.LayerState.
func (s *tensorState) Restore(from nn.LayerState) bool {
	f, ok := from.(*tensorState)
	if !ok || f.l != s.l || f.bad || len(f.t) != len(s.t) {
		return false
	}
	for i := range s.t {
		if f.t[i].N != s.t[i].N {
			return false
		}
	}
	s.copyFrom(f)
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
