package nn

// KVCache is the key/value cache of one attention layer. With Window 0 it
// keeps every position; with Window W > 0 (a sliding-window layer) it keeps
// only the last W positions, in a ring buffer of W slots. K and V widths
// (floats per position: KV heads × head dim) may differ.
type KVCache struct {
	KWidth, VWidth int
	Window         int
	k, v           []float32 // full: [n][width]; ring: [Window][width], position p in slot p % Window
	n              int       // positions seen
}

// NewKVCache returns an empty cache.
func NewKVCache(kWidth, vWidth, window int) *KVCache {
	return &KVCache{KWidth: kWidth, VWidth: vWidth, Window: window}
}

// Len is the number of positions the cache has seen.
func (c *KVCache) Len() int { return c.n }

// Reset implements LayerState.
func (c *KVCache) Reset() {
	c.n = 0
	if c.Window == 0 {
		c.k, c.v = c.k[:0], c.v[:0]
	}
}

// Clone implements LayerState.
func (c *KVCache) Clone() LayerState {
	d := *c
	d.k, d.v = CloneF32(c.k), CloneF32(c.v)
	return &d
}

// Restore implements LayerState.
func (c *KVCache) Restore(from LayerState) bool {
	f, ok := from.(*KVCache)
	if !ok || f.KWidth != c.KWidth || f.VWidth != c.VWidth || f.Window != c.Window {
		return false
	}
	c.k = append(c.k[:0], f.k...)
	c.v = append(c.v[:0], f.v...)
	c.n = f.n
	return true
}

// Bytes implements LayerState.
func (c *KVCache) Bytes() int64 { return 4 * int64(len(c.k)+len(c.v)) }

// AttnDims shapes one attention call.
type AttnDims struct {
	Heads, KVHeads, HeadDim int
	// QStride is the distance in floats between two heads' queries in a Q
	// row (HeadDim, or more when the projection interleaves a gate); a Q
	// row is Heads·QStride floats.
	QStride int
	// VDim is the value head dim (0: HeadDim).
	VDim  int
	Scale float32 // applied to q·k
}

// Attend runs causal attention for a chunk of T tokens at positions
// Len()..Len()+T-1: it adds their keys K [T, KWidth] and values V [T,
// VWidth] to the cache and writes O [T, Heads·VDim], each token attending
// to every earlier position and itself (only the last Window of them on a
// sliding-window cache), keys in position order. Query heads share KV
// heads in groups of Heads/KVHeads.
func (c *KVCache) Attend(O, Q, K, V []float32, T int, d AttnDims) {
	if c.Window == 0 {
		c.attendFull(O, Q, K, V, T, d)
		return
	}
	c.attendWindow(O, Q, K, V, T, d)
}

// attendFull and attendWindow run AttendRows over the cache as it is, then
// store the chunk's rows (a ring keeps the last Window positions; a chunk
// longer than the window reads none it overwrites, since it is stored
// afterwards).
func (c *KVCache) attendFull(O, Q, K, V []float32, T int, d AttnDims) {
	AttendRows(O, Q, K, V, c.k, c.v, c.n, T, 0, c.KWidth, c.VWidth, d)
	c.k = append(c.k, K[:T*c.KWidth]...)
	c.v = append(c.v, V[:T*c.VWidth]...)
	c.n += T
}

func (c *KVCache) attendWindow(O, Q, K, V []float32, T int, d AttnDims) {
	W, kw, vw := c.Window, c.KWidth, c.VWidth
	if c.k == nil {
		c.k = make([]float32, W*kw)
		c.v = make([]float32, W*vw)
	}
	pos := c.n
	AttendRows(O, Q, K, V, c.k, c.v, pos, T, W, kw, vw, d)
	for i := max(0, T-W); i < T; i++ {
		s := (pos + i) % W
		copy(c.k[s*kw:(s+1)*kw], K[i*kw:(i+1)*kw])
		copy(c.v[s*vw:(s+1)*vw], V[i*vw:(i+1)*vw])
	}
	c.n += T
}

// AttendRows is Attend's arithmetic (the same products in the same order,
// so the same bits) over a cache laid out as a device keeps one: position
// j < pos at row j of kc / vc (row j % window on a sliding layer), the
// chunk's own positions pos..pos+T-1 from K and V. It only reads the
// cache; the caller stores the chunk's rows in it afterwards.
func AttendRows(O, Q, K, V, kc, vc []float32, pos, T, window, kw, vw int, d AttnDims) {
	Nh, hd, vd := d.Heads, d.HeadDim, d.vdim()
	qw := Nh * d.QStride
	group := Nh / d.KVHeads
	row := func(j int) ([]float32, []float32) {
		if j >= pos {
			i := j - pos
			return K[i*kw : (i+1)*kw], V[i*vw : (i+1)*vw]
		}
		if window > 0 {
			j %= window
		}
		return kc[j*kw : (j+1)*kw], vc[j*vw : (j+1)*vw]
	}
	scores := make([]float32, pos+T)
	for t := range T {
		p := pos + t
		lo := 0
		if window > 0 {
			lo = max(0, p-window+1)
		}
		n := p - lo + 1
		for h := range Nh {
			g := h / group
			q := Q[t*qw+h*d.QStride : t*qw+h*d.QStride+hd]
			s := scores[:n]
			for j := range n {
				k, _ := row(lo + j)
				s[j] = Dot(q, k[g*hd:(g+1)*hd]) * d.Scale
			}
			Softmax(s)
			o := O[(t*Nh+h)*vd : (t*Nh+h+1)*vd]
			for j, pr := range s {
				_, v := row(lo + j)
				Axpy(o, pr, v[g*vd:(g+1)*vd])
			}
		}
	}
}

func (d AttnDims) vdim() int {
	if d.VDim > 0 {
		return d.VDim
	}
	return d.HeadDim
}
