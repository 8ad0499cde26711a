package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// SelectTop (nn.TopSelector, optional): the top k of a logits vector is
// nn.SelectTopRef's exactly (the same ids in ascending order, the same
// logit bits, the same threshold) over spread values, ties, NaN, ±Inf and
// ±0, the top crowded into one place, and vectors with fewer than k values
// that count (declined); a decline is allowed only where the reference
// lists more than k+TopSelectSlack ids; x is left as it was.
func testSelectTop(t *testing.T, dev nn.Device, _ Tolerances) {
	sel, ok := dev.(nn.TopSelector)
	if !ok {
		t.Skipf("%s selects on the host only (not an nn.TopSelector)", dev.Name())
	}
	r := rng(23)
	for _, c := range []struct{ n, k int }{{1, 1}, {7, 3}, {300, 64}, {4096, 1}, {4097, 20}, {9000, 64}} {
		for kind := range SelectKinds {
			what := fmt.Sprintf("n=%d k=%d kind %d", c.n, c.k, kind)
			x := SelectLogits(r, c.n, kind)
			xt := put(dev, x)
			var got nn.TopLogits
			ok, err := sel.SelectTop(&got, xt, c.n, c.k)
			if err != nil {
				t.Fatalf("%s: %s: SelectTop: %v", what, dev.Name(), err)
			}
			var want nn.TopLogits
			wok := nn.SelectTopRef(&want, x, c.k, 0)
			switch {
			case !ok && len(got.IDs) != 0:
				t.Fatalf("%s: declined with %d ids left", what, len(got.IDs))
			case !ok && wok && len(want.IDs) <= c.k+nn.TopSelectSlack:
				t.Fatalf("%s: declined; the reference lists %d ids", what, len(want.IDs))
			case ok && !wok:
				t.Fatalf("%s: selected %d ids; the reference declines", what, len(got.IDs))
			case ok:
				if !slices.Equal(got.IDs, want.IDs) || got.Th != want.Th || got.K != c.k || got.N != c.n {
					t.Fatalf("%s: ids %v th %g k %d n %d, want %v th %g", what, got.IDs, got.Th, got.K, got.N, want.IDs, want.Th)
				}
				exact(t, what+" logits", got.Logits, want.Logits)
			}
			exact(t, what+": x afterwards", get(t, dev, xt), x)
		}
	}
}

// SelectKinds is the number of kinds SelectLogits makes.
const SelectKinds = 5

// SelectLogits returns n logits of a kind: 0 spread, 1 four distinct
// values (ties), 2 spread with NaN, ±Inf and ±0 among them, 3 the largest
// crowded into 100 neighbours, 4 NaN and -Inf but five. (The selection
// tests of every backend draw from it.)
func SelectLogits(r *rand.Rand, n, kind int) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch kind {
		case 1:
			x[i] = float32(r.IntN(4)) * 0.5
		case 4:
			x[i] = float32(math.Inf(-1))
			if r.IntN(3) == 0 {
				x[i] = float32(math.NaN())
			}
		default:
			x[i] = float32(r.NormFloat64() * 4)
		}
	}
	switch kind {
	case 2:
		for _, v := range []float64{math.NaN(), math.Inf(-1), math.Copysign(0, -1), 0, math.Copysign(0, -1), math.Inf(1)} {
			x[r.IntN(n)] = float32(v)
		}
	case 3:
		at := r.IntN(n)
		for i := at; i < min(n, at+100); i++ {
			x[i] = 40 + float32(r.NormFloat64())
		}
	case 4:
		for range 5 {
			x[r.IntN(n)] = float32(r.NormFloat64())
		}
	}
	return x
}

// SelectOps runs the SelectTop part of Ops alone (a backend's switch that
// changes only how the top is selected or brought back).
func SelectOps(t *testing.T, dev nn.Device) {
	runOp(t, dev, DefaultTolerances().filled(), "SelectTop", testSelectTop)
}
