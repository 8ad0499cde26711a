package repack

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/blake3"
)

// Sub-range progress: while a range is being fetched its worker records,
// after every tile it wrote, how many of the range's bytes are in place and
// a BLAKE3 digest of them; the journal carries these records (journal
// .Partial), so a kill or an interrupt loses at most one tile per
// connection (plus what the network had in flight), not whole ranges.

// prefixHasher starts the BLAKE3 prefix digest of range r: domain-separated
// from range digests, bound to the range's identity and start, so that a
// record cannot be replayed for another range.
func prefixHasher(r srcRange) *blake3.Hasher {
	h := blake3.New()
	var hdr [32]byte
	copy(hdr[:8], "qpackpfx")
	binary.LittleEndian.PutUint64(hdr[8:], uint64(r.id))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(r.shard))
	binary.LittleEndian.PutUint64(hdr[24:], uint64(r.off))
	h.Write(hdr[:])
	return h
}

func hexSum(h *blake3.Hasher) string { return hex.EncodeToString(h.Sum(nil)) }

// partialState is the executor's record of ranges in flight.
type partialState struct {
	mu  sync.Mutex
	m   map[int]partialRange
	gen atomic.Int64 // bumped on every change, so the committer knows to save
}

func (p *partialState) init(recs []partialRange) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m = map[int]partialRange{}
	for _, r := range recs {
		p.m[r.Range] = r
	}
}

func (p *partialState) get(id int) (partialRange, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.m[id]
	return r, ok
}

func (p *partialState) set(r partialRange) {
	p.mu.Lock()
	p.m[r.Range] = r
	p.mu.Unlock()
	p.gen.Add(1)
}

func (p *partialState) drop(id int) {
	p.mu.Lock()
	_, ok := p.m[id]
	delete(p.m, id)
	p.mu.Unlock()
	if ok {
		p.gen.Add(1)
	}
}

// list returns the records of ranges at or after frontier, ascending.
func (p *partialState) list(frontier int) []partialRange {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []partialRange
	for id, r := range p.m {
		if id >= frontier {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Range < out[j].Range })
	return out
}

// resumePrefix checks the recorded prefix of range r against what is on
// disk and returns how many of its bytes need not be fetched again and the
// prefix hasher to continue (fed those bytes). A prefix that no longer
// matches (a damaged file, a spill file lost) is dropped: the whole range
// is fetched again.
func (x *executor) resumePrefix(r srcRange, buf []byte) (int64, *blake3.Hasher) {
	h := prefixHasher(r)
	rec, ok := x.inflight.get(r.id)
	if !ok {
		return 0, h
	}
	pre := srcRange{id: r.id, shard: r.shard, off: r.off, end: r.off + rec.Done}
	err := x.hashPlaced(pre, h, buf)
	if err == nil && hexSum(h) == rec.Digest {
		return rec.Done, h
	}
	x.log.Debug("partial range on disk does not match its record; fetching it again", "range", r.id, "err", err)
	x.streamed.Add(-rec.Done)
	x.inflight.drop(r.id)
	return 0, prefixHasher(r)
}

// hashPlaced feeds h the bytes of (sub)range r as they are on disk, in
// source order: placed bytes re-read from their destinations, gap bytes
// from the range's spill file.
func (x *executor) hashPlaced(r srcRange, h io.Writer, buf []byte) error {
	var gap *os.File
	defer func() {
		if gap != nil {
			gap.Close()
		}
	}()
	var gapOff int64
	return x.m.forEach(r, func(pc piece) error {
		for done := int64(0); done < pc.n; {
			n := min(int64(len(buf)), pc.n-done)
			b := buf[:n]
			if pc.dst == dstGap {
				if gap == nil {
					f, err := os.Open(x.gapPath(r.id))
					if err != nil {
						return fmt.Errorf("gap bytes of range %d: %w", r.id, err)
					}
					gap = f
				}
				if _, err := gap.ReadAt(b, gapOff+done); err != nil {
					return fmt.Errorf("gap bytes of range %d: %w", r.id, err)
				}
			} else if err := x.readPiece(pc, done, b); err != nil {
				return err
			}
			h.Write(b)
			done += n
		}
		if pc.dst == dstGap {
			gapOff += pc.n
		}
		return nil
	})
}

// progressReporter calls the executor's progress callback with the bytes
// in place, from one goroutine at a time and at most every interval,
// except that the first report of a layer and the last report always go
// through.
type progressReporter struct {
	mu        sync.Mutex
	last      time.Time
	lastLayer int
	interval  time.Duration
}

// report tells the callback that the copy has streamed x.streamed bytes;
// layer is the layer being written (-1: none).
func (x *executor) report(layer int, force bool) {
	if x.progress == nil {
		return
	}
	pr := &x.reporter
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if !force && time.Since(pr.last) < pr.interval && (layer < 0 || layer == pr.lastLayer) {
		return // a new layer is always reported
	}
	pr.last = time.Now()
	if layer >= 0 {
		pr.lastLayer = layer
	}
	x.progress(x.streamed.Load(), layer)
}

// countingReader reports every read to the executor's progress, so that
// progress moves with the bytes on a slow link, not once per tile.
type countingReader struct {
	r     io.Reader
	x     *executor
	layer int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.x.streamed.Add(int64(n))
		c.x.report(c.layer, false)
	}
	return n, err
}
