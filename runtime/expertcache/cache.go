// Package expertcache is the runner's expert cache: a pool of slots bounded
// by a byte budget that holds routed experts read from disk, with an LFU
// policy broken by recency, the experts of the layer being computed pinned,
// and misses read with parallel positional reads into aligned slots
// (optionally O_DIRECT), started ahead of use so that they overlap the
// shared-expert compute.
//
// It implements runtime.ExpertSource and runtime.ExpertPrefetcher over any
// Blobs (runtime.ExpertBlobs for a .qpack container or an MLX checkpoint
// directory).
package expertcache

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/qpack-go/qpack/runtime"
)

// Blobs is what the cache reads from; *runtime.ExpertBlobs implements it.
type Blobs interface {
	Layers() int
	Experts() int
	// BufSize is the size of one expert's buffer in layer l (0: no experts).
	BufSize(l int) int64
	// Extents appends the on-disk ranges of expert e of layer l.
	Extents(l, e int, dst []runtime.ExpertExtent) ([]runtime.ExpertExtent, error)
	// View makes w's matrices view buf.
	View(l, e int, buf []byte, w *runtime.ExpertWeights) error
}

// IOMode selects how misses are read.
type IOMode int

const (
	// Buffered reads go through the OS page cache.
	Buffered IOMode = iota
	// Direct reads bypass the page cache (O_DIRECT on Linux, F_NOCACHE on
	// darwin) where the file system and the extent's alignment allow, and
	// fall back to buffered reads elsewhere.
	Direct
)

func (m IOMode) String() string {
	if m == Direct {
		return "direct"
	}
	return "buffered"
}

// ParseIOMode parses "direct" or "buffered".
func ParseIOMode(s string) (IOMode, error) {
	switch s {
	case "direct":
		return Direct, nil
	case "buffered", "":
		return Buffered, nil
	}
	return 0, fmt.Errorf("io mode %q: want direct or buffered", s)
}

// DefaultReaders is the default number of reads in flight at once.
const DefaultReaders = 8

// DefaultSpecReads is the default bound on speculative reads out at once:
// one. On the synthetic 35B-dims benchmark (2 cores, 5% of the experts
// cached) one guess at a time beat two (fewer wrong guesses in flight when
// the real batch comes, which delay its reads) and eight (a quarter more
// bytes read, and a loss against not guessing at all).
const DefaultSpecReads = 1

// Options tunes New.
type Options struct {
	// Budget bounds the bytes of all slot buffers together. A budget below
	// one expert's buffer is raised to one buffer (the least the forward
	// pass needs). It must be > 0; see DefaultBudget.
	Budget int64
	IO     IOMode
	// Readers bounds the reads in flight (0: DefaultReaders).
	Readers int
	// SpecReads bounds the speculative reads (Speculate) out at once
	// (0: DefaultSpecReads): the guesses are read likeliest first, the
	// next starting (and only then taking a slot) as one ends, so that the
	// reads that a guess starts before the real batch comes match the time
	// there is for them. Ordinary reads are never held back.
	SpecReads int
	// Verify, if set, checks each expert's bytes (buf[:BufSize(l)]) after
	// its read and before the slot is tagged; an error fails the request.
	Verify func(layer, expert int, buf []byte) error
	// Alloc and Free, if set (both or neither), provide the slot buffers
	// instead of anonymous mmap memory: the runner passes a backend's
	// runtime.Allocator, so that experts are read straight into memory
	// the device uses in place. Alloc(n) must return at least n bytes,
	// Align-aligned in Direct mode; Free gets a slice that starts where
	// Alloc's did.
	Alloc func(n int64) ([]byte, error)
	Free  func(buf []byte)
}

// key identifies an expert: layer<<32 | expert.
type key uint64

func mkKey(l, e int) key     { return key(uint64(l)<<32 | uint64(uint32(e))) }
func (k key) layer() int     { return int(k >> 32) }
func (k key) expert() int    { return int(uint32(k)) }
func (k key) String() string { return fmt.Sprintf("layer %d expert %d", k.layer(), k.expert()) }

