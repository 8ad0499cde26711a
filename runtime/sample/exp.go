package sample

import (
	"math"
	"runtime"
	"sync"
)

// parallelExpMin is the fewest candidates whose weights are computed on
// several cores: a whole vocabulary (32K-250K entries) costs one core a
// millisecond or more of math.Exp per token, as much as a GPU's decode
// step; a few hundred entries are not worth the goroutines.
const parallelExpMin = 16384

// expWeights returns w[j] = exp(sc[cands[j]] - maxv) in buf (grown as
// needed). Large candidate lists are split across the cores; every weight
// is the same math.Exp of the same value either way, and callers sum them
// in index order, so results do not depend on the split.
func expWeights(buf []float64, sc []float64, cands []int, maxv float64) []float64 {
	n := len(cands)
	w := buf[:0]
	if cap(w) < n {
		w = make([]float64, n)
	}
	w = w[:n]
	workers := min(runtime.GOMAXPROCS(0), n/(parallelExpMin/4))
	if n < parallelExpMin || workers < 2 {
		// A decode step's few candidates: on this goroutine (the slices
		// passed to a function, not captured by a closure that the
		// goroutines below would make escape: no allocation a draw).
		fillExp(w, sc, cands, maxv)
		return w
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += per {
		hi := min(n, lo+per)
		wg.Add(1)
		go func(w []float64, cands []int) {
			defer wg.Done()
			fillExp(w, sc, cands, maxv)
		}(w[lo:hi], cands[lo:hi])
	}
	wg.Wait()
	return w
}

// fillExp sets w[j] = exp(sc[cands[j]] - maxv) for every j < len(cands).
func fillExp(w, sc []float64, cands []int, maxv float64) {
	for j, i := range cands {
		w[j] = math.Exp(sc[i] - maxv)
	}
}
