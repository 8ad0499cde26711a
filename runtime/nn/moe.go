package nn

import "fmt"

// Routing is the experts a chunk of T tokens chose: for token t, slots
// t·K .. t·K+K-1 of Sel hold its experts in its own order and Wts their
// weights.
type Routing struct {
	K   int
	Sel []int
	Wts []float32
}

// NewRouting returns a routing for T tokens of k experts each.
func NewRouting(T, k int) Routing {
	return Routing{K: k, Sel: make([]int, T*k), Wts: make([]float32, T*k)}
}

// RouteSoftmaxTopK fills r from router logits [T, E]: softmax over all E
// experts, the top K by probability, and (norm) the K weights renormalised
// to sum to one. logits are overwritten by the probabilities.
func RouteSoftmaxTopK(r Routing, logits []float32, T, E int, norm bool) {
	k := r.K
	for t := range T {
		p := logits[t*E : (t+1)*E]
		Softmax(p)
		idx := r.Sel[t*k : (t+1)*k]
		TopK(idx, p)
		var sum float32
		for j, e := range idx {
			r.Wts[t*k+j] = p[e]
			sum += p[e]
		}
		if norm {
			for j := range idx {
				r.Wts[t*k+j] /= sum
			}
		}
	}
}

// MoE runs the routed experts of a layer on a Device: the
// expert-streaming protocol every architecture uses. Given a Routing, it
// groups the chunk's (token, slot) pairs by expert, asks the device's own
// expert cache first, tells an ExpertPrefetcher the chunk's other experts
// (ascending, each once), runs overlap (the compute that hides the reads: a
// shared expert, a dense MLP), then for each expert in the same order reads
// it (Expert) unless the device holds it, hands it to the device, queues
// its GLU once over every token that chose it, releases it, and finally
// combines: each token sums its experts' outputs in its own top-k order, so
// the result does not depend on how tokens were grouped. On a Device that
// is an ExpertGrouper and groups the chunk (GroupsExperts), every expert
// is read, handed to the device and released first, and the chunk's
// experts are queued as one GroupExperts (grouped.go); a declined group
// runs the per-expert loop with the same experts.
type MoE struct {
	Device  Device
	Experts ExpertSource
	Act     Activation // the experts' gate activation
}