type slotState uint8

const (
	stFree    slotState = iota // no key; in the free list
	stLoading                  // key assigned, read in flight, not tagged
	stReady                    // tagged: findable by key
	stFailed                   // read failed; freed when the last pin drops
)

type slot struct {
	key   key
	buf   []byte // aligned; len = aligned size of the layer's buffer
	size  int64  // BufSize of the key's layer
	state slotState
	refs  int    // pins: handouts not yet released + a prefetch reservation
	spec  bool   // a speculative read no batch has claimed yet
	fly   bool   // counted in specFlight
	tick  uint64 // last use
	done  chan struct{}
	err   error
	w     runtime.ExpertWeights
}

// pfEntry is one expert of the current Prefetch batch.
type pfEntry struct {
	k        key
	s        *slot // slot pinned for it; nil while deferred (no room yet)
	consumed bool  // handed out by Expert (the pin now belongs to the handout)
	counted  bool  // its hit or miss is counted
	loaded   bool  // the batch started its read (a reservation ahead)
}

// specEntry is one expert named by Speculate.
type specEntry struct {
	k    key
	s    *slot // pinned for it; nil until its turn comes
	read bool  // the speculation started its read
}

// Cache is a bounded expert cache. Expert, Release and Stats are safe for
// concurrent use; Prefetch tracks one batch at a time (one forward pass).
// A caller must not hold more experts at once than the budget has slots,
// or Expert waits forever for one to be released.
type Cache struct {
	blobs   Blobs
	opt     Options
	budget  int64
	files   *fileSet
	workers sync.WaitGroup

	mu        sync.Mutex
	cond      *sync.Cond // broadcast when a pin drops, a slot frees or a load ends
	work      *sync.Cond // signalled when a read is queued
	queue     []*slot    // reads not yet started, in the order they are needed
	slots     []*slot    // every allocated slot
	free      []*slot
	index     map[key]*slot // stReady slots
	loading   map[key]*slot // stLoading slots
	count     []uint64      // uses per key (never reset), layer*experts+expert
	tick      uint64
	allocated int64
	pf        []pfEntry
	pfIndex   map[key]int
	spec      []specEntry // the last Speculate's experts, pinned until the next batch
	specNext  int         // the next guess in spec to start a read for
	specOut   int         // speculative reads queued or in flight, unclaimed
	scan      bool        // SetScan: the policy for passes that sweep every layer
	pfLayer   int         // the layer of the current batch
	batch     uint64      // Prefetch calls so far
	closed    bool
	st        counters
	lat       latencies
}

type counters struct {
	requests, hits, misses, waits, evictions int64
	loads                                    int64
	stall                                    time.Duration
	bytesRead, reads, directReads            int64
	peakAllocated                            int64
	specNamed, specCorrect, specTargets      int64
	specReads, specUseful, specCancelled     int64
	specWasted                               int64
}

// New returns a cache over blobs.
func New(blobs Blobs, opt Options) (*Cache, error) {
	if opt.Budget <= 0 {
		return nil, fmt.Errorf("expert cache: budget %d bytes: must be positive", opt.Budget)
	}
	if opt.Readers <= 0 {
		opt.Readers = DefaultReaders
	}
	if opt.SpecReads <= 0 {
		opt.SpecReads = DefaultSpecReads
	}
	if (opt.Alloc == nil) != (opt.Free == nil) {
		return nil, fmt.Errorf("expert cache: Options.Alloc and Options.Free must be set together")
	}
	L, E := blobs.Layers(), blobs.Experts()
	if L <= 0 || E <= 0 || int64(L)*int64(E) > 1<<26 {
		return nil, fmt.Errorf("expert cache: %d layers × %d experts out of range", L, E)
	}
	var largest int64
	for l := range L {
		largest = max(largest, alignUp(blobs.BufSize(l)))
	}
	c := &Cache{
		blobs: blobs, opt: opt, budget: max(opt.Budget, largest),
		files: newFileSet(opt.IO == Direct),
		index: map[key]*slot{}, loading: map[key]*slot{}, pfIndex: map[key]int{},
		count: make([]uint64, L*E),
	}
	c.cond = sync.NewCond(&c.mu)
	c.work = sync.NewCond(&c.mu)
	c.lat.init(1 << 16)
	for range opt.Readers {
		c.workers.Add(1)
		go c.reader()
	}
	return c, nil
}

