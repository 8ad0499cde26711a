package qwen3next

import (
	"github.com/qpack-go/qpack/runtime/nn"
)

// deltaNet is the Gated DeltaNet mixer over a chunk of T tokens: the input
// projections (a fused qwen3_next one is gathered into the q|k|v, z, b and a
// layout), then the conv and recurrence on the device.
func (m *graph) deltaNet(b *nn.Binding, st nn.TensorState, d *deltaNet, xn, out nn.Tensor, T int) {
	c := m.cfg
	dev := b.Dev
	Vd, Nv := c.LinearValueDim(), c.LinValueHeads
	C := c.ConvDim()
	mixed := dev.Temp(T * C) // [q | k | v] per token, before the conv
	z := dev.Temp(T * Vd)
	bb := dev.Temp(T * Nv)
	aa := dev.Temp(T * Nv)
	if d.fused {
		ix := m.gathers(b, d)
		W := len(d.perm)
		P := dev.Temp(T * W)
		BA := dev.Temp(T * 2 * Nv)
		nn.MatMuls(dev, xn, T, nn.Product{W: b.M(&d.qkvz), Y: P}, nn.Product{W: b.M(&d.ba), Y: BA})
		dev.Gather(mixed, P, ix.mixed, T, W)
		dev.Gather(z, P, ix.z, T, W)
		dev.Gather(bb, BA, ix.b, T, 2*Nv)
		dev.Gather(aa, BA, ix.a, T, 2*Nv)
	} else {
		nn.MatMuls(dev, xn, T, nn.Product{W: b.M(&d.qkv), Y: mixed}, nn.Product{W: b.M(&d.z), Y: z},
			nn.Product{W: b.M(&d.b), Y: bb}, nn.Product{W: b.M(&d.a), Y: aa})
	}
	Y := dev.Temp(T * Vd)
	dev.DeltaNet(st, &nn.DeltaNetArgs{
		T: T, Nk: c.LinKeyHeads, Nv: Nv, Dk: c.LinKeyHeadDim, Dv: c.LinValHeadDim, K: c.ConvKernel,
		Eps: m.eps, Y: Y, Mixed: mixed, Z: z, B: bb, A: aa,
		Conv: b.V(d.conv), NegA: b.V(d.negA), DtBias: b.V(d.dtBias), Norm: b.V(d.norm),
	})
	dev.MatMul(b.M(&d.out), out, Y, T)
}

// fusedGathers are the index vectors that take a fused projection's output
// row apart (the inverse of fusedPermutation).
type fusedGathers struct {
	mixed, z, b, a nn.Index
}

// gathers returns d's gather indices on b's device, made once.
func (m *graph) gathers(b *nn.Binding, d *deltaNet) *fusedGathers {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.gather[d]; g != nil {
		return g
	}
	C, Nv := m.cfg.ConvDim(), m.cfg.LinValueHeads
	inv := invert(d.perm)
	invBA := invert(d.permBA)
	g := &fusedGathers{
		mixed: b.Indices(inv[:C]), z: b.Indices(inv[C:]),
		b: b.Indices(invBA[:Nv]), a: b.Indices(invBA[Nv:]),
	}
	m.gather[d] = g
	return g
}

// invert returns the inverse of the permutation p: out[p[i]] = i.
func invert(p []int32) []int32 {
	out := make([]int32, len(p))
	for i, d := range p {
		out[d] = int32(i)
	}
	return out
}
