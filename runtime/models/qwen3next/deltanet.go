package qwen3next

import (
	"github.com/qpack-go/qpack/runtime/nn"
)

// deltaNet is the Gated DeltaNet mixer over a chunk of T tokens: the four
// input projections (qwen3_next's fused ones were reordered into them at
// load), then the conv and recurrence on the device.
func (m *graph) deltaNet(b *nn.Binding, st nn.TensorState, d *deltaNet, xn, out nn.Tensor, T int) {
	c := m.cfg
	dev := b.Dev
	Vd, Nv := c.LinearValueDim(), c.LinValueHeads
	C := c.ConvDim()
	mixed := dev.Temp(T * C) // [q | k | v] per token, before the conv
	z := dev.Temp(T * Vd)
	bb := dev.Temp(T * Nv)
	aa := dev.Temp(T * Nv)
	nn.MatMuls(dev, xn, T, nn.Product{W: b.M(&d.qkv), Y: mixed}, nn.Product{W: b.M(&d.z), Y: z},
		nn.Product{W: b.M(&d.b), Y: bb}, nn.Product{W: b.M(&d.a), Y: aa})
	Y := dev.Temp(T * Vd)
	dev.DeltaNet(st, &nn.DeltaNetArgs{
		T: T, Nk: c.LinKeyHeads, Nv: Nv, Dk: c.LinKeyHeadDim, Dv: c.LinValHeadDim, K: c.ConvKernel,
		Eps: m.eps, Y: Y, Mixed: mixed, Z: z, B: bb, A: aa,
		Conv: b.V(d.conv), NegA: b.V(d.negA), DtBias: b.V(d.dtBias), Norm: b.V(d.norm),
	})
	dev.MatMul(b.M(&d.out), out, Y, T)
}
