package cuda

import (
	"encoding/binary"
	"fmt"

	"github.com/qpack-go/qpack/runtime/nn"
)

// The next layer's first matrix into the L2 under this layer's MoE
// (kernels/22_moe.cu, qp_moe_prefetch_next). A decode step's layers come
// one after the other, each beginning with a product of megabytes of
// dense weights (a DeltaNet's input projections: 16 MB at the 35B's dims)
// read from HBM while the MoE before it (the router's choice, the
// experts' gate/up and down: a few megabytes, bound by its instructions)
// leaves HBM mostly idle. With QPACK_CUDA_PF_NEXT set, a routed layer's
// expert table learns the first matrix the pass multiplies after the
// layer (its tail: three address and byte count pairs, the matrix's
// packed weights, scales and biases, pfNextCap bytes at most in all) and
// the MoE launch it names prefetches those lines into the L2 before its
// wait, so that the next product reads the L2. The results are the same
// bits either way (a prefetch is only a hint).

// pfNextEnv names the launch that prefetches: "gateup" (the default),
// "down", or "off" (none). Measured (H100, 35b dims, 8 layers, 32,768
// logits, 1,024 tokens, three interleaved rounds, twenty-seventh session:
// bench/gpu/results/session27-h100/ab.txt): none 1,673.8 tok/s, down
// 1,711.3 (+2.2%), gateup 1,731.5 (+3.4%, every round above every round
// of none); with 248,320 logits, gateup against none: +1.9% at the 80b's
// dims, +2.8% at the 35B's (ab-vocab248320.txt).
const pfNextEnv = "QPACK_CUDA_PF_NEXT"

const (
	pfNone = iota
	pfDown
	pfGateUp
)

func pfNextFor(v string) int {
	switch v {
	case "down":
		return pfDown
	case "off", "none", "0":
		return pfNone
	}
	return pfGateUp
}

// pfTailBytes is the size of an expert table's tail: three ranges.
const pfTailBytes = 6 * 8

// pfNextCap bounds the bytes prefetched after a layer, well inside an
// H100's 50 MB L2 (a head's product of a large vocabulary is more).
const pfNextCap = 24 << 20

// prefetchNext sets the launch's next pointer (decode: one token) to the
// table's learned ranges, or marks the table to learn them from the pass's
// next product; lock held.
func (l *Layer) prefetchNext(tab *expertTable, T int, up, dn *moeParams) {
	if l.b.pfNext == pfNone || T != 1 {
		return
	}
	if !tab.pfSet {
		l.pfWant = tab
		return
	}
	if l.b.pfNext == pfDown {
		dn.next = tab.tail()
	} else {
		up.next = tab.tail()
	}
}

// tail is the device address of the table's ranges: after its cap·9 words
// (expertTable allocates them with the table).
func (t *expertTable) tail() devptr { return t.p + uint64(8*9*t.cap) }

// learnNext writes w's ranges into the tail of the table that waits for
// the pass's next product (pfWant), when w is a device matrix.
func (l *Layer) learnNext(w nn.Mat) {
	ok := l.lockKeep()
	defer l.unlock()
	tab := l.pfWant
	l.pfWant = nil
	d, isDev := w.Dev.(*devMat)
	if !ok || tab == nil || !isDev {
		return
	}
	m := w.W
	words := make([]byte, pfTailBytes)
	left := int64(pfNextCap)
	for i, r := range []struct {
		p devptr
		n int
	}{{d.w, len(m.Weight)}, {d.s, len(m.Scales)}, {d.b, len(m.Biases)}} {
		n := min(int64(r.n), left)
		left -= n
		binary.LittleEndian.PutUint64(words[16*i:], r.p)
		binary.LittleEndian.PutUint64(words[16*i+8:], uint64(n))
	}
	if err := l.upload(tab.tail(), words, false); err != nil {
		l.fail("MatMul", fmt.Errorf("the expert table's prefetch ranges: %w", err))
		return
	}
	tab.pfSet = true
}
