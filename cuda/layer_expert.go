package cuda

import (
	"container/list"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The device expert cache: routed experts live in device slots keyed by
// (layer, expert) (an expert's content is immutable for a model), least
// recently used first out, within a byte budget. A miss copies the
// expert's three matrices into a slot on the copy stream (straight from
// pinned memory when the expert source's buffer came from Backend.Alloc,
// else through pinned staging), makes the compute stream wait for that
// copy (an event), and waits for it on the host before returning, so the
// caller may release the expert's buffer at once.
//
// A slot used since the last Flush (or EndPass) is never given to another
// expert: the graph's MoE queues an expert's work before it asks for the
// next one and flushes at the end of each layer, so a slot of an earlier
// layer can be reused within the pass. Reusing one, the copy stream first
// waits (event) until the compute stream has finished the work queued so
// far, which includes every use of the previous occupant. When every slot
// is in use, the cache goes over its budget until the next EndPass, where
// it shrinks back.

// QPACK_CUDA_EXPERT_CACHE overrides the default budget (bytes, with an
// optional K, M, G, T suffix, powers of 1024, "iB"/"B" allowed).
const expertCacheEnv = "QPACK_CUDA_EXPERT_CACHE"

// defaultExpertFraction is the share of free device memory the cache takes
// by default, measured when the first expert arrives.
const defaultExpertFraction = 2

// expertKey names a cached expert: its source (one per model) and its
// number.
type expertKey struct {
	src           any
	layer, expert int
}

// keyOf is the cache key of src's expert; ok is false for a source that
// cannot be a map key (a value of a type that is not comparable), whose
// experts are then not cached.
func keyOf(src nn.ExpertSource, layer, expert int) (expertKey, bool) {
	if src == nil || !reflect.TypeOf(src).Comparable() {
		return expertKey{}, false
	}
	return expertKey{src, layer, expert}, true
}

type expertSlot struct {
	key  expertKey
	p    devptr
	size int64
	mats nn.ExpertMats
	gen  int64 // the generation (Flush to Flush) it was last used in
	elem *list.Element
}

type expertCache struct {
	slots  map[expertKey]*expertSlot
	lru    *list.List // of *expertSlot, most recently used first
	bytes  int64      // of the slots in the map
	budget int64      // < 0: not yet decided
	gen    int64
	// version counts the changes of the set of slots (an expert in or
	// out): the device's expert tables are valid at one version
	// (layer_moe.go); perLayer counts the slots of each model's layer.
	version   int64
	perLayer  map[tableKey]int
	spare     []*expertSlot // evicted, memory kept for reuse until EndPass
	stage     []byte        // pinned staging for experts outside Alloc memory
	ready     event         // the copy stream reached the end of a copy
	mark      event         // the compute stream reached a point
	hasEvents bool
}

func (c *expertCache) init() {
	c.slots = map[expertKey]*expertSlot{}
	c.perLayer = map[tableKey]int{}
	c.lru = list.New()
	c.budget = -1
}

// added and removed keep version and perLayer (lock held).
func (c *expertCache) added(k expertKey) {
	c.version++
	c.perLayer[tableKey{k.src, k.layer}]++
}

func (c *expertCache) removed(k expertKey) {
	c.version++
	tk := tableKey{k.src, k.layer}
	if c.perLayer[tk]--; c.perLayer[tk] <= 0 {
		delete(c.perLayer, tk)
	}
}

// parseBytes reads a byte count with an optional binary suffix.
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v < 0 || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%q is not a byte count (like 8GiB)", s)
	}
	return int64(v * float64(mult)), nil
}

// decide sets the budget on first use (lock held).
func (c *expertCache) decide(l *Layer) {
	if c.budget >= 0 {
		return
	}
	switch n := l.b.expertBytes; {
	case n > 0:
		c.budget = n
		return
	case n < 0:
		c.budget = 0
		return
	}
	if s := os.Getenv(expertCacheEnv); s != "" {
		n, err := parseBytes(s)
		if err == nil {
			c.budget = n
			return
		}
		slog.Warn("cuda: ignoring "+expertCacheEnv, "err", err)
	}
	free, _, err := l.b.dev.memInfo()
	if err != nil {
		slog.Warn("cuda: cannot read free device memory; expert cache of 1 GiB", "err", err)
		free = 2 << 30
	}
	c.budget = free / defaultExpertFraction
	slog.Debug("cuda: device expert cache", "budget", c.budget, "free", free)
}

func (c *expertCache) events(l *Layer) error {
	if c.hasEvents {
		return nil
	}
	r, err := l.b.dev.newEvent()
	if err != nil {
		return err
	}
	m, err := l.b.dev.newEvent()
	if err != nil {
		l.b.dev.freeEvent(r)
		return err
	}
	c.ready, c.mark, c.hasEvents = r, m, true
	return nil
}