// reader is one of the Readers goroutines: it takes queued reads in order.
func (c *Cache) reader() {
	defer c.workers.Done()
	c.mu.Lock()
	for {
		for len(c.queue) == 0 && !c.closed {
			c.work.Wait()
		}
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		s := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		c.st.loads++
		c.mu.Unlock()
		c.load(s)
		c.mu.Lock()
	}
}

// claim makes s, if a speculative read, an ordinary one: a request needs
// it. Called with mu held.
func (c *Cache) claim(s *slot) {
	if s.spec {
		s.spec = false
		c.specOut--
	}
}

// Budget returns the effective byte budget (Options.Budget, raised to one
// buffer if smaller).
func (c *Cache) Budget() int64 { return c.budget }

func (c *Cache) checkKey(l, e int) error {
	if l < 0 || l >= c.blobs.Layers() {
		return fmt.Errorf("expert %d of layer %d: layer out of range [0, %d)", e, l, c.blobs.Layers())
	}
	if e < 0 || e >= c.blobs.Experts() {
		return fmt.Errorf("expert %d of layer %d: expert out of range [0, %d)", e, l, c.blobs.Experts())
	}
	if c.blobs.BufSize(l) <= 0 {
		return fmt.Errorf("expert %d of layer %d: layer has no routed experts", e, l)
	}
	return nil
}

func (c *Cache) countIdx(k key) int { return k.layer()*c.blobs.Experts() + k.expert() }

// grab returns a slot with room for size bytes, taken from the free list,
// newly allocated within the budget, or evicted (ready, unpinned, least
// count then oldest tick). nil if none can be had now. Called with mu held.
func (c *Cache) grab(size int64) (*slot, error) {
	need := alignUp(size)
	for i, s := range c.free {
		if int64(len(s.buf)) == need {
			c.free = slices.Delete(c.free, i, i+1)
			return s, nil
		}
	}
	for {
		if c.allocated+need <= c.budget {
			buf, err := c.allocSlot(need)
			if err != nil {
				return nil, fmt.Errorf("expert cache: allocating a %d-byte slot: %w", need, err)
			}
			s := &slot{buf: buf}
			c.slots = append(c.slots, s)
			c.allocated += need
			c.st.peakAllocated = max(c.st.peakAllocated, c.allocated)
			return s, nil
		}
		// A free slot of another size is given back first.
		if len(c.free) > 0 {
			c.drop(c.free[0])
			c.free = c.free[1:]
			continue
		}
		v := c.victim()
		if v == nil {
			return nil, nil
		}
		delete(c.index, v.key)
		v.state = stFree
		v.w = runtime.ExpertWeights{}
		c.st.evictions++
		if int64(len(v.buf)) == need {
			return v, nil
		}
		c.drop(v)
	}
}

// victim picks the ready, unpinned slot to evict: the least use count, the
// oldest last use breaking ties; in scan mode (SetScan), the expert whose
// layer comes furthest after the current batch's in layer order (that
// layer's own experts, needed again only in the next pass, first), then the
// least use count, then the oldest last use. Called with mu held.
func (c *Cache) victim() *slot {
	var best *slot
	var bc uint64
	var bd int
	L := c.blobs.Layers()
	for _, s := range c.slots {
		if s.state != stReady || s.refs > 0 {
			continue
		}
		sc := c.count[c.countIdx(s.key)]
		if c.scan {
			d := (s.key.layer() - c.pfLayer + L) % L
			if d == 0 {
				d = L
			}
			if best == nil || d > bd || (d == bd && (sc < bc || (sc == bc && s.tick < best.tick))) {
				best, bc, bd = s, sc, d
			}
			continue
		}
		if best == nil || sc < bc || (sc == bc && s.tick < best.tick) {
			best, bc = s, sc
		}
	}
	return best
}

