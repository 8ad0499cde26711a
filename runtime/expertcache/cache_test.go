package expertcache

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qpack-go/qpack/runtime"
)

// fakeBlobs lays out L layers of E experts of size bytes each in one file
// per layer, expert e of layer l at e*stride, filled with a pattern that
// names (l, e). sections > 1 splits each expert into that many extents
// read separately (like an MLX checkpoint).
type fakeBlobs struct {
	dir                    string
	L, E                   int
	size, stride           int64
	sections               int
	block                  chan struct{} // if set, Extents waits on it
	extentCalls, viewCalls sync.Map
}

func pattern(l, e int, n int64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(l), uint64(e)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newFake(t testing.TB, L, E int, size, stride int64, sections int) *fakeBlobs {
	t.Helper()
	f := &fakeBlobs{dir: t.TempDir(), L: L, E: E, size: size, stride: stride, sections: sections}
	for l := range L {
		var file []byte
		for e := range E {
			blob := pattern(l, e, size)
			file = append(file, blob...)
			file = append(file, make([]byte, stride-size)...)
		}
		if err := os.WriteFile(f.path(l), file, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fakeBlobs) path(l int) string { return filepath.Join(f.dir, fmt.Sprintf("layer_%02d.bin", l)) }
func (f *fakeBlobs) Layers() int       { return f.L }
func (f *fakeBlobs) Experts() int      { return f.E }
func (f *fakeBlobs) BufSize(l int) int64 {
	if f.sections == 1 {
		return f.stride
	}
	return f.size
}

func (f *fakeBlobs) Extents(l, e int, dst []runtime.ExpertExtent) ([]runtime.ExpertExtent, error) {
	if f.block != nil {
		<-f.block
	}
	base := int64(e) * f.stride
	if f.sections == 1 {
		return append(dst, runtime.ExpertExtent{Path: f.path(l), Offset: base, Size: f.stride}), nil
	}
	per := f.size / int64(f.sections)
	var off int64
	for i := range f.sections {
		n := per
		if i == f.sections-1 {
			n = f.size - off
		}
		dst = append(dst, runtime.ExpertExtent{Path: f.path(l), Offset: base + off, Size: n, BufOffset: off})
		off += n
	}
	return dst, nil
}

func (f *fakeBlobs) View(l, e int, buf []byte, w *runtime.ExpertWeights) error {
	*w = runtime.ExpertWeights{Layer: l, Expert: e, Buf: buf}
	return nil
}

func mustNew(t testing.TB, b Blobs, opt Options) *Cache {
	t.Helper()
	c, err := New(b, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get requests (l, e), checks its bytes and releases it.
func get(t testing.TB, c *Cache, f *fakeBlobs, l, e int) {
	t.Helper()
	w := hold(t, c, f, l, e)
	c.Release(w)
}

func hold(t testing.TB, c *Cache, f *fakeBlobs, l, e int) *runtime.ExpertWeights {
	t.Helper()
	w, err := c.Expert(l, e)
	if err != nil {
		t.Fatal(err)
	}
	if w.Layer != l || w.Expert != e || !bytes.Equal(w.Buf[:f.size], pattern(l, e, f.size)) {
		t.Fatalf("expert (%d, %d): got (%d, %d) or wrong bytes", l, e, w.Layer, w.Expert)
	}
	return w
}

// waitReads waits until no read is in flight.
func (c *Cache) waitReads() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.loading) > 0 {
		c.cond.Wait()
	}
}

func resident(c *Cache, L, E int) string {
	var s []string
	for l := range L {
		for e := range E {
			if c.Resident(l, e) {
				s = append(s, fmt.Sprintf("%d/%d", l, e))
			}
		}
	}
	return strings.Join(s, " ")
}

func TestEvictionOrderLFUThenRecency(t *testing.T) {
	f := newFake(t, 2, 8, 4096, 4096, 1)
	c := mustNew(t, f, Options{Budget: 3 * 4096})
	// Uses: (0,0) three times, (0,1) once, then (0,2) once: the cache is full.
	get(t, c, f, 0, 0)
	get(t, c, f, 0, 0)
	get(t, c, f, 0, 0)
	get(t, c, f, 0, 1)
	get(t, c, f, 0, 2)
	if got, want := resident(c, 2, 8), "0/0 0/1 0/2"; got != want {
		t.Fatalf("resident %q, want %q", got, want)
	}
	// A miss evicts the least used; (0,1) and (0,2) tie at one use and
	// (0,1) is older.
	get(t, c, f, 1, 5)
	if got, want := resident(c, 2, 8), "0/0 0/2 1/5"; got != want {
		t.Fatalf("after first eviction: resident %q, want %q", got, want)
	}
	// (0,2) and (1,5) tie at one use; (0,2) is older.
	get(t, c, f, 1, 6)
	if got, want := resident(c, 2, 8), "0/0 1/5 1/6"; got != want {
		t.Fatalf("after second eviction: resident %q, want %q", got, want)
	}
	// Counts are never reset: (0,1) comes back with two uses, which makes
	// it outrank (1,5) and (1,6); use (1,6) again so (1,5) is the victim.
	get(t, c, f, 1, 6)
	get(t, c, f, 0, 1)
	if got, want := resident(c, 2, 8), "0/0 0/1 1/6"; got != want {
		t.Fatalf("after third eviction: resident %q, want %q", got, want)
	}
	st := c.Stats()
	// Requests: 3+1+1+1+1+1+1 = 9; misses: (0,0) (0,1) (0,2) (1,5) (1,6) (0,1) = 6.
	if st.Requests != 9 || st.Misses != 6 || st.Hits != 3 || st.Evicted != 3 {
		t.Errorf("stats %+v: want 9 requests, 6 misses, 3 hits, 3 evicted", st)
	}
	if st.BytesRead != 6*4096 || st.Reads != 6 {
		t.Errorf("bytes read %d in %d reads, want %d in 6", st.BytesRead, st.Reads, 6*4096)
	}
	if st.HitRate() != 3.0/9 {
		t.Errorf("hit rate %v", st.HitRate())
	}
}

func TestPinnedExpertsAreNotEvicted(t *testing.T) {
	f := newFake(t, 2, 8, 4096, 4096, 1)
	c := mustNew(t, f, Options{Budget: 3 * 4096})
	// Layer 0's batch: three experts pinned, held by the caller.
	c.Prefetch(0, []int{1, 3, 4})
	ws := []*runtime.ExpertWeights{hold(t, c, f, 0, 1), hold(t, c, f, 0, 3), hold(t, c, f, 0, 4)}
	// Another request cannot evict them: it waits.
	got := make(chan *runtime.ExpertWeights)
	go func() {
		w, err := c.Expert(1, 0)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	select {
	case <-got:
		t.Fatal("a request evicted a pinned expert")
	case <-time.After(100 * time.Millisecond):
	}
	for _, e := range []int{1, 3, 4} {
		if !c.Resident(0, e) {
			t.Fatalf("pinned expert 0/%d evicted", e)
		}
	}
	// Releasing one pin lets the request through, evicting exactly it
	// (the other two stay pinned).
	c.Release(ws[1])
	w := <-got
	if !bytes.Equal(w.Buf[:f.size], pattern(1, 0, f.size)) {
		t.Fatal("wrong bytes for 1/0")
	}
	if r := resident(c, 2, 8); r != "0/1 0/4 1/0" {
		t.Fatalf("resident %q, want 0/1 0/4 1/0", r)
	}
	c.Release(w)
	c.Release(ws[0])
	c.Release(ws[2])
	if st := c.Stats(); st.Waits != 1 || st.PeakAllocated > st.Budget {
		t.Errorf("stats %+v: want 1 wait and peak ≤ budget", st)
	}
}

func TestPrefetchPinsAgainstOtherRequests(t *testing.T) {
	// Prefetched experts are pinned before they are requested: a request
	// for another layer in between must not evict them.
	f := newFake(t, 2, 8, 4096, 4096, 1)
	c := mustNew(t, f, Options{Budget: 3 * 4096})
	c.Prefetch(0, []int{2, 5})
	get(t, c, f, 1, 1) // fits in the third slot
	get(t, c, f, 1, 2) // must evict 1/1, the only unpinned slot
	c.waitReads()
	if r := resident(c, 2, 8); r != "0/2 0/5 1/2" {
		t.Fatalf("resident %q, want 0/2 0/5 1/2", r)
	}
	get(t, c, f, 0, 2)
	get(t, c, f, 0, 5)
	// Prefetch counted the batch's requests once: 2 misses, then 2 misses
	// for layer 1, and Expert on prefetched keys counts nothing more.
	if st := c.Stats(); st.Requests != 4 || st.Misses != 4 {
		t.Errorf("stats %+v, want 4 requests 4 misses", st)
	}
}

func TestPrefetchDoesNotWaitForReads(t *testing.T) {
	f := newFake(t, 1, 8, 4096, 4096, 1)
	f.block = make(chan struct{})
	c := mustNew(t, f, Options{Budget: 8 * 4096})
	done := make(chan struct{})
	go func() {
		c.Prefetch(0, []int{0, 1, 2, 3})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Prefetch blocked on its reads")
	}
	if c.Resident(0, 0) {
		t.Fatal("slot tagged before its read completed")
	}
	close(f.block)
	for e := range 4 {
		get(t, c, f, 0, e)
	}
}

func TestBudgetSmallerThanBatch(t *testing.T) {
	// One slot for a batch of five: reads are deferred and run as pins
	// drop, in batch order; the budget holds throughout.
	f := newFake(t, 1, 8, 5000, 8192, 1)
	c := mustNew(t, f, Options{Budget: 1})
	if c.Budget() != 8192 {
		t.Fatalf("budget %d, want one slot (8192)", c.Budget())
	}
	batch := []int{0, 2, 3, 6, 7}
	for round := range 3 {
		c.Prefetch(0, batch)
		for _, e := range batch {
			get(t, c, f, 0, e)
		}
		st := c.Stats()
		if st.PeakAllocated > 8192 {
			t.Fatalf("round %d: peak %d > budget", round, st.PeakAllocated)
		}
	}
	// Rounds 2 and 3 start with 0/7 resident: Prefetch pins it (a hit),
	// the first request steals that reservation, and 0/7 is read again
	// in its turn; so 15 reads in all.
	if st := c.Stats(); st.Misses != 13 || st.Hits != 2 || st.Requests != 15 || st.Loads != 15 {
		t.Errorf("stats %+v, want 15 requests, 13 misses, 2 hits, 15 loads", st)
	}
	// A request out of batch order also proceeds: it steals the
	// reservation of the last batch entry.
	c.Prefetch(0, []int{1, 4})
	get(t, c, f, 0, 4)
	get(t, c, f, 0, 1)
}

func TestConcurrentBudget(t *testing.T) {
	f := newFake(t, 4, 16, 3000, 4096, 3)
	const slots = 5
	c := mustNew(t, f, Options{Budget: slots * alignUp(3000), Readers: 3})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 300 {
				l, e := r.IntN(4), r.IntN(16)
				w, err := c.Expert(l, e)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(w.Buf[:f.size], pattern(l, e, f.size)) {
					t.Errorf("expert %d/%d: wrong bytes", l, e)
				}
				if r.IntN(4) == 0 {
					time.Sleep(time.Microsecond)
				}
				c.Release(w)
				if st := c.Stats(); st.Allocated > st.Budget {
					t.Errorf("allocated %d > budget %d", st.Allocated, st.Budget)
				}
			}
		}()
	}
	// One goroutine runs batches as the forward pass does.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(99, 7))
		for range 100 {
			l := r.IntN(4)
			batch := []int{r.IntN(4), 4 + r.IntN(4), 8 + r.IntN(8)}
			// A guess, partly right, before the batch (as the forward
			// pass speculates before a layer's mixer).
			c.Speculate(l, []int{batch[1], r.IntN(16), r.IntN(16)})
			c.SetScan(r.IntN(2) == 0)
			c.Prefetch(l, batch)
			for _, e := range batch {
				w, err := c.Expert(l, e)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(w.Buf[:f.size], pattern(l, e, f.size)) {
					t.Errorf("batch expert %d/%d: wrong bytes", l, e)
				}
				c.Release(w)
			}
		}
	}()
	wg.Wait()
	st := c.Stats()
	if st.PeakAllocated > st.Budget || st.Budget != slots*4096 {
		t.Fatalf("peak %d, budget %d", st.PeakAllocated, st.Budget)
	}
	if st.Requests != st.Hits+st.Misses || st.Misses == 0 || st.Hits == 0 {
		t.Errorf("stats %+v", st)
	}
	if st.Reads != 3*st.Loads || st.Loads < st.Misses {
		t.Errorf("%d reads for %d loads (%d misses), want three sections each", st.Reads, st.Loads, st.Misses)
	}
	if st.ReadP50 <= 0 || st.ReadP99 < st.ReadP50 {
		t.Errorf("latency p50 %v p99 %v", st.ReadP50, st.ReadP99)
	}
}

// Speculate reads the guessed experts ahead without counting them as uses;
// the next Prefetch of that layer finds the right guesses in flight or
// resident (hits), and the wrong ones count as wasted bytes.
func TestSpeculateThenPrefetch(t *testing.T) {
	f := newFake(t, 2, 8, 4096, 4096, 1)
	c := mustNew(t, f, Options{Budget: 4 * 4096, SpecReads: 3})
	get(t, c, f, 0, 7) // resident, one use
	c.Speculate(1, []int{3, 5, 6, 3, 99})
	if st := c.Stats(); st.Requests != 1 || st.SpecNamed != 3 || st.SpecReads != 3 {
		t.Fatalf("after Speculate: %+v; want 1 request, 3 experts named, 3 reads", st)
	}
	c.waitReads()
	if got, want := resident(c, 2, 8), "0/7 1/3 1/5 1/6"; got != want {
		t.Fatalf("resident %q, want %q", got, want)
	}
	c.Prefetch(1, []int{1, 3, 5})
	for _, e := range []int{1, 3, 5} {
		get(t, c, f, 1, e)
	}
	st := c.Stats()
	if st.Requests != 4 || st.Hits != 2 || st.Misses != 2 {
		t.Errorf("requests %d hits %d misses %d, want 4, 2 (1/3 and 1/5), 2 (0/7 and 1/1)", st.Requests, st.Hits, st.Misses)
	}
	if st.SpecCorrect != 2 || st.SpecTargets != 3 || st.SpecUseful != 2 || st.SpecCancelled != 0 || st.SpecWastedBytes != 4096 {
		t.Errorf("speculation stats %+v: want 2 of 3 correct, 2 useful reads, 4096 bytes wasted", st)
	}
	if st.Loads != 5 || st.BytesRead != 5*4096 {
		t.Errorf("%d loads, %d bytes; want 5 reads of 4096", st.Loads, st.BytesRead)
	}
	// 1/1 evicted the least used: 1/6, which the guess did not make a use
	// (it has no use; 0/7 has one).
	if got, want := resident(c, 2, 8), "0/7 1/1 1/3 1/5"; got != want {
		t.Fatalf("after the batch: resident %q, want %q", got, want)
	}
}

// A wrong guess whose read has not started when the batch comes is
// cancelled: its slot is never read into, nor tagged.
func TestSpeculateCancelsUnstartedReads(t *testing.T) {
	f := newFake(t, 1, 8, 4096, 4096, 1)
	f.block = make(chan struct{})
	c := mustNew(t, f, Options{Budget: 4 * 4096, Readers: 1, SpecReads: 3})
	c.Speculate(0, []int{0, 1, 2})
	// The one reader takes 0/0 and blocks in it; 0/1 and 0/2 stay queued.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		n := len(c.queue)
		c.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader did not take the first read")
		}
		time.Sleep(time.Millisecond)
	}
	c.Prefetch(0, []int{2, 4})
	close(f.block)
	get(t, c, f, 0, 2)
	get(t, c, f, 0, 4)
	c.waitReads()
	st := c.Stats()
	if st.SpecReads != 3 || st.SpecCancelled != 1 || st.SpecUseful != 1 || st.SpecWastedBytes != 4096 {
		t.Errorf("speculation stats %+v: want 3 reads queued, 1 cancelled (0/1), 1 useful (0/2), 4096 bytes wasted (0/0)", st)
	}
	if st.Loads != 3 || st.BytesRead != 3*4096 {
		t.Errorf("%d loads, %d bytes read; want 3 (0/0, 0/2, 0/4)", st.Loads, st.BytesRead)
	}
	if got, want := resident(c, 1, 8), "0/0 0/2 0/4"; got != want {
		t.Fatalf("resident %q, want %q", got, want)
	}
	if st.Allocated > st.Budget {
		t.Fatalf("allocated %d > budget %d", st.Allocated, st.Budget)
	}
}

