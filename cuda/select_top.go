package cuda

import (
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The selection in one launch (select_top, kernels/27_select.cu) where the
// select kernels of internal/gpukernels take three (select_chunk,
// select_merge, select_list): each chunk's group finds its own k-th
// largest and lists the ids at and above it, and the last group to finish
// finds the threshold from those lists; the host keeps what is at least
// the threshold. QPACK_CUDA_SELECT picks it (selectOneFor).

// selectEnv: "one" selects the top in one launch (select_top), "three" (or
// anything else) in the three of 80_select.qk.
const selectEnv = "QPACK_CUDA_SELECT"

// selectOneFor is selectEnv's value: whether the selection is one launch.
func selectOneFor(s string) bool { return strings.TrimSpace(s) == "one" }

// sizeSelTop is SelectTopParams' size.
const sizeSelTop = 72

// selectTopWords is the number of 32-bit words select_top writes for G
// chunks of regions of limit: the threshold, G counts, G counts above the
// chunk's own k-th largest, G regions of ids, G of values.
func selectTopWords(G, limit int) int { return 1 + 2*G + 2*G*limit }

// selectTopLayout places select_top's results from out: th, cnt, above,
// ids, vals (selectTopWords of them).
func selectTopLayout(out devptr, G, limit int) (th, cnt, above, ids, vals devptr) {
	th = out
	cnt = th + 4
	above = cnt + 4*uint64(G)
	ids = above + 4*uint64(G)
	vals = ids + 4*uint64(G*limit)
	return
}

// kSelectTopOne queues select_top over x[:n] for the top k, regions of
// limit ids, its results at out (selectTopLayout), done its group counter
// (a zero word, zero again after the launch).
func (b *Backend) kSelectTopOne(out, x, done devptr, n, k, limit int) error {
	if !gpukernels.SelectFits(n, k) || limit < k || int64(gpukernels.SelectChunks(n))*int64(limit) >= indexLimit {
		return fmt.Errorf("cuda: kernel select_top: n %d, k %d, limit %d", n, k, limit)
	}
	G := gpukernels.SelectChunks(n)
	th, cnt, above, ids, vals := selectTopLayout(out, G, limit)
	p := params(make([]byte, 0, sizeSelTop)).ptr(x).ptr(th).ptr(cnt).ptr(above).ptr(ids).ptr(vals).ptr(done).
		u32(n).u32(k).u32(limit).u32(0)
	return b.launch("select_top", [3]int{G, 1, 1}, tgThreads, p, sizeSelTop)
}

// selKey is select_top's key of v (qk_sel_key of v, -0 taken as +0): the
// floats' order as unsigned integers, NaN and -Inf 0.
func selKey(v float32) uint32 {
	if !(v > float32(math.Inf(-1))) {
		return 0
	}
	if v == 0 {
		v = 0
	}
	u := math.Float32bits(v)
	if u&0x80000000 != 0 {
		return ^u
	}
	return u | 0x80000000
}

// parseSelectTop fills c from select_top's words (selectTopLayout's order)
// and reports true; false (c empty) when fewer than k values count (the
// threshold is -Inf) or a chunk's ties at the threshold overflow its
// region, so the caller reads the vector. An error means results no
// correct run of the kernel gives (a NaN threshold, counts out of range,
// ids out of order or outside their chunk, a region's values not above or
// at its chunk's k-th largest, the threshold below one, fewer than k
// candidates or k above the threshold): the device is broken, and its
// result must not choose a token.
func parseSelectTop(c *nn.TopLogits, words []int32, n, k, G, limit int) (bool, error) {
	c.Reset()
	ok, err := parseSelectTopInto(c, words, n, k, G, limit)
	if !ok {
		c.Reset()
	}
	return ok, err
}

func parseSelectTopInto(c *nn.TopLogits, words []int32, n, k, G, limit int) (bool, error) {
	if k < 1 || limit < k || G != gpukernels.SelectChunks(n) || len(words) < selectTopWords(G, limit) {
		return false, fmt.Errorf("cuda: select_top: %d words for %d chunks of %d (n %d, k %d)", len(words), G, limit, n, k)
	}
	f32 := func(w int32) float32 { return math.Float32frombits(uint32(w)) }
	th := f32(words[0])
	if math.IsNaN(float64(th)) {
		return false, fmt.Errorf("cuda: select_top: a NaN threshold")
	}
	if math.IsInf(float64(th), -1) {
		return false, nil // fewer than k values neither NaN nor -Inf
	}
	cnts, aboves := words[1:1+G], words[1+G:1+2*G]
	ids, vals := words[1+2*G:1+2*G+G*limit], words[1+2*G+G*limit:1+2*G+2*G*limit]
	kth := selKey(th)
	over := 0 // values above th
	for g := range G {
		m, a := int(cnts[g]), int(aboves[g])
		if a < 0 || a >= k || m < a || m > gpukernels.SelChunk {
			return false, fmt.Errorf("cuda: select_top: chunk %d counts %d, %d of them above its k-th largest (k %d)", g, m, a, k)
		}
		region := func(j int) (int, float32) { return int(ids[g*limit+j]), f32(vals[g*limit+j]) }
		lo := g * gpukernels.SelChunk
		hi := min(n, lo+gpukernels.SelChunk)
		// The run at the chunk's k-th largest (none when fewer than k of
		// its values count): its key is that of its first value.
		eq := min(m, limit) - a
		var tkey uint32
		if eq > 0 {
			_, v := region(a)
			tkey = selKey(v)
			if tkey == 0 || tkey > kth {
				return false, fmt.Errorf("cuda: select_top: chunk %d's k-th largest %g is NaN, -Inf or above the threshold %g", g, v, th)
			}
		}
		check := func(from, to int, what string, keyOK func(uint32) bool) error {
			last := -1
			for j := from; j < to; j++ {
				id, v := region(j)
				if id <= last || id < lo || id >= hi || !keyOK(selKey(v)) {
					return fmt.Errorf("cuda: select_top: chunk %d's candidate %d (%s) is id %d value %g (previous id %d, %d logits)", g, j, what, id, v, last, n)
				}
				last = id
			}
			return nil
		}
		if err := check(0, a, "above its k-th largest", func(u uint32) bool { return u > tkey }); err != nil {
			return false, err
		}
		if err := check(a, a+eq, "at its k-th largest", func(u uint32) bool { return u == tkey }); err != nil {
			return false, err
		}
		// The ids at least th: those above the chunk's k-th largest that
		// are, and the run at it when it is th (all of it, or the vector).
		takeEq := eq > 0 && tkey == kth
		if takeEq && m > limit {
			return false, nil // ties at the threshold: the caller reads the vector
		}
		i, j := 0, a
		if !takeEq {
			j = a + eq
		}
		for i < a || j < a+eq {
			var id int
			var v float32
			if j >= a+eq || (i < a && ids[g*limit+i] < ids[g*limit+j]) {
				id, v = region(i)
				i++
				if selKey(v) < kth {
					continue
				}
			} else {
				id, v = region(j)
				j++
			}
			if len(c.IDs) > 0 && int(c.IDs[len(c.IDs)-1]) >= id {
				return false, fmt.Errorf("cuda: select_top: chunk %d lists id %d twice", g, id)
			}
			if selKey(v) > kth {
				over++
			}
			c.IDs = append(c.IDs, int32(id))
			c.Logits = append(c.Logits, v)
		}
	}
	if len(c.IDs) < k || over >= k {
		return false, fmt.Errorf("cuda: select_top: %d candidates at least and %d above the %d-th largest value %g", len(c.IDs), over, k, th)
	}
	c.Th, c.K, c.N = th, k, n
	return true, nil
}

// int32sAt views n words of b as int32s (the mapped staging memory).
func int32sAt(b []byte, n int) []int32 {
	return unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(b))), n)
}