func (c *expertCache) touch(s *expertSlot) {
	s.gen = c.gen
	c.lru.MoveToFront(s.elem)
}

// evict takes s out of the cache, keeping its memory as a spare.
func (c *expertCache) evict(l *Layer, s *expertSlot) {
	delete(c.slots, s.key)
	c.removed(s.key)
	c.lru.Remove(s.elem)
	c.bytes -= s.size
	c.spare = append(c.spare, s)
	l.b.stats.ExpertEvicts++
}

// slot returns device memory for an expert of size bytes, and whether it
// held another expert (the copy must then wait for the compute stream).
func (c *expertCache) slot(l *Layer, size int64) (*expertSlot, bool, error) {
	c.decide(l)
	for c.bytes+size > c.budget {
		e := c.lru.Back()
		if e == nil {
			break
		}
		s := e.Value.(*expertSlot)
		if s.gen == c.gen {
			break // every slot ahead of it is in use too
		}
		c.evict(l, s)
	}
	for i, s := range c.spare {
		if s.size == size {
			c.spare = append(c.spare[:i], c.spare[i+1:]...)
			return &expertSlot{p: s.p, size: size}, true, nil
		}
	}
	what := fmt.Sprintf("a device expert slot (cache of %d bytes in use, budget %d)", c.bytes, c.budget)
	p, err := l.devAlloc(size, what)
	if err != nil && len(c.spare) > 0 {
		// Give the spares' memory back (after the work that may read them).
		if e := l.b.dev.syncAll(); e != nil {
			return nil, false, e
		}
		l.stageOff = 0
		c.freeSpares(l)
		p, err = l.devAlloc(size, what)
	}
	if err != nil {
		return nil, false, err
	}
	return &expertSlot{p: p, size: size}, false, nil
}

func (c *expertCache) freeSpares(l *Layer) {
	for _, s := range c.spare {
		if err := l.devFree(s.p); err != nil {
			l.fail("freeing an expert slot", err)
		}
	}
	c.spare = nil
}

func sameShape(a, b mlxq.Matrix) bool {
	return a.Rows == b.Rows && a.Cols == b.Cols && a.Bits == b.Bits && a.GroupSize == b.GroupSize && a.Type == b.Type
}

// Expert implements nn.Device.
func (l *Layer) Expert(src nn.ExpertSource, w *nn.ExpertWeights) (nn.ExpertMats, error) {
	ms := [3]mlxq.Matrix{w.Gate, w.Up, w.Down}
	for _, m := range ms {
		if err := checkMatrix(m); err != nil {
			return nn.ExpertMats{}, fmt.Errorf("cuda: expert %d of layer %d: %w", w.Expert, w.Layer, err)
		}
	}
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return nn.ExpertMats{}, l.err
	}
	c := &l.experts
	key, cacheable := keyOf(src, w.Layer, w.Expert)
	if !cacheable {
		// A slot of its own, never found again: the LRU reclaims it.
		key = expertKey{src: new(byte), layer: w.Layer, expert: w.Expert}
	}
	if s, hit := c.slots[key]; hit {
		if sameShape(s.mats.Gate.W, w.Gate) && sameShape(s.mats.Up.W, w.Up) && sameShape(s.mats.Down.W, w.Down) {
			c.touch(s)
			l.b.stats.ExpertHits++
			return s.mats, nil
		}
		c.evict(l, s) // the same source with other shapes: a changed model
	}
	var size int64
	for _, m := range ms {
		size += matBytes(m)
	}
	s, reused, err := c.slot(l, size)
	if err != nil {
		l.fail("Expert", err)
		return nn.ExpertMats{}, l.err
	}
	mats, err := l.copyExpert(s.p, ms, reused)
	if err != nil {
		l.fail("Expert", err)
		l.devFree(s.p)
		return nn.ExpertMats{}, l.err
	}
	s.key, s.mats, s.gen = key, mats, c.gen
	s.elem = c.lru.PushFront(s)
	c.slots[key] = s
	c.added(key)
	c.bytes += size
	l.b.stats.ExpertMisses++
	return mats, nil
}

