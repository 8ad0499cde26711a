package nn

import "math"

// Selecting a decode step's candidates on the device: a top-k draw reads
// only the logits at least as large as the k-th largest, so a GPU can list
// those few and bring them back instead of the whole vector (at a 248K
// vocabulary a 1 MB download and a scan the host otherwise makes).

// TopLogits is the top of a logits vector x: the ids of every x[i] at
// least Th, in ascending order, with their logits, where Th is the K-th
// largest of x's values that are neither NaN nor -Inf, counted with
// multiplicity (-0 equal to +0). That is what the sampler's top-k scan
// keeps of x, so a draw from it is the draw from x.
type TopLogits struct {
	IDs    []int32   // ascending
	Logits []float32 // Logits[j] = x[IDs[j]]
	Th     float32   // the K-th largest value
	K      int       // the k asked for
	N      int       // the length of x
}

// Reset empties c, keeping its storage.
func (c *TopLogits) Reset() {
	c.IDs, c.Logits = c.IDs[:0], c.Logits[:0]
	c.Th, c.K, c.N = 0, 0, 0
}

// The range every TopSelector takes (devicetest.Ops holds it to it): a
// top-k draw's k up to 64 over vocabularies up to 256K, ties at the k-th
// largest adding up to 32 ids.
const (
	TopSelectK     = 64
	TopSelectN     = 262144
	TopSelectSlack = 32
)

// TopSelector is implemented by a Device that selects the top of a logits
// vector itself.
type TopSelector interface {
	// SelectTop waits for everything queued, then fills c with the top k
	// of x[:n] (see TopLogits) and reports true; false when it cannot
	// (k outside the range it takes, fewer than k values of x[:n] neither
	// NaN nor -Inf, more ids at least the k-th largest than it brings
	// back): c is then empty and the caller reads x. x is not changed.
	// Every selector takes k <= TopSelectK over n <= TopSelectN logits and
	// brings back k+TopSelectSlack ids or more.
	SelectTop(c *TopLogits, x Tensor, n, k int) (bool, error)
	// SelectsTop reports whether a decode step should ask SelectTop for
	// the top k of n logits rather than read them: the device takes them
	// and selecting costs it less than the download and the host's scan
	// (runtime.ForwardOptions.SelectTop asks it each step). It is policy
	// only: SelectTop takes every n and k of its range either way.
	SelectsTop(n, k int) bool
}

// SelectTopRef is TopSelector's reference on the host: it fills c with
// the top k of x and reports true, or false (c empty) when fewer than k
// of x's values are neither NaN nor -Inf, k < 1, or more than limit ids
// (when limit > 0) are at least the k-th largest.
func SelectTopRef(c *TopLogits, x []float32, k, limit int) bool {
	c.Reset()
	if k < 1 || k > len(x) {
		return false
	}
	// The k-th largest by a partial order statistic over a copy: values in
	// float64 (exact), NaN and -Inf left out.
	vals := make([]float64, 0, len(x))
	for _, v := range x {
		if f := float64(v); !math.IsNaN(f) && !math.IsInf(f, -1) {
			vals = append(vals, f)
		}
	}
	if len(vals) < k {
		return false
	}
	th := kth(vals, k)
	for i, v := range x {
		if float64(v) >= th { // NaN never is
			c.IDs = append(c.IDs, int32(i))
			c.Logits = append(c.Logits, v)
		}
	}
	if limit > 0 && len(c.IDs) > limit {
		c.Reset()
		return false
	}
	c.Th, c.K, c.N = float32(th), k, len(x)
	return true
}

// kth returns the k-th largest of v (1-based, with multiplicity),
// reordering v: quickselect with the middle element as pivot, three-way.
func kth(v []float64, k int) float64 {
	for {
		p := v[len(v)/2]
		// [0,gt) > p, [gt,eq) == p, [eq,len) < p.
		gt, eq := 0, 0
		for i := range v {
			switch x := v[i]; {
			case x > p:
				v[i], v[eq] = v[eq], v[i]
				v[eq], v[gt] = v[gt], v[eq]
				gt++
				eq++
			case x == p:
				v[i], v[eq] = v[eq], v[i]
				eq++
			}
		}
		switch {
		case k <= gt:
			v = v[:gt]
		case k <= eq:
			return p
		default:
			k -= eq
			v = v[eq:]
		}
	}
}