// SetScan switches the policy for passes that sweep through most experts
// of every layer, layer after layer (a chunked prefill), on or off. A
// recency rule turns such a cyclic sweep larger than the budget into a
// stream of misses: each layer evicts the experts that the next pass will
// want first. In scan mode a batch evicts by layer distance (see victim)
// and reserves at most ScanWindow reads ahead of its requests, so that it
// recycles its own slots and leaves the other layers' experts resident
// for the next pass. Decode (a few experts per layer) wants it off, the
// default.
func (c *Cache) SetScan(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scan = on
}

// ScanWindow returns the most reads a batch starts ahead of its requests
// in scan mode: twice the readers.
func (c *Cache) ScanWindow() int { return 2 * c.opt.Readers }

// drop frees a slot's buffer and forgets the slot. Called with mu held.
func (c *Cache) drop(s *slot) {
	c.allocated -= int64(len(s.buf))
	c.freeSlot(s.buf)
	s.buf = nil
	if i := slices.Index(c.slots, s); i >= 0 {
		c.slots = slices.Delete(c.slots, i, i+1)
	}
}

// startLoad assigns k to s, marks it loading with one pin and queues its
// read: at the back, or at the front when urgent (a caller waits for it
// now). Reads run in queue order, so the experts a batch needs first
// arrive first. Called with mu held.
func (c *Cache) startLoad(s *slot, k key, urgent bool) {
	s.key, s.size = k, c.blobs.BufSize(k.layer())
	s.state, s.refs, s.err = stLoading, 1, nil
	s.done = make(chan struct{})
	c.loading[k] = s
	if urgent {
		c.queue = append([]*slot{s}, c.queue...)
	} else {
		c.queue = append(c.queue, s)
	}
	c.work.Signal()
}

