package gpukernels

import (
	"fmt"
	"math"

	"github.com/qpack-go/qpack/runtime/nn"
)

// The select kernels (80_select.qk: select_chunk, select_merge,
// select_list), as every backend that launches them sees them: their
// limits and the checks on what they bring back.
const (
	SelChunk = 4096 // QK_SEL_CHUNK: the logits one group of select_chunk and select_list takes
	SelMerge = 4096 // QK_SEL_MERGE: the most chunk tops select_merge takes
	SelSlack = 32   // ids past k a chunk's region holds (nn.TopSelectSlack)
)

// SelectChunks is the number of chunks (groups) for n logits.
func SelectChunks(n int) int { return (n + SelChunk - 1) / SelChunk }

// SelectFits reports whether the select kernels take the top k of n
// logits: every chunk's k largest fit select_merge.
func SelectFits(n, k int) bool {
	return n >= 1 && k >= 1 && n < 1<<31 && int64(SelectChunks(n))*int64(k) <= SelMerge
}

// Selection is what the select kernels wrote for n logits, k and regions
// of Limit ids: the k-th largest value Th, each chunk's count of ids at
// least it, and the chunks' regions of ids and their values.
type Selection struct {
	N, K, Limit int
	Th          float32
	Count       []int32   // [chunks]
	IDs         []int32   // [chunks][Limit]
	Vals        []float32 // [chunks][Limit]
}

// Parse fills c from s and reports true; false (c empty) when the kernels
// found fewer than k values that count (Th is -Inf) or a chunk has more
// candidates than its region holds, so the caller reads the vector. An
// error means results that no correct run of the kernels gives (a NaN
// threshold, ids out of order or outside their chunk, values below the
// threshold, fewer than k candidates or k above it): the device is
// broken, and its result must not choose a token.
func (s *Selection) Parse(c *nn.TopLogits) (bool, error) {
	c.Reset()
	ok, err := s.parse(c)
	if !ok {
		c.Reset()
	}
	return ok, err
}

func (s *Selection) parse(c *nn.TopLogits) (bool, error) {
	G := SelectChunks(s.N)
	if len(s.Count) < G || len(s.IDs) < G*s.Limit || len(s.Vals) < G*s.Limit {
		return false, fmt.Errorf("select: %d counts and %d ids for %d chunks of %d", len(s.Count), len(s.IDs), G, s.Limit)
	}
	th := s.Th
	if math.IsNaN(float64(th)) {
		return false, fmt.Errorf("select_merge: a NaN threshold")
	}
	if math.IsInf(float64(th), -1) {
		return false, nil // fewer than k values neither NaN nor -Inf
	}
	last, above := -1, 0
	for g := range G {
		m := int(s.Count[g])
		if m < 0 || m > SelChunk {
			return false, fmt.Errorf("select_list: chunk %d counts %d candidates", g, m)
		}
		if m > s.Limit {
			return false, nil // ties at the threshold: the caller reads the vector
		}
		for j := range m {
			id, v := int(s.IDs[g*s.Limit+j]), s.Vals[g*s.Limit+j]
			if id <= last || id >= s.N || id/SelChunk != g || !(v >= th) {
				return false, fmt.Errorf("select_list: chunk %d's candidate %d is id %d value %g (threshold %g, previous id %d, %d logits)", g, j, id, v, th, last, s.N)
			}
			last = id
			if v > th {
				above++
			}
			c.IDs = append(c.IDs, int32(id))
			c.Logits = append(c.Logits, v)
		}
	}
	if len(c.IDs) < s.K || above >= s.K {
		return false, fmt.Errorf("select: %d candidates at least and %d above the %d-th largest value %g", len(c.IDs), above, s.K, th)
	}
	c.Th, c.K, c.N = th, s.K, s.N
	return true, nil
}
