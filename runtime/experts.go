package runtime

import (
	"container/list"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// ExpertWeights is one routed expert of one layer (see nn.ExpertWeights).
type ExpertWeights = nn.ExpertWeights

// ExpertSource hands out routed experts (see nn.ExpertSource).
type ExpertSource = nn.ExpertSource

// Projection and part names of the expert tensors, in section order (the
// same as the .qpack layout's).
var (
	expertProjs = [3]string{"gate_proj", "up_proj", "down_proj"}
	expertParts = [3]string{"weight", "scales", "biases"}
)

// sectionInfo describes one of an expert's tensors: its per-expert dtype
// and shape and where its bytes lie in the expert's buffer.
type sectionInfo struct {
	present bool
	dtype   string
	shape   []int64
	offset  int64 // within the expert buffer
	size    int64
}

// expertSpec is how to view an expert buffer as its three matrices.
type expertSpec struct {
	size int64 // bytes of one expert's buffer
	sec  [3][3]sectionInfo
	proj [3]projShape
}

type projShape struct {
	rows, cols      int
	bits, group     int
	ftype           mlxq.Float
	quantized       bool
	weight, s, bias sectionInfo
}

// newExpertSpec checks the sections of one layer's experts against the
// config (module is the switch_mlp path, e.g. "model.layers.3.mlp.switch_mlp")
// and resolves their quantization.
func newExpertSpec(cfg *Config, module string, sec [3][3]sectionInfo, size int64) (*expertSpec, error) {
	s := &expertSpec{size: size, sec: sec}
	I, H := cfg.MoEIntermediate, cfg.Hidden
	dims := [3][2]int{{I, H}, {I, H}, {H, I}}
	for pi, proj := range expertProjs {
		mod := module + "." + proj
		w, sc, bi := sec[pi][0], sec[pi][1], sec[pi][2]
		wname := mod + ".weight"
		if !w.present {
			return nil, fmt.Errorf("expert tensor %s missing", wname)
		}
		for _, x := range []sectionInfo{w, sc, bi} {
			if x.present && (x.offset < 0 || x.size < 0 || x.offset+x.size > size) {
				return nil, fmt.Errorf("expert tensor %s: section [%d, +%d) outside the %d-byte expert", wname, x.offset, x.size, size)
			}
		}
		ps := projShape{rows: dims[pi][0], cols: dims[pi][1], weight: w, s: sc, bias: bi}
		if sc.present {
			if !bi.present {
				return nil, fmt.Errorf("expert tensor %s has scales but no biases: only MLX affine quantization is supported", wname)
			}
			p, err := quantParams(cfg, mod, wname, w.dtype, sc.dtype, bi.dtype, w.shape, sc.shape, bi.shape, ps.rows, ps.cols)
			if err != nil {
				return nil, err
			}
			ps.quantized, ps.bits, ps.group = true, p.Bits, p.GroupSize
			ps.ftype, _ = mlxq.FloatFromDType(sc.dtype)
		} else {
			if !sameShape(w.shape, []int64{int64(ps.rows), int64(ps.cols)}) {
				return nil, fmt.Errorf("expert tensor %s: per-expert shape %s, want [%d, %d]", wname, ShapeString(w.shape), ps.rows, ps.cols)
			}
			f, err := mlxq.FloatFromDType(w.dtype)
			if err != nil {
				return nil, fmt.Errorf("expert tensor %s: dtype %s is not a float type", wname, w.dtype)
			}
			ps.ftype = f
		}
		s.proj[pi] = ps
	}
	return s, nil
}

// view builds the three matrices over buf (len ≥ s.size).
func (s *expertSpec) view(buf []byte, w *ExpertWeights) error {
	out := [3]*mlxq.Matrix{&w.Gate, &w.Up, &w.Down}
	for pi, ps := range s.proj {
		slice := func(x sectionInfo) []byte { return buf[x.offset : x.offset+x.size] }
		var m mlxq.Matrix
		var err error
		if ps.quantized {
			m, err = mlxq.NewQuantized(ps.rows, ps.cols, ps.bits, ps.group, ps.ftype, slice(ps.weight), slice(ps.s), slice(ps.bias))
		} else {
			m, err = mlxq.NewDense(ps.rows, ps.cols, ps.ftype, slice(ps.weight))
		}
		if err != nil {
			return fmt.Errorf("layer %d expert %d %s: %w", w.Layer, w.Expert, expertProjs[pi], err)
		}
		*out[pi] = m
	}
	return nil
}

// expertReader reads the raw bytes of one expert.
type expertReader interface {
	// spec returns the view of layer l's experts (nil for a layer without).
	spec(l int) *expertSpec
	// read fills buf[:spec(l).size] (or the reader's own read size, see
	// bufSize) with expert e of layer l.
	read(l, e int, buf []byte) error
	bufSize(l int) int64
}

// ExpertStats counts what an expert cache did.
type ExpertStats struct {
	Hits, Misses int64
	BytesRead    int64
	Reads        int64 // positional reads issued
	Resident     int64 // bytes held now
}

// ExpertCache is an ExpertSource over a file-backed reader with a bounded
// LRU of whole experts (the runner's smarter cache replaces it later). A
// capacity of 0 keeps nothing: every request reads.
//
// With an Allocator (LoadOptions.Alloc, or the backend's) each expert is
// read into memory from it, given back once the expert is neither cached
// nor handed out; without one, buffers are left to the garbage collector.
type ExpertCache struct {
	r        expertReader
	layers   int
	experts  int
	capBytes int64
	alloc    Allocator // nil: the Go heap

	mu      sync.Mutex
	entries map[[2]int]*list.Element // cached; values *cachedExpert
	held    map[*ExpertWeights]*cachedExpert
	lru     list.List // front = most recent
	stats   ExpertStats
	closer  io.Closer
}

// cachedExpert is one expert read by the cache.
type cachedExpert struct {
	w      *ExpertWeights
	refs   int  // handed out, not yet released
	cached bool // in the LRU
}

func newExpertCache(r expertReader, layers, experts int, capBytes int64, closer io.Closer) *ExpertCache {
	return &ExpertCache{r: r, layers: layers, experts: experts, capBytes: capBytes,
		entries: map[[2]int]*list.Element{}, held: map[*ExpertWeights]*cachedExpert{}, closer: closer}
}

// Expert implements ExpertSource.
func (c *ExpertCache) Expert(l, e int) (*ExpertWeights, error) {
	if l < 0 || l >= c.layers {
		return nil, fmt.Errorf("expert %d of layer %d: layer out of range [0, %d)", e, l, c.layers)
	}
	if e < 0 || e >= c.experts {
		return nil, fmt.Errorf("expert %d of layer %d: expert out of range [0, %d)", e, l, c.experts)
	}
	spec := c.r.spec(l)
	if spec == nil {
		return nil, fmt.Errorf("expert %d of layer %d: layer has no routed experts", e, l)
	}
	key := [2]int{l, e}
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		c.stats.Hits++
		ce := el.Value.(*cachedExpert)
		c.handOut(ce)
		c.mu.Unlock()
		return ce.w, nil
	}
	c.stats.Misses++
	c.mu.Unlock()

	buf, err := c.newBuf(c.r.bufSize(l))
	if err != nil {
		return nil, fmt.Errorf("expert %d of layer %d: %w", e, l, err)
	}
	w := &ExpertWeights{Layer: l, Expert: e, Buf: buf}
	err = c.r.read(l, e, buf)
	if err == nil {
		err = spec.view(buf, w)
	}
	if err != nil {
		c.freeBuf(buf)
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.BytesRead += int64(len(buf))
	ce := &cachedExpert{w: w}
	if el, ok := c.entries[key]; ok { // raced with another reader
		c.freeBuf(buf)
		ce = el.Value.(*cachedExpert)
	} else if int64(len(buf)) <= c.capBytes {
		for c.stats.Resident+int64(len(buf)) > c.capBytes {
			back := c.lru.Back()
			old := back.Value.(*cachedExpert)
			c.lru.Remove(back)
			delete(c.entries, [2]int{old.w.Layer, old.w.Expert})
			c.stats.Resident -= int64(len(old.w.Buf))
			old.cached = false
			c.maybeFree(old)
		}
		ce.cached = true
		c.entries[key] = c.lru.PushFront(ce)
		c.stats.Resident += int64(len(buf))
	}
	c.handOut(ce)
	return ce.w, nil
}

// handOut counts one more holder of ce (only with an allocator: garbage
// collected buffers need no count). Called with mu held.
func (c *ExpertCache) handOut(ce *cachedExpert) {
	if c.alloc == nil {
		return
	}
	ce.refs++
	c.held[ce.w] = ce
}

// maybeFree gives ce's buffer back once it is neither cached nor held.
// Called with mu held.
func (c *ExpertCache) maybeFree(ce *cachedExpert) {
	if ce.refs == 0 && !ce.cached {
		delete(c.held, ce.w)
		c.freeBuf(ce.w.Buf)
		ce.w.Buf = nil
	}
}

func (c *ExpertCache) newBuf(n int64) ([]byte, error) {
	if c.alloc == nil {
		return make([]byte, n), nil
	}
	if n <= 0 || n > math.MaxInt {
		return nil, fmt.Errorf("expert buffer of %d bytes", n)
	}
	buf, err := c.alloc.Alloc(int(n))
	if err != nil {
		return nil, fmt.Errorf("allocating a %d-byte expert buffer: %w", n, err)
	}
	if int64(len(buf)) < n {
		c.alloc.Free(buf)
		return nil, fmt.Errorf("the allocator returned %d bytes for a %d-byte expert buffer", len(buf), n)
	}
	return buf[:n:n], nil
}

func (c *ExpertCache) freeBuf(buf []byte) {
	if c.alloc != nil && buf != nil {
		if err := c.alloc.Free(buf); err != nil {
			slog.Error("expert cache: freeing an expert buffer", "err", err)
		}
	}
}

// Release implements ExpertSource: the expert's buffer is given back (to
// the allocator, or the garbage collector) once it is released by every
// holder and no longer cached.
func (c *ExpertCache) Release(w *ExpertWeights) {
	if w == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ce := c.held[w]
	if ce == nil || ce.refs == 0 {
		return
	}
	ce.refs--
	if ce.refs == 0 {
		if ce.cached {
			delete(c.held, w)
		}
		c.maybeFree(ce)
	}
}

// freeBuffers drops every cached expert and gives back its buffer; experts
// still handed out are given back at their Release.
func (c *ExpertCache) freeBuffers() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for el := c.lru.Front(); el != nil; el = el.Next() {
		ce := el.Value.(*cachedExpert)
		ce.cached = false
		c.maybeFree(ce)
	}
	c.lru.Init()
	clear(c.entries)
	c.stats.Resident = 0
	return nil
}

// Resident reports whether expert e of layer l is in the cache.
func (c *ExpertCache) Resident(l, e int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[[2]int{l, e}]
	return ok
}

// Stats returns the counters so far.
func (c *ExpertCache) Stats() ExpertStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	if rc, ok := c.r.(interface{ reads() int64 }); ok {
		s.Reads = rc.reads()
	}
	return s
}

// Close closes the files behind the cache.
func (c *ExpertCache) Close() error {
	if c.closer != nil {
		return c.closer.Close()
	}
	return nil
}
