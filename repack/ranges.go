package repack

import (
	"fmt"
	"sort"
)

// DefaultRangeSize is the size of one range read: large enough that a
// request's setup cost vanishes, small enough that a lost range costs
// little.
const DefaultRangeSize = 32 << 20

// Limits on the range size a caller may ask for.
const (
	MinRangeSize = 4 << 10
	MaxRangeSize = 256 << 20
)

// dstDense is the destination index of model.safetensors; layer files are
// 0..LayerCount-1.
const dstDense = -1

// dstGap marks source bytes that go nowhere in the container (the header,
// skipped tensors, padding): they are read only to be hashed.
const dstGap = -2

// item is one source tensor as placed in the container: a dense tensor
// (one run) or a stacked expert tensor (E runs of per bytes, expert e at
// dst + e*stride).
type item struct {
	off, size int64 // source bytes [off, off+size)
	dst       int   // dstDense or a layer index
	dstOff    int64 // dense: absolute offset in model.safetensors; expert: section offset in the blob
	per       int64 // expert: bytes per expert; 0 for dense
	layer     int   // -1 for dense
}

// piece is a run of source bytes that goes to one place: a gap, or one
// contiguous destination run.
type piece struct {
	srcOff, n int64
	dst       int   // dstGap, dstDense or a layer index
	dstOff    int64 // within the destination file
}

// srcRange is one range read: a contiguous span of a shard. Ranges tile
// every shard from byte 0 to its end, so every byte passes through the
// shard's hash.
type srcRange struct {
	id         int
	shard      int
	off, end   int64
	copied     int64 // bytes that land in the container
	firstLayer int   // first expert layer the range writes, -1 if none
}

// gapless reports whether every byte of r lands in the container.
func (r srcRange) gapless() bool { return r.copied == r.end-r.off }

// layoutMap is the plan in the form execution uses: per shard, the placed
// tensors sorted by source offset. It holds one entry per tensor (not per
// expert), so its size does not grow with the expert count.
type layoutMap struct {
	items  [][]item // per shard
	stride int64
	ranges []srcRange
	// layerLast holds, per expert layer, the id of the last range that
	// writes to its file (-1 if none does): once it is committed, the
	// layer's file is complete.
	layerLast []int
}

func newLayoutMap(p *Plan, rangeSize int64) (*layoutMap, error) {
	if rangeSize < MinRangeSize || rangeSize > MaxRangeSize {
		return nil, fmt.Errorf("range size %d is outside [%d, %d]", rangeSize, MinRangeSize, MaxRangeSize)
	}
	m := &layoutMap{items: make([][]item, len(p.Shards)), stride: p.Layout.ExpertStride, layerLast: make([]int, p.Layout.LayerCount)}
	for l := range m.layerLast {
		m.layerLast[l] = -1
	}
	for _, d := range p.Dense {
		if d.Src.Size == 0 {
			continue // nothing to copy; an empty tensor may sit anywhere
		}
		m.items[d.Shard] = append(m.items[d.Shard], item{off: d.Src.Offset, size: d.Src.Size, dst: dstDense, dstOff: d.Dst.Offset, layer: -1})
	}
	E := int64(p.Layout.ExpertCount)
	for _, x := range p.Experts {
		sec := p.Layout.Sections[x.Section]
		if x.Src.Size != E*sec.Size {
			return nil, fmt.Errorf("%s: tensor %q: %d bytes, want %d experts x %d", p.Shards[x.Shard].Name, x.Src.Name, x.Src.Size, E, sec.Size)
		}
		m.items[x.Shard] = append(m.items[x.Shard], item{off: x.Src.Offset, size: x.Src.Size, dst: x.Layer, dstOff: sec.Offset, per: sec.Size, layer: x.Layer})
	}
	for si := range m.items {
		its := m.items[si]
		sort.Slice(its, func(i, j int) bool { return its[i].off < its[j].off })
		for i := 1; i < len(its); i++ {
			if its[i].off < its[i-1].off+its[i-1].size {
				return nil, fmt.Errorf("%s: tensors overlap at byte %d", p.Shards[si].Name, its[i].off)
			}
		}
		if n := len(its); n > 0 && its[n-1].off+its[n-1].size > p.Shards[si].Size {
			return nil, fmt.Errorf("%s: a tensor ends past the end of the file", p.Shards[si].Name)
		}
	}
	for si, sh := range p.Shards {
		for off := int64(0); off < sh.Size; off += rangeSize {
			r := srcRange{id: len(m.ranges), shard: si, off: off, end: min(off+rangeSize, sh.Size), firstLayer: -1}
			m.forEach(r, func(pc piece) error {
				if pc.dst != dstGap {
					r.copied += pc.n
					if pc.dst >= 0 && r.firstLayer < 0 {
						r.firstLayer = pc.dst
					}
					if pc.dst >= 0 && pc.dst < len(m.layerLast) {
						m.layerLast[pc.dst] = r.id
					}
				}
				return nil
			})
			m.ranges = append(m.ranges, r)
		}
		if sh.Size == 0 {
			// An empty shard still gets a range, so that its (empty)
			// hash is checked.
			m.ranges = append(m.ranges, srcRange{id: len(m.ranges), shard: si, firstLayer: -1})
		}
	}
	return m, nil
}

// forEach calls fn for the pieces of r in source order; together they tile
// [r.off, r.end) exactly. Expert runs are split at expert boundaries.
func (m *layoutMap) forEach(r srcRange, fn func(piece) error) error {
	its := m.items[r.shard]
	// First item that ends after r.off.
	i := sort.Search(len(its), func(i int) bool { return its[i].off+its[i].size > r.off })
	pos := r.off
	for pos < r.end {
		if i >= len(its) || its[i].off >= r.end {
			return fn(piece{srcOff: pos, n: r.end - pos, dst: dstGap})
		}
		it := its[i]
		if pos < it.off {
			if err := fn(piece{srcOff: pos, n: it.off - pos, dst: dstGap}); err != nil {
				return err
			}
			pos = it.off
		}
		stop := min(it.off+it.size, r.end)
		for pos < stop {
			rel := pos - it.off
			pc := piece{srcOff: pos, dst: it.dst}
			if it.per == 0 {
				pc.n = stop - pos
				pc.dstOff = it.dstOff + rel
			} else {
				e, within := rel/it.per, rel%it.per
				pc.n = min(it.per-within, stop-pos)
				pc.dstOff = e*m.stride + it.dstOff + within
			}
			if pc.n > 0 {
				if err := fn(pc); err != nil {
					return err
				}
			}
			pos += pc.n
		}
		i++
	}
	return nil
}
