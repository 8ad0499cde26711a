package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// kvRef is the reference history of one attention layer: every key and
// value it was given, in position order.
type kvRef struct {
	kw, vw, window int
	k, v           [][]float64
}

// attend is the reference of Device.Attention: it appends the chunk's keys
// and values and returns O [T, Heads·VDim].
func (h *kvRef) attend(Q, K, V []float32, T int, d nn.AttnDims) []float64 {
	vd := d.VDim
	if vd == 0 {
		vd = d.HeadDim
	}
	pos := len(h.k)
	for t := range T {
		h.k = append(h.k, f64(K[t*h.kw:(t+1)*h.kw]))
		h.v = append(h.v, f64(V[t*h.vw:(t+1)*h.vw]))
	}
	group := d.Heads / d.KVHeads
	qw := d.Heads * d.QStride
	O := make([]float64, T*d.Heads*vd)
	for t := range T {
		p := pos + t
		lo := 0
		if h.window > 0 {
			lo = max(0, p-h.window+1)
		}
		for hh := range d.Heads {
			g := hh / group
			q := Q[t*qw+hh*d.QStride:]
			s := make([]float64, p-lo+1)
			for j := range s {
				k := h.k[lo+j][g*d.HeadDim:]
				var dot float64
				for i := range d.HeadDim {
					dot += float64(q[i]) * k[i]
				}
				s[j] = dot * float64(d.Scale)
			}
			pr := softmax64(s)
			o := O[(t*d.Heads+hh)*vd : (t*d.Heads+hh+1)*vd]
			for j, w := range pr {
				v := h.v[lo+j][g*vd:]
				for i := range o {
					o[i] += w * v[i]
				}
			}
		}
	}
	return O
}

func (h *kvRef) clone() *kvRef {
	c := *h
	c.k = append([][]float64(nil), h.k...)
	c.v = append([][]float64(nil), h.v...)
	return &c
}

// attnCase is one attention layer shape.
type attnCase struct {
	name   string
	d      nn.AttnDims
	window int
	chunks []int
}

func (c attnCase) widths() (kw, vw int) {
	vd := c.d.VDim
	if vd == 0 {
		vd = c.d.HeadDim
	}
	return c.d.KVHeads * c.d.HeadDim, c.d.KVHeads * vd
}