// load reads s's expert and finishes it (tags it or marks it failed).
func (c *Cache) load(s *slot) {
	t0 := time.Now()
	n, direct, reads, err := c.read(s)
	d := time.Since(t0)
	var w runtime.ExpertWeights
	if err == nil && c.opt.Verify != nil {
		err = c.opt.Verify(s.key.layer(), s.key.expert(), s.buf[:s.size])
	}
	if err == nil {
		err = c.blobs.View(s.key.layer(), s.key.expert(), s.buf[:s.size], &w)
	}
	c.mu.Lock()
	c.st.bytesRead += n
	c.st.reads += reads
	c.st.directReads += direct
	c.lat.add(d)
	delete(c.loading, s.key)
	if err != nil {
		s.state, s.err = stFailed, err
		c.releaseLocked(s, 0) // frees it now if nobody holds it
	} else {
		s.state, s.w = stReady, w
		c.index[s.key] = s
	}
	close(s.done)
	if s.spec { // an unclaimed guess: the next one may start
		s.spec = false
		c.specOut--
		c.specPump()
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

// unpin drops one pin of s; a failed slot whose last pin drops is freed.
// Called with mu held.
func (c *Cache) releaseLocked(s *slot, n int) {
	s.refs -= n
	if s.refs < 0 {
		panic("expertcache: slot released more often than pinned")
	}
	if s.refs == 0 {
		if s.state == stFailed {
			s.state, s.err, s.w = stFree, nil, runtime.ExpertWeights{}
			c.free = append(c.free, s)
		}
		c.cond.Broadcast()
	}
}

// Prefetch implements runtime.ExpertPrefetcher: it pins the experts of
// layer l that the coming requests need, starts reading those that are not
// resident (as many as the budget has room for; the rest are read as pins
// drop), and returns without waiting. Pins left from the previous batch
// that were never requested are dropped first, and so are the pins of the
// last Speculate, once the experts both name are pinned for this batch (a
// speculative read of an expert this batch does not need is cancelled if
// it has not started).
func (c *Cache) Prefetch(l int, experts []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.dropBatch()
	c.batch++
	c.tick++
	c.pfLayer = l
	for _, e := range experts {
		if c.checkKey(l, e) != nil {
			continue // Expert reports the error
		}
		k := mkKey(l, e)
		if _, dup := c.pfIndex[k]; dup {
			continue
		}
		c.count[c.countIdx(k)]++
		c.st.requests++
		ent := pfEntry{k: k}
		if s := c.index[k]; s != nil {
			s.refs++
			s.tick = c.tick
			c.count1(&ent, true)
			ent.s = s
		} else if s := c.loading[k]; s != nil {
			s.refs++
			s.tick = c.tick
			c.count1(&ent, true)
			c.claim(s)
			ent.s = s
		}
		// A miss is read by pump below, once the speculation's pins
		// are gone.
		c.pfIndex[k] = len(c.pf)
		c.pf = append(c.pf, ent)
	}
	c.settleSpec(l)
	c.pump()
}

// settleSpec ends the last speculation against the batch just announced
// for layer l (l < 0: none): it counts what the guess got right, cancels
// the speculative reads of unneeded experts that have not started, and
// drops the speculation's pins. Called with mu held.
func (c *Cache) settleSpec(l int) {
	if len(c.spec) == 0 {
		return
	}
	if l >= 0 && c.spec[0].k.layer() == l {
		c.st.specTargets += int64(len(c.pf))
	}
	for _, ent := range c.spec {
		_, needed := c.pfIndex[ent.k]
		needed = needed && l >= 0
		if needed {
			c.st.specCorrect++
			if ent.read {
				c.st.specUseful++
			}
		}
		if ent.s == nil {
			continue
		}
		if !needed && ent.read {
			if ent.s.state == stLoading && ent.s.refs == 1 && c.unqueue(ent.s) {
				// Not started and nobody else waits for it: give the
				// slot back unread.
				delete(c.loading, ent.k)
				if ent.s.spec {
					ent.s.spec = false
					c.specOut--
				}
				ent.s.state, ent.s.refs = stFree, 0
				ent.s.w = runtime.ExpertWeights{}
				close(ent.s.done)
				c.free = append(c.free, ent.s)
				c.st.specCancelled++
				continue
			}
			c.st.specWasted += ent.s.size
		}
		c.releaseLocked(ent.s, 1)
	}
	clear(c.spec)
	c.spec, c.specNext = c.spec[:0], 0
}

// unqueue removes s from the read queue if its read has not started.
// Called with mu held.
func (c *Cache) unqueue(s *slot) bool {
	i := slices.Index(c.queue, s)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	return true
}

// Speculate implements runtime.ExpertSpeculator: experts (most likely
// first) are a guess at what the next Prefetch, for layer l, will name. It
// pins those that are resident or being read, and reads the others in
// order, at most Options.SpecReads at a time, each taking a slot (evicting,
// if need be) only when its read starts and only while a slot can be had
// without waiting. It returns at once. The guess does not count as a use
// (neither in the requests and hits nor in the use counts the policy
// keeps). The next Prefetch ends it: the guesses it names become ordinary
// requests, the others are dropped (their reads cancelled if not started).
// A Speculate replaces the previous one.
func (c *Cache) Speculate(l int, experts []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.settleSpec(-1)
	for _, e := range experts {
		if c.checkKey(l, e) != nil {
			continue
		}
		k := mkKey(l, e)
		if slices.ContainsFunc(c.spec, func(x specEntry) bool { return x.k == k }) {
			continue
		}
		c.st.specNamed++
		ent := specEntry{k: k}
		if s := c.index[k]; s != nil {
			s.refs++
			ent.s = s
		} else if s := c.loading[k]; s != nil {
			s.refs++
			ent.s = s
		}
		c.spec = append(c.spec, ent)
	}
	c.specPump()
}

// specPump starts the speculation's next reads, in order, while fewer than
// Options.SpecReads are out and slots can be had. Called with mu held.
func (c *Cache) specPump() {
	for c.specNext < len(c.spec) && c.specOut < c.opt.SpecReads && !c.closed {
		ent := &c.spec[c.specNext]
		if ent.s == nil {
			if s := c.index[ent.k]; s != nil { // read meanwhile by a request
				s.refs++
				ent.s = s
			} else if s := c.loading[ent.k]; s != nil {
				s.refs++
				ent.s = s
			} else {
				s, err := c.grab(c.blobs.BufSize(ent.k.layer()))
				if err != nil || s == nil {
					return // retried when a read ends
				}
				c.startLoad(s, ent.k, false)
				s.spec = true
				s.tick = c.tick
				c.specOut++
				c.st.specReads++
				ent.s, ent.read = s, true
			}
		}
		c.specNext++
	}
}

// dropBatch releases the pins of the previous batch's unrequested experts.
// Called with mu held.
func (c *Cache) dropBatch() {
	for _, ent := range c.pf {
		if ent.s != nil && !ent.consumed {
			c.releaseLocked(ent.s, 1)
		}
	}
	c.pf = c.pf[:0]
	clear(c.pfIndex)
}

// pump starts reads for deferred entries of the batch, in batch order,
// while slots can be had. Called with mu held.
func (c *Cache) pump() {
	if c.closed {
		return
	}
	ahead := 0 // reads started by the batch and not yet handed out
	if c.scan {
		for i := range c.pf {
			if c.pf[i].loaded && !c.pf[i].consumed {
				ahead++
			}
		}
	}
	for i := range c.pf {
		ent := &c.pf[i]
		if ent.s != nil || ent.consumed {
			continue
		}
		if s := c.index[ent.k]; s != nil { // read meanwhile by another caller
			s.refs++
			c.count1(ent, true)
			ent.s = s
			continue
		}
		if s := c.loading[ent.k]; s != nil {
			s.refs++
			c.count1(ent, true)
			c.claim(s)
			ent.s = s
			continue
		}
		if c.scan && ahead >= c.ScanWindow() {
			return
		}
		s, err := c.grab(c.blobs.BufSize(ent.k.layer()))
		if err != nil || s == nil {
			return
		}
		c.startLoad(s, ent.k, false)
		c.count1(ent, false)
		s.tick = c.tick
		ent.s, ent.loaded = s, true
		ahead++
	}
}

// count1 counts a batch entry's hit or miss once. Called with mu held.
func (c *Cache) count1(ent *pfEntry, hit bool) {
	if ent.counted {
		return
	}
	ent.counted = true
	if hit {
		c.st.hits++
	} else {
		c.st.misses++
	}
}

// steal gives up the speculation's pins, or else the batch reservation that is needed last (pinned only by
// the batch, not yet handed out), so that a request that finds no room can
// proceed. Called with mu held.
func (c *Cache) steal() bool {
	if len(c.spec) > 0 {
		c.settleSpec(-1)
		return true
	}
	for i := len(c.pf) - 1; i >= 0; i-- {
		ent := &c.pf[i]
		if ent.s != nil && !ent.consumed && ent.s.refs == 1 {
			c.releaseLocked(ent.s, 1)
			ent.s = nil
			return true
		}
	}
	return false
}

// Expert implements runtime.ExpertSource: it returns expert e of layer l
// pinned until Release, reading it first if it is not resident.
func (c *Cache) Expert(l, e int) (*runtime.ExpertWeights, error) {
	if err := c.checkKey(l, e); err != nil {
		return nil, err
	}
	k := mkKey(l, e)
	t0 := time.Now()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errors.New("expert cache: closed")
	}
	c.tick++
	var s *slot
	if i, ok := c.pfIndex[k]; ok && !c.pf[i].consumed {
		// Announced by Prefetch: counted there; its pin (if it has a slot
		// yet) becomes this handout's.
		c.pf[i].consumed = true
		s = c.pf[i].s
		if s == nil {
			// acquire may wait, and a new batch may replace this one
			// meanwhile: find the entry again afterwards.
			batch, counted := c.batch, c.pf[i].counted
			hit, err := false, error(nil)
			if s, hit, err = c.acquire(k); err != nil {
				c.mu.Unlock()
				return nil, err
			}
			if c.batch == batch {
				c.count1(&c.pf[i], hit)
				c.pf[i].s = s
			} else if counted {
			} else if hit {
				c.st.hits++
			} else {
				c.st.misses++
			}
		}
	} else {
		c.count[c.countIdx(k)]++
		c.st.requests++
		hit, err := false, error(nil)
		if s, hit, err = c.acquire(k); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if hit {
			c.st.hits++
		} else {
			c.st.misses++
		}
	}
	s.tick = c.tick
	done := s.done
	c.mu.Unlock()
	<-done
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.stall += time.Since(t0)
	if s.state == stFailed {
		err := s.err
		c.releaseLocked(s, 1)
		c.pump()
		return nil, err
	}
	return &s.w, nil
}

// acquire pins k's slot, starting its read if it has none (hit false),
// waiting for room if the budget is full. Called with mu held (released
// while waiting).
func (c *Cache) acquire(k key) (s *slot, hit bool, err error) {
	waited := false
	for {
		if s := c.index[k]; s != nil {
			s.refs++
			return s, true, nil
		}
		if s := c.loading[k]; s != nil {
			s.refs++
			c.claim(s)
			return s, true, nil
		}
		s, err := c.grab(c.blobs.BufSize(k.layer()))
		if err != nil {
			return nil, false, err
		}
		if s != nil {
			c.startLoad(s, k, true)
			return s, false, nil
		}
		if c.steal() {
			continue
		}
		if !waited {
			c.st.waits++
			waited = true
		}
		if c.closed {
			return nil, false, errors.New("expert cache: closed")
		}
		c.cond.Wait()
	}
}

// Release implements runtime.ExpertSource: it unpins w. Nothing is freed
// here; the slot stays resident until a miss evicts it.
func (c *Cache) Release(w *runtime.ExpertWeights) {
	if w == nil {
		return
	}
	k := mkKey(w.Layer, w.Expert)
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.index[k]
	if s == nil || &s.w != w {
		panic(fmt.Sprintf("expertcache: Release of %s, which is not handed out", k))
	}
	c.releaseLocked(s, 1)
	c.pump()
}

// Close waits for reads in flight, frees every slot and closes the files.
// No expert may be in use.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.work.Broadcast()
	for len(c.loading) > 0 {
		c.cond.Wait()
	}
	c.mu.Unlock()
	c.workers.Wait()
	c.mu.Lock()
	for _, s := range c.slots {
		c.freeSlot(s.buf)
		s.buf = nil
	}
	c.slots, c.free, c.allocated = nil, nil, 0
	clear(c.index)
	c.mu.Unlock()
	return c.files.close()
}

