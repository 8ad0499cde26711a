package cuda

import (
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/runtime/nn"
)

// SelectTop implements nn.TopSelector: the select kernels over x[:n], then
// one download of the threshold, the chunks' counts and their candidates
// (a wait). The result is checked before use: ids ascending and below n,
// values neither NaN nor below the threshold, at least k of them; a device
// that breaks that fails the pass, it never yields a token.
func (l *Layer) SelectTop(c *nn.TopLogits, x nn.Tensor, n, k int) (bool, error) {
	c.Reset()
	ok := l.lock()
	defer l.unlock()
	defer l.mark("SelectTop returns")
	if !ok {
		return false, l.err
	}
	if !gpukernels.SelectFits(n, k) {
		return false, nil
	}
	if !l.kernels { // the host path: the vector, then the reference
		v := make([]float32, n)
		if err := l.download(f32b(v), addr(x, n)); err != nil {
			l.fail("SelectTop", err)
			return false, l.err
		}
		return nn.SelectTopRef(c, v, k, 0), nil
	}
	G, limit := gpukernels.SelectChunks(n), k+gpukernels.SelSlack
	xp := addr(x, n)
	words := 1 + G + 2*G*limit
	var part, done devptr
	var err error
	if l.b.selectOne {
		// select_top's group counter: a word of the arena, zero at the
		// pass's start (Temps are) and again after the launch.
		words = selectTopWords(G, limit)
		done, err = l.scratch(4)
	} else {
		part, err = l.scratch(4 * int64(G*k))
	}
	if err != nil {
		l.fail("SelectTop", err)
		return false, l.err
	}
	// The results in device memory and one download, or (selectMapped) in
	// the mapped staging memory the kernels write over the bus, read in
	// place after the wait: no copy on the step's critical path.
	var out devptr
	var mapped []byte
	if l.b.selectMapped {
		mapped, out, err = l.stagedAt(4 * words)
	} else {
		out, err = l.scratch(4 * int64(words))
	}
	if err != nil {
		l.fail("SelectTop", err)
		return false, l.err
	}
	if l.b.selectOne {
		err = l.b.kSelectTopOne(out, xp, done, n, k, limit)
	} else {
		err = l.b.kSelectTop(out, xp, part, n, k, limit)
	}
	if !l.kernel("SelectTop", err) || l.err != nil {
		return false, l.err
	}
	var buf []int32
	if mapped != nil {
		if !l.wait("SelectTop") {
			return false, l.err
		}
		buf = int32sAt(mapped, words)
	} else {
		if cap(l.selBuf) < words {
			l.selBuf = make([]int32, words)
		}
		buf = l.selBuf[:words]
		if err := l.download(i32b(buf), out); err != nil {
			l.fail("SelectTop", err)
			return false, l.err
		}
	}
	if l.b.selectOne {
		ok, err = parseSelectTop(c, buf, n, k, G, limit)
	} else {
		ok, err = parseSelection(c, buf, n, k, G, limit)
	}
	if err != nil {
		l.fail("SelectTop", err)
		return false, l.err
	}
	return ok, nil
}

// parseSelection checks the select kernels' results, the 32-bit words
// in selectLayout's order (gpukernels.Selection.Parse), reading them in
// place.
func parseSelection(c *nn.TopLogits, words []int32, n, k, G, limit int) (bool, error) {
	if len(words) < 1+G+2*G*limit {
		return false, fmt.Errorf("cuda: select: %d words for %d chunks of %d", len(words), G, limit)
	}
	vals := words[1+G+G*limit : 1+G+2*G*limit]
	s := gpukernels.Selection{N: n, K: k, Limit: limit, Th: math.Float32frombits(uint32(words[0])),
		Count: words[1 : 1+G], IDs: words[1+G : 1+G+G*limit],
		Vals: unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(vals))), len(vals))}
	return s.Parse(c)
}

// SelectsTop implements nn.TopSelector: from selectMinDefault logits on
// (QPACK_CUDA_SELECT_MIN sets another bound, 0 always), where the kernels
// take the shape. On the H100 (BENCHMARKS.md, eleventh session) the
// selection made the resident decode 1.31x faster at 248,320 logits and
// 1.05x at 32,768; the first kernels, which sorted, lost at 32,768.
func (l *Layer) SelectsTop(n, k int) bool {
	return n >= l.b.selectMin && gpukernels.SelectFits(n, k)
}

// selectMappedEnv set to 1 has the select kernels write their results into
// the mapped staging memory, which the host reads in place after its wait,
// instead of device memory and a download: a copy less on the step's
// critical path, against select_list's groups reading the threshold over
// the bus. Measured even (H100, twenty-first session: 1,592 against 1,600
// tok/s resident, bench/gpu/results/session21-h100), so an A/B switch,
// off.
const selectMappedEnv = "QPACK_CUDA_SELECT_MAPPED"

// selectMinEnv overrides selectMinDefault (a count of logits; 0: always).
const selectMinEnv = "QPACK_CUDA_SELECT_MIN"

// selectMinDefault: the selection pays at 248,320 and at 32,768 logits;
// nothing below has been measured (every model qpack runs has 151,936 or
// more; the tiny test models download their few logits).
const selectMinDefault = 32768

// selectMinFor is selectMinEnv's value: a count of logits, or the default
// for anything else.
func selectMinFor(s string) int {
	if v, err := strconv.Atoi(s); err == nil && v >= 0 {
		return v
	}
	return selectMinDefault
}

var _ nn.TopSelector = (*Layer)(nil)