var attnCases = []attnCase{
	{"full-gqa", nn.AttnDims{Heads: 4, KVHeads: 2, HeadDim: 16, QStride: 16, Scale: 0.25}, 0, []int{5, 1, 3, 7}},
	{"full-mqa-gate-vdim", nn.AttnDims{Heads: 3, KVHeads: 1, HeadDim: 12, QStride: 24, VDim: 20, Scale: 0.3}, 0, []int{1, 1, 6, 1}},
	{"full-mha-decode", nn.AttnDims{Heads: 2, KVHeads: 2, HeadDim: 8, QStride: 8, Scale: 1}, 0, []int{1, 1, 1, 1, 1, 1}},
	{"window4-chunks-longer", nn.AttnDims{Heads: 4, KVHeads: 2, HeadDim: 16, QStride: 32, Scale: 0.25}, 4, []int{5, 1, 3, 7}},
	{"window6-decode", nn.AttnDims{Heads: 4, KVHeads: 1, HeadDim: 8, QStride: 8, VDim: 12, Scale: 0.35}, 6, []int{2, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	{"window9-mixed", nn.AttnDims{Heads: 6, KVHeads: 3, HeadDim: 10, QStride: 13, Scale: 0.3}, 9, []int{4, 8, 1, 9, 2}},
	{"window32-longer-than-context", nn.AttnDims{Heads: 2, KVHeads: 1, HeadDim: 16, QStride: 16, Scale: 0.25}, 32, []int{7, 1, 8}},
	// Decode past 128 keys, where a GPU splits each head's keys over
	// several groups (flash-decoding: the CUDA and Metal backends), the
	// chunk of two with runs of unequal length. (Small, because the Metal
	// shim runs it in minutes otherwise; windows and empty runs are the
	// kernels' own tests'.)
	{"full-split-decode", nn.AttnDims{Heads: 1, KVHeads: 1, HeadDim: 16, QStride: 16, VDim: 12, Scale: 0.25}, 0, []int{128, 1, 2}},
	// Decode with heads wider than the GPUs' GQA kernel takes (256: Gemma
	// 4's global layers have 512), on their per-(token, head) kernel.
	{"wide-heads-decode", nn.AttnDims{Heads: 2, KVHeads: 1, HeadDim: 264, QStride: 264, Scale: 0.0625}, 0, []int{3, 1, 1}},
}

// attnChunk queues one chunk of random Q, K, V on kv and checks O against
// the reference h.
func attnChunk(t *testing.T, dev nn.Device, r *rand.Rand, kv nn.KVState, h *kvRef, d nn.AttnDims, T int, tol float64, what string) []float32 {
	t.Helper()
	kw, vw := h.kw, h.vw
	vd := d.VDim
	if vd == 0 {
		vd = d.HeadDim
	}
	q := randF32(r, T*d.Heads*d.QStride, 1.5)
	k := randF32(r, T*kw, 1.5)
	v := randF32(r, T*vw, 1)
	O := view(dev, T*d.Heads*vd)
	dev.Attention(kv, O, put(dev, q), put(dev, k), put(dev, v), T, d)
	got := get(t, dev, O)
	want := h.attend(q, k, v, T, d)
	check(t, what, got, want, same(len(want), max(maxAbs64(want), 1e-30)), tol)
	if kv.Len() != len(h.k) {
		t.Fatalf("%s: KV Len %d, want %d", what, kv.Len(), len(h.k))
	}
	return got
}

// Attention: full and sliding (windows below the chunk and the context,
// and above both), GQA/MQA/MHA, QStride > HeadDim, VDim ≠ HeadDim, T = 1
// and T > 1, positions past the window.
func testAttention(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(5)
	for _, c := range attnCases {
		kw, vw := c.widths()
		kv, err := dev.NewKV(kw, vw, c.window)
		if err != nil {
			t.Fatal(err)
		}
		if kv.Len() != 0 {
			t.Fatalf("%s: a new KV has Len %d", c.name, kv.Len())
		}
		h := &kvRef{kw: kw, vw: vw, window: c.window}
		for i, T := range c.chunks {
			attnChunk(t, dev, r, kv, h, c.d, T, tol.Mixer, fmt.Sprintf("%s chunk %d (T=%d at %d)", c.name, i, T, len(h.k)))
			endPass(t, dev)
		}
		t.Logf("%s: %d positions within %.3g of the output's max", c.name, len(h.k), tol.Mixer)
	}
}

// KV Reset / Clone / Restore: a clone is independent of the original, a
// Restore brings a state back (into a cache that has seen more or less),
// a Restore of another shape or kind refuses and changes nothing.
func testKVState(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(6)
	for _, c := range []attnCase{attnCases[0], attnCases[3]} {
		kw, vw := c.widths()
		newKV := func(kw, vw, window int) nn.KVState {
			kv, err := dev.NewKV(kw, vw, window)
			if err != nil {
				t.Fatal(err)
			}
			return kv
		}
		chunk := func(kv nn.KVState, h *kvRef, T int, what string) {
			t.Helper()
			attnChunk(t, dev, r, kv, h, c.d, T, tol.Mixer, c.name+": "+what)
			endPass(t, dev)
		}
		kv := newKV(kw, vw, c.window)
		h := &kvRef{kw: kw, vw: vw, window: c.window}
		chunk(kv, h, 5, "first chunk")

		cl := kv.Clone().(nn.KVState)
		hc := h.clone()
		chunk(kv, h, 3, "original after a Clone")
		if cl.Len() != 5 {
			t.Fatalf("%s: the clone's Len is %d after the original went on, want 5", c.name, cl.Len())
		}
		chunk(cl, hc, 4, "clone continued (independent of the original)")
		chunk(kv, h, 2, "original after the clone went on")

		// Restore into a fresh cache and into one that has seen more.
		fresh := newKV(kw, vw, c.window)
		if !fresh.Restore(kv) {
			t.Fatalf("%s: Restore of a same-shape cache refused", c.name)
		}
		hf := h.clone()
		chunk(fresh, hf, 3, "restored into a fresh cache")
		if !fresh.Restore(cl) {
			t.Fatalf("%s: Restore refused", c.name)
		}
		if fresh.Len() != cl.Len() {
			t.Fatalf("%s: Len %d after Restore, want %d", c.name, fresh.Len(), cl.Len())
		}
		hf = hc.clone()
		chunk(fresh, hf, 1, "restored over a longer history")
		chunk(cl, hc, 2, "the restored-from clone unchanged")

		// Another shape (window, widths) or another kind: refused, unchanged.
		other := newKV(kw, vw, c.window+3)
		ho := &kvRef{kw: kw, vw: vw, window: c.window + 3}
		chunk(other, ho, 2, "other window")
		ts, err := dev.NewTensors(kw, vw)
		if err != nil {
			t.Fatal(err)
		}
		for _, from := range []nn.LayerState{kv, newKV(kw+c.d.HeadDim, vw+c.d.HeadDim, c.window+3), ts} {
			if other.Restore(from) {
				t.Fatalf("%s: Restore from %T of another shape accepted", c.name, from)
			}
		}
		if other.Len() != 2 {
			t.Fatalf("%s: a refused Restore changed Len to %d", c.name, other.Len())
		}
		chunk(other, ho, 3, "after refused Restores")

		// Reset: position 0, the same as a new cache.
		kv.Reset()
		if kv.Len() != 0 {
			t.Fatalf("%s: Len %d after Reset", c.name, kv.Len())
		}
		h = &kvRef{kw: kw, vw: vw, window: c.window}
		chunk(kv, h, 6, "after Reset")
		if kv.Bytes() <= 0 {
			t.Fatalf("%s: a cache of %d positions has Bytes %d", c.name, kv.Len(), kv.Bytes())
		}
	}
}

// TensorState: zeroed, Clone independent, Restore copies back and refuses
// another shape or kind, Reset zeroes.
func testTensorState(t *testing.T, dev nn.Device, _ Tolerances) {
	r := rng(7)
	sizes := []int{13, 40}
	s, err := dev.NewTensors(sizes...)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		if s.Tensor(i).N != n {
			t.Fatalf("tensor %d has %d floats, want %d", i, s.Tensor(i).N, n)
		}
		if !allZero(get(t, dev, s.Tensor(i))) {
			t.Fatalf("tensor %d of a new state not zeroed", i)
		}
	}
	if s.Bytes() < 4*(13+40) {
		t.Fatalf("Bytes %d for %d floats", s.Bytes(), 13+40)
	}
	a := [][]float32{randF32(r, 13, 1), randF32(r, 40, 1)}
	for i := range sizes {
		dev.Write(s.Tensor(i), a[i])
	}
	endPass(t, dev)
	cl := s.Clone().(nn.TensorState)
	b := [][]float32{randF32(r, 13, 1), randF32(r, 40, 1)}
	for i := range sizes {
		dev.Write(s.Tensor(i), b[i])
	}
	endPass(t, dev)
	for i := range sizes {
		exact(t, fmt.Sprintf("clone tensor %d after the original changed", i), get(t, dev, cl.Tensor(i)), a[i])
		exact(t, fmt.Sprintf("original tensor %d", i), get(t, dev, s.Tensor(i)), b[i])
	}
	endPass(t, dev)
	if !s.Restore(cl) {
		t.Fatal("Restore of a same-shape state refused")
	}
	for i := range sizes {
		exact(t, fmt.Sprintf("tensor %d after Restore", i), get(t, dev, s.Tensor(i)), a[i])
	}
	endPass(t, dev)
	// The restored state is independent of its source.
	dev.Write(cl.Tensor(1), b[1])
	exact(t, "restored state after its source changed", get(t, dev, s.Tensor(1)), a[1])
	endPass(t, dev)
	other, err := dev.NewTensors(13, 41)
	if err != nil {
		t.Fatal(err)
	}
	fewer, err := dev.NewTensors(13)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := dev.NewKV(13, 40, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []nn.LayerState{other, fewer, kv} {
		if s.Restore(from) {
			t.Fatalf("Restore from %T of another shape accepted", from)
		}
	}
	exact(t, "state after refused Restores", get(t, dev, s.Tensor(0)), a[0])
	endPass(t, dev)
	s.Reset()
	for i := range sizes {
		if !allZero(get(t, dev, s.Tensor(i))) {
			t.Fatalf("tensor %d not zeroed by Reset", i)
		}
	}
	_ = math.Pi
}