// read fills s.buf with s's expert. It returns the bytes read, how many
// reads went direct, the reads issued, and an error naming the file, layer
// and expert.
func (c *Cache) read(s *slot) (n, direct, reads int64, err error) {
	l, e := s.key.layer(), s.key.expert()
	exts, err := c.blobs.Extents(l, e, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	for i, x := range exts {
		if x.Size < 0 || x.BufOffset < 0 || x.BufOffset+x.Size > s.size {
			return n, direct, reads, fmt.Errorf("%s: layer %d expert %d: extent [%d, +%d) outside the %d-byte buffer", x.Path, l, e, x.BufOffset, x.Size, s.size)
		}
		f, err := c.files.get(x.Path)
		if err != nil {
			return n, direct, reads, fmt.Errorf("layer %d expert %d: %w", l, e, err)
		}
		last := i == len(exts)-1
		got, d, err := f.readAt(s.buf, x, last)
		reads++
		n += got
		if d {
			direct++
		}
		if err != nil {
			return n, direct, reads, fmt.Errorf("%s: layer %d expert %d: reading %d bytes at offset %d: %w", x.Path, l, e, x.Size, x.Offset, err)
		}
	}
	return n, direct, reads, nil
}

// Stats is what the cache has done since New or ResetStats.
type Stats struct {
	Requests int64 // experts asked for (Prefetch and Expert count a key once per batch)
	Hits     int64 // requests served without starting a read
	Misses   int64 // requests that started a read
	Waits    int64 // requests that had to wait for a slot to be released
	Evicted  int64
	// Loads counts expert reads started: the misses, plus re-reads when a
	// prefetched expert's reservation was given up under pressure and the
	// expert evicted before its use, plus the speculative reads that were
	// not cancelled before they started.
	Loads int64
	// Stall is the time Expert calls spent waiting (for a read or a slot).
	Stall time.Duration

	Reads       int64 // positional reads issued (one per blob, or per section)
	DirectReads int64 // of those, reads that bypassed the page cache
	BytesRead   int64
	ReadP50     time.Duration // latency of one expert's read(s)
	ReadP99     time.Duration

	// Speculation (Speculate, then the next Prefetch of the same layer):
	// experts guessed; of those, the ones that Prefetch named too; the
	// experts that Prefetch named (SpecCorrect/SpecTargets is the share of
	// the real batch that was foreseen); the reads the guesses started; of
	// those, the ones for experts the batch named; the ones cancelled
	// before a reader took them (the batch did not name them); and the
	// bytes of the others, read for nothing.
	SpecNamed, SpecCorrect, SpecTargets  int64
	SpecReads, SpecUseful, SpecCancelled int64
	SpecWastedBytes                      int64

	Budget        int64 // effective byte budget
	Allocated     int64 // bytes of slot buffers now
	PeakAllocated int64 // most bytes of slot buffers at once
	Resident      int   // experts tagged now
}

// HitRate is Hits / Requests (0 when there were none).
func (s Stats) HitRate() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Requests)
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	p50, p99 := c.lat.percentiles()
	return Stats{
		Requests: c.st.requests, Hits: c.st.hits, Misses: c.st.misses, Waits: c.st.waits, Evicted: c.st.evictions, Loads: c.st.loads, Stall: c.st.stall,
		Reads: c.st.reads, DirectReads: c.st.directReads, BytesRead: c.st.bytesRead,
		ReadP50: p50, ReadP99: p99,
		SpecNamed: c.st.specNamed, SpecCorrect: c.st.specCorrect, SpecTargets: c.st.specTargets,
		SpecReads: c.st.specReads, SpecUseful: c.st.specUseful, SpecCancelled: c.st.specCancelled, SpecWastedBytes: c.st.specWasted,
		Budget: c.budget, Allocated: c.allocated, PeakAllocated: c.st.peakAllocated, Resident: len(c.index),
	}
}