// Run computes out [T, H] = Σ_k Wts·expert_k(xe) for layer l, where xe
// [T, H] is the experts' input. overlap, if set, runs between Prefetch and
// the first read.
func (d *MoE) Run(l int, xe Tensor, T, H int, r Routing, overlap func(), out Tensor) error {
	dev, k := d.Device, r.K
	E := 0
	for _, e := range r.Sel[:T*k] {
		E = max(E, e+1)
	}
	// Group the (token, slot) pairs by expert, experts ascending.
	count := make([]int, E+1)
	for _, e := range r.Sel[:T*k] {
		count[e+1]++
	}
	for e := range E {
		count[e+1] += count[e]
	}
	slots := make([]int, T*k)
	fill := append([]int(nil), count[:E]...)
	for s, e := range r.Sel[:T*k] {
		slots[fill[e]] = s
		fill[e]++
	}
	used := make([]int, 0, min(E, T*k))
	for e := range E {
		if count[e+1] > count[e] {
			used = append(used, e)
		}
	}
	held := make([]ExpertMats, len(used))
	have := make([]bool, len(used))
	read := make([]int, 0, len(used))
	for i, e := range used {
		if held[i], have[i] = dev.CachedExpert(d.Experts, l, e); !have[i] {
			read = append(read, e)
		}
	}
	if p, ok := d.Experts.(ExpertPrefetcher); ok && len(read) > 0 {
		p.Prefetch(l, read)
	}
	if overlap != nil {
		overlap()
	}
	res := dev.Temp(T * k * H)
	if gr, ok := dev.(ExpertGrouper); ok && gr.GroupsExperts(T, k) {
		// Every expert on the device first, then one grouped call.
		for i, e := range used {
			if have[i] {
				continue
			}
			w, err := d.Experts.Expert(l, e)
			if err != nil {
				return fmt.Errorf("layer %d: %w", l, err)
			}
			held[i], err = dev.Expert(d.Experts, w)
			d.Experts.Release(w)
			if err != nil {
				return fmt.Errorf("layer %d expert %d: %w", l, e, err)
			}
			have[i] = true
		}
		first := make([]int, len(used)+1)
		for i, e := range used {
			first[i], first[i+1] = count[e], count[e+1]
		}
		g := ExpertGroup{X: xe, Res: res, T: T, H: H, K: k, Act: d.Act, Mats: held, First: first, Slots: slots}
		if gr.GroupExperts(g) {
			dev.Combine(out, res, r.Wts, T, k, H)
			return nil
		}
	}
	most := 0
	for _, e := range used {
		most = max(most, count[e+1]-count[e])
	}
	var x, y Tensor
	var g, u Tensor
	for i, e := range used {
		group := slots[count[e]:count[e+1]]
		n := len(group)
		mats := held[i]
		var w *ExpertWeights
		if !have[i] {
			var err error
			if w, err = d.Experts.Expert(l, e); err != nil {
				return fmt.Errorf("layer %d: %w", l, err)
			}
			if mats, err = dev.Expert(d.Experts, w); err != nil {
				d.Experts.Release(w)
				return fmt.Errorf("layer %d expert %d: %w", l, e, err)
			}
		}
		I := mats.Gate.W.Rows
		if x.Buf == nil {
			x, y = dev.Temp(most*H), dev.Temp(most*H)
			g, u = dev.Temp(most*I), dev.Temp(most*I)
		}
		rows := make([]int, n)
		for j, s := range group {
			rows[j] = s / k
		}
		// The copies in and out are skipped where they would be the
		// identity or one contiguous block (decode: one token, each
		// expert one slot), which changes no value.
		in, out := x, y
		if contiguous(rows) {
			in = xe.Slice(rows[0]*H, (rows[0]+n)*H)
		} else {
			dev.GatherRows(x, xe, rows, H)
		}
		if contiguous(group) {
			out = res.Slice(group[0]*H, (group[0]+n)*H)
		}
		dev.MatMul(mats.Gate, g, in, n)
		dev.MatMul(mats.Up, u, in, n)
		dev.GLU(d.Act, g, g, u, n*I)
		dev.MatMul(mats.Down, out, g, n)
		if w != nil {
			d.Experts.Release(w)
		}
		if !contiguous(group) {
			dev.ScatterRows(res, y, group, H)
		}
	}
	dev.Combine(out, res, r.Wts, T, k, H)
	return nil
}

// contiguous reports whether ix is i0, i0+1, i0+2, ...
func contiguous(ix []int) bool {
	for i, v := range ix {
		if v != ix[0]+i {
			return false
		}
	}
	return len(ix) > 0
}

// Speculation is ForwardOptions.Speculate in one forward pass: its
// buffers, reused across layers.
type Speculation struct {
	src   ExpertSpeculator
	n     int // experts guessed per token
	XN, R []float32
	idx   []int
	seen  []bool
	guess []int
}

// NewSpeculation returns the speculation state for a pass guessing n
// experts per token out of E, or nil when src cannot take a guess or n ≤ 0.
func NewSpeculation(src ExpertSource, n, E int) *Speculation {
	sp, ok := src.(ExpertSpeculator)
	if !ok || n <= 0 {
		return nil
	}
	return &Speculation{src: sp, n: min(n, E)}
}

// Guess hands layer l's guess to the source, from router logits [T, E]
// the architecture computed on its best early view of the layer's router
// input: each token's top n by logit, taken rank by rank across the
// chunk's tokens so that the likeliest come first, each expert once.
func (sp *Speculation) Guess(l int, logits []float32, T, E int) {
	n := sp.n
	if cap(sp.idx) < T*n {
		sp.idx = make([]int, T*n)
	}
	idx := sp.idx[:T*n]
	for t := range T {
		TopK(idx[t*n:(t+1)*n], logits[t*E:(t+1)*E])
	}
	if len(sp.seen) < E {
		sp.seen = make([]bool, E)
	}
	clear(sp.seen)
	sp.guess = sp.guess[:0]
	for j := range n {
		for t := range T {
			if e := idx[t*n+j]; !sp.seen[e] {
				sp.seen[e] = true
				sp.guess = append(sp.guess, e)
			}
		}
	}
	sp.src.Speculate(l, sp.guess)
}