// copyExpert copies the three matrices to p on the copy stream and waits
// for the copy; reused: the memory held another expert, whose queued work
// the copy waits for.
func (l *Layer) copyExpert(p devptr, ms [3]mlxq.Matrix, reused bool) (nn.ExpertMats, error) {
	c := &l.experts
	dev := l.b.dev
	if err := c.events(l); err != nil {
		return nn.ExpertMats{}, err
	}
	if reused {
		if err := dev.record(c.mark, computeStream); err != nil {
			return nn.ExpertMats{}, err
		}
		if err := dev.waitEvent(copyStream, c.mark); err != nil {
			return nn.ExpertMats{}, err
		}
	}
	// Staging for the parts outside Alloc memory.
	var need int
	for _, m := range ms {
		for _, part := range [][]byte{m.Weight, m.Scales, m.Biases} {
			if _, pinned := l.b.lookup(part); !pinned && len(part) > 0 {
				need += (len(part) + stageAlign - 1) &^ (stageAlign - 1)
			}
		}
	}
	if need > len(c.stage) {
		size := max(need, 2*len(c.stage))
		if c.stage != nil {
			if err := dev.hostFree(c.stage); err != nil {
				return nn.ExpertMats{}, err
			}
			c.stage = nil
		}
		h, _, err := dev.hostAlloc(size)
		if err != nil {
			return nn.ExpertMats{}, fmt.Errorf("cuda: allocating %d bytes of pinned expert staging: %w", size, err)
		}
		c.stage = h
	}
	var out [3]nn.Mat
	off := 0
	for i, m := range ms {
		kernel, _ := gemvKernel(m)
		d := &devMat{kernel: kernel}
		for _, part := range []struct {
			dst  *devptr
			data []byte
		}{{&d.w, m.Weight}, {&d.s, m.Scales}, {&d.b, m.Biases}} {
			*part.dst = p
			src := part.data
			if _, pinned := l.b.lookup(src); !pinned && len(src) > 0 {
				h := c.stage[off : off+len(src)]
				copy(h, src)
				off += (len(src) + stageAlign - 1) &^ (stageAlign - 1)
				src = h
			}
			if err := dev.htodOn(copyStream, p, src); err != nil {
				return nn.ExpertMats{}, err
			}
			l.b.stats.ExpertBytes += int64(len(src))
			p += uint64((len(part.data) + arenaAlign - 1) &^ (arenaAlign - 1))
		}
		out[i] = nn.Mat{W: m, Dev: d}
	}
	if err := dev.record(c.ready, copyStream); err != nil {
		return nn.ExpertMats{}, err
	}
	if err := dev.waitEvent(computeStream, c.ready); err != nil {
		return nn.ExpertMats{}, err
	}
	// The caller may release the source's buffer once this returns.
	if err := dev.eventSync(c.ready); err != nil {
		return nn.ExpertMats{}, err
	}
	return nn.ExpertMats{Gate: out[0], Up: out[1], Down: out[2]}, nil
}

// CachedExpert implements nn.Device: the device cache's copy, if held.
func (l *Layer) CachedExpert(src nn.ExpertSource, layer, expert int) (nn.ExpertMats, bool) {
	key, cacheable := keyOf(src, layer, expert)
	if !cacheable {
		return nn.ExpertMats{}, false
	}
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return nn.ExpertMats{}, false
	}
	s, hit := l.experts.slots[key]
	if !hit {
		return nn.ExpertMats{}, false
	}
	l.experts.touch(s)
	l.b.stats.ExpertHits++
	return s.mats, true
}

// flush starts a new generation (Flush): the slots used so far may be
// given to other experts.
func (c *expertCache) flush() { c.gen++ }

// endPass (streams idle): the spares are freed, the cache shrinks to its
// budget, and a new generation starts.
func (c *expertCache) endPass(l *Layer) {
	c.gen++
	if len(c.slots) > 0 {
		c.decide(l)
	}
	for c.bytes > max(c.budget, 0) {
		e := c.lru.Back()
		if e == nil {
			break
		}
		c.evict(l, e.Value.(*expertSlot))
	}
	c.freeSpares(l)
}

// dropAll empties the cache (streams idle): another model's experts follow.
func (c *expertCache) dropAll(l *Layer) {
	for c.lru.Len() > 0 {
		c.evict(l, c.lru.Back().Value.(*expertSlot))
	}
	c.freeSpares(l)
}

// release frees the slots, staging and events (Close, streams idle).
func (c *expertCache) release(l *Layer) error {
	var errs []error
	for _, s := range c.slots {
		errs = append(errs, l.devFree(s.p))
	}
	c.slots = map[expertKey]*expertSlot{}
	c.perLayer = map[tableKey]int{}
	c.version++
	c.lru.Init()
	c.bytes = 0
	for _, s := range c.spare {
		errs = append(errs, l.devFree(s.p))
	}
	c.spare = nil
	if c.stage != nil {
		errs = append(errs, l.b.dev.hostFree(c.stage))
		c.stage = nil
	}
	if c.hasEvents {
		errs = append(errs, l.b.dev.freeEvent(c.ready), l.b.dev.freeEvent(c.mark))
		c.hasEvents = false
	}
	return errors.Join(errs...)
}