// ResetStats zeroes the counters (not the use counts the policy keeps).
func (c *Cache) ResetStats() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st = counters{peakAllocated: c.allocated}
	c.lat.reset()
}

// Resident reports whether expert e of layer l is tagged in the cache.
func (c *Cache) Resident(l, e int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.index[mkKey(l, e)] != nil
}

// latencies keeps the most recent read latencies in a ring.
type latencies struct {
	ring []time.Duration
	n    int
}

func (x *latencies) init(n int) { x.ring = make([]time.Duration, 0, n) }
func (x *latencies) reset()     { x.ring, x.n = x.ring[:0], 0 }
func (x *latencies) add(d time.Duration) {
	if len(x.ring) < cap(x.ring) {
		x.ring = append(x.ring, d)
	} else {
		x.ring[x.n%len(x.ring)] = d
	}
	x.n++
}

// percentiles returns the nearest-rank p50 and p99.
func (x *latencies) percentiles() (p50, p99 time.Duration) {
	if len(x.ring) == 0 {
		return 0, 0
	}
	s := slices.Clone(x.ring)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return rank(0.50), rank(0.99)
}

var _ interface {
	runtime.ExpertSource
	runtime.ExpertPrefetcher
	runtime.ExpertSpeculator
} = (*Cache)(nil)