// waitFor polls cond (evaluated with the cache's lock held) for up to 5 s.
func waitFor(t *testing.T, c *Cache, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// At most SpecReads speculative reads are out at once, likeliest first,
// each taking a slot only when it starts; one ending starts the next. A
// batch turns a guess being read into an ordinary request, and drops the
// guesses not yet started without reading them or evicting for them.
func TestSpecReadsBound(t *testing.T) {
	f := newFake(t, 1, 8, 4096, 4096, 1)
	c := mustNew(t, f, Options{Budget: 8 * 4096, Readers: 4, SpecReads: 1})
	c.Speculate(0, []int{0, 1, 2})
	waitFor(t, c, "the guesses to be read one after the other", func() bool { return c.st.specReads == 3 && len(c.loading) == 0 })
	if got, want := resident(c, 1, 8), "0/0 0/1 0/2"; got != want {
		t.Fatalf("resident %q, want %q", got, want)
	}
	c.Prefetch(0, []int{0})
	get(t, c, f, 0, 0)

	f.block = make(chan struct{})
	c.Speculate(0, []int{3, 4, 5})
	waitFor(t, c, "the first guess to start", func() bool { return c.specOut == 1 && len(c.queue) == 0 && len(c.loading) == 1 })
	before := c.Stats()
	c.Prefetch(0, []int{3, 6})
	close(f.block)
	get(t, c, f, 0, 3)
	get(t, c, f, 0, 6)
	c.waitReads()
	st := c.Stats()
	if st.SpecReads != 4 || st.SpecNamed != 6 || st.SpecCorrect != 2 || st.SpecUseful != 2 || st.SpecCancelled != 0 || st.SpecWastedBytes != 2*4096 {
		t.Errorf("%+v: want 4 guesses read of 6, 2 right and read, 8192 bytes wasted (0/1, 0/2)", st)
	}
	if st.Loads-before.Loads != 1 || st.Allocated != 5*4096 {
		t.Errorf("%d reads after the guess, %d bytes allocated: want one read (0/6) and five slots (4 and 5 never took one)", st.Loads-before.Loads, st.Allocated)
	}
	if got, want := resident(c, 1, 8), "0/0 0/1 0/2 0/3 0/6"; got != want {
		t.Errorf("resident %q, want %q", got, want)
	}
	if c.specOut != 0 {
		t.Errorf("%d speculative reads still counted out", c.specOut)
	}
}

// Speculation pins give way: a request that finds every slot pinned by a
// guess takes one, rather than waiting forever; a guess never evicts an
// expert the current batch has pinned.
func TestSpeculationYieldsToRequests(t *testing.T) {
	f := newFake(t, 2, 8, 4096, 4096, 1)
	c := mustNew(t, f, Options{Budget: 2 * 4096})
	c.Speculate(0, []int{0, 1, 2}) // two slots: the third guess is not read
	c.waitReads()
	if st := c.Stats(); st.SpecNamed != 3 || st.SpecReads != 2 {
		t.Fatalf("%+v: want 3 guesses, 2 read (no room for the third)", st)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		get(t, c, f, 1, 5)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a request waited on speculation pins")
	}
	// A batch pins both slots (1/5 and 1/6, held); a guess then finds no
	// unpinned slot, so it reads nothing and evicts nothing.
	c.Prefetch(1, []int{5, 6})
	w5, w6 := hold(t, c, f, 1, 5), hold(t, c, f, 1, 6)
	c.waitReads()
	before := c.Stats()
	c.Speculate(0, []int{4})
	if st := c.Stats(); st.SpecReads != before.SpecReads || st.Evicted != before.Evicted {
		t.Errorf("a guess started a read with the budget pinned: %+v", st)
	}
	c.Release(w5)
	c.Release(w6)
	if got, want := resident(c, 2, 8), "1/5 1/6"; got != want {
		t.Errorf("resident %q, want %q", got, want)
	}
}

// In scan mode a miss evicts by layer distance from the batch's layer: the
// batch layer's own other experts first (wanted again only in the next
// pass), then the layer before it, and so on round to the next layer;
// equal distance falls back to the use count, then recency. Pinned
// experts are never evicted.
func TestScanEvictionOrder(t *testing.T) {
	f := newFake(t, 4, 8, 4096, 4096, 1)
	c := mustNew(t, f, Options{Budget: 5 * 4096})
	batch := func(l int, experts ...int) {
		t.Helper()
		c.Prefetch(l, experts)
		for _, e := range experts {
			get(t, c, f, l, e)
		}
	}
	// Layer 2 has two experts, 2/1 used twice; one expert elsewhere.
	batch(0, 0)
	batch(1, 0)
	batch(2, 0, 1)
	batch(2, 1)
	batch(3, 0)
	c.SetScan(true)
	// Layer 2's batch: its own other expert with the fewest uses goes
	// first (2/0, one use, before 2/1, two).
	batch(2, 5)
	if got, want := resident(c, 4, 8), "0/0 1/0 2/1 2/5 3/0"; got != want {
		t.Fatalf("after the first scan eviction: resident %q, want %q", got, want)
	}
	// 2/5 and 2/1 (pinned by this batch) are layer 2; the next layer 2
	// expert evicts 2/5, the only unpinned one of layer 2.
	batch(2, 1, 6)
	if got, want := resident(c, 4, 8), "0/0 1/0 2/1 2/6 3/0"; got != want {
		t.Fatalf("after the second: resident %q, want %q", got, want)
	}
	// Layer 0's batch with 0/0 held by another caller: the layer-0 expert
	// is pinned, so the furthest layer after 0 goes: 3 (distance 3).
	w := hold(t, c, f, 0, 0)
	batch(0, 7)
	if got, want := resident(c, 4, 8), "0/0 0/7 1/0 2/1 2/6"; got != want {
		t.Fatalf("with 0/0 pinned: resident %q, want %q", got, want)
	}
	c.Release(w)
	// Off again: least used, then least recent (1/0, one use, oldest).
	c.SetScan(false)
	batch(3, 3)
	if got, want := resident(c, 4, 8), "0/0 0/7 2/1 2/6 3/3"; got != want {
		t.Fatalf("recency again: resident %q, want %q", got, want)
	}
	if st := c.Stats(); st.PeakAllocated > st.Budget {
		t.Fatalf("peak %d > budget %d", st.PeakAllocated, st.Budget)
	}
}

// A cyclic sweep of two layers, each batch twice the budget: with the
// recency rule each layer evicts the other's experts and the second sweep
// of layer 0 hits nothing; in scan mode a batch reserves at most
// ScanWindow reads ahead and recycles its own slots, so layer 0's last
// experts survive layer 1's batch and hit.
func TestScanKeepsExpertsAcrossSweeps(t *testing.T) {
	f := newFake(t, 2, 64, 4096, 4096, 1)
	hits := map[bool]int64{}
	for _, scan := range []bool{false, true} {
		c := mustNew(t, f, Options{Budget: 10 * 4096, Readers: 2})
		c.SetScan(scan)
		batch := make([]int, 20)
		for i := range batch {
			batch[i] = i
		}
		for l := range 2 {
			c.Prefetch(l, batch)
			if scan && l == 0 {
				c.waitReads()
				if st := c.Stats(); st.Loads != int64(c.ScanWindow()) {
					t.Errorf("scan: %d reads started ahead of the requests, want the window %d", st.Loads, c.ScanWindow())
				}
			}
			for _, e := range batch {
				get(t, c, f, l, e)
			}
		}
		before := c.Stats()
		c.Prefetch(0, batch)
		for _, e := range batch {
			get(t, c, f, 0, e)
		}
		st := c.Stats()
		hits[scan] = st.Hits - before.Hits
		if st.PeakAllocated > st.Budget {
			t.Fatalf("scan %v: peak %d > budget %d", scan, st.PeakAllocated, st.Budget)
		}
	}
	// Scan: layer 1's window (4 reads) evicted layer 0's four oldest of
	// its last ten (10..13); 14..19 hit.
	if hits[false] != 0 || hits[true] != 6 {
		t.Errorf("second sweep of layer 0: %d hits by recency, %d in scan mode; want 0 and 6", hits[false], hits[true])
	}
}

func TestDirectReads(t *testing.T) {
	f := newFake(t, 2, 4, 16384, 16384, 1)
	if !DirectAvailable(f.path(0)) {
		t.Skip("the temporary directory's file system refuses direct I/O")
	}
	c := mustNew(t, f, Options{Budget: 4 * 16384, IO: Direct})
	for e := range 4 {
		get(t, c, f, 1, e)
	}
	if st := c.Stats(); st.DirectReads != 4 || st.BytesRead != 4*16384 {
		t.Errorf("stats %+v: want 4 direct reads of 16384 bytes", st)
	}
	// Unaligned sections fall back to buffered reads, with the same bytes.
	g := newFake(t, 1, 4, 10000, 12288, 3)
	d := mustNew(t, g, Options{Budget: 4 * 12288, IO: Direct})
	for e := range 4 {
		get(t, d, g, 0, e)
	}
	if st := d.Stats(); st.Reads != 12 || st.DirectReads > 4 {
		t.Errorf("stats %+v: want 12 reads, at most the 4 aligned first sections direct", st)
	}
}

func TestReadErrorsNameFileLayerExpert(t *testing.T) {
	f := newFake(t, 2, 4, 4096, 4096, 1)
	if err := os.Truncate(f.path(1), 2*4096+100); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []IOMode{Buffered, Direct} {
		c := mustNew(t, f, Options{Budget: 4 * 4096, IO: mode})
		get(t, c, f, 1, 1)
		_, err := c.Expert(1, 2)
		if err == nil || !strings.Contains(err.Error(), "layer_01.bin") || !strings.Contains(err.Error(), "layer 1 expert 2") {
			t.Fatalf("%v: error %v, want one naming layer_01.bin, layer 1 expert 2", mode, err)
		}
		if c.Resident(1, 2) {
			t.Fatal("a failed read was tagged")
		}
		// The failed slot went back to the pool: the budget still serves.
		c.Prefetch(1, []int{3})
		if _, err := c.Expert(1, 3); err == nil {
			t.Fatal("read past the end succeeded")
		}
		for range 5 {
			get(t, c, f, 0, 1)
			get(t, c, f, 0, 2)
		}
		if st := c.Stats(); st.Allocated > st.Budget {
			t.Fatalf("stats %+v", st)
		}
	}
	if _, err := mustNew(t, f, Options{Budget: 4096}).Expert(2, 0); err == nil || !strings.Contains(err.Error(), "layer out of range") {
		t.Errorf("out-of-range layer: %v", err)
	}
}

func TestVerifyFailureIsNotCached(t *testing.T) {
	f := newFake(t, 1, 4, 4096, 4096, 1)
	bad := errors.New("digest mismatch")
	fail := true
	var mu sync.Mutex
	c := mustNew(t, f, Options{Budget: 4 * 4096, Verify: func(l, e int, buf []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if len(buf) != 4096 {
			t.Errorf("verify got %d bytes", len(buf))
		}
		if e == 2 && fail {
			return fmt.Errorf("layer %d expert %d: %w", l, e, bad)
		}
		return nil
	}})
	c.Prefetch(0, []int{1, 2})
	get(t, c, f, 0, 1)
	if _, err := c.Expert(0, 2); !errors.Is(err, bad) {
		t.Fatalf("error %v, want the verify error", err)
	}
	if c.Resident(0, 2) {
		t.Fatal("an expert that failed verification was tagged")
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	get(t, c, f, 0, 2) // read again, now accepted
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"2GiB": 2 << 30, "2G": 2 << 30, "2GB": 2e9, "512MiB": 512 << 20, "512 mib": 512 << 20,
		"1.5GiB": 3 << 29, "4096": 4096, "10B": 10, "1KB": 1000, "1k": 1024, "1TiB": 1 << 40,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "2XB", "-1G", "0", "1..5G", "1e30", "NaN", "inf", "0.1", strings.Repeat("9", 80)} {
		if v, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, v)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"2GiB", "1.5 G", "100", "7TB", "0.5KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err == nil && (v < 1 || v >= 1<<62) {
			t.Fatalf("ParseSize(%q) = %d out of range", s, v)
		}
	})
}

func TestDefaultBudget(t *testing.T) {
	avail, _ := Memory()
	b := DefaultBudget(0, 0)
	if b < MinBudget {
		t.Fatalf("default budget %d below the minimum", b)
	}
	if avail > 0 && b > avail {
		t.Fatalf("default budget %d above available memory %d", b, avail)
	}
	if got := DefaultBudget(0, 1<<20); got != 1<<20 {
		t.Errorf("capped budget %d, want 1 MiB", got)
	}
}
