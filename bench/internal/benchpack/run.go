package benchpack

import (
	"math/rand/v2"

	"github.com/qpack-go/qpack/runtime/runner"
)

// Preload reads every routed expert of r's model into its expert cache
// once (a warm cache for the "every expert resident" measurements).
func Preload(r *runner.Runner) error {
	c := r.Model.Config
	all := make([]int, c.Experts)
	for e := range all {
		all[e] = e
	}
	for l := range c.Layers {
		if !c.Sparse[l] {
			continue
		}
		r.Cache.Prefetch(l, all)
		for _, e := range all {
			w, err := r.Cache.Expert(l, e)
			if err != nil {
				return err
			}
			r.Cache.Release(w)
		}
	}
	return nil
}

// RandomTokens returns n token ids below vocab from a fixed seed.
func RandomTokens(n, vocab int, seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]int, n)
	for i := range out {
		out[i] = r.IntN(vocab)
	}
	return out
}
