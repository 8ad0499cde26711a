package nn

// Fused ops: sequences of Device ops that a device may run as one (a GPU
// then saves kernel launches, which bound its decode: each is a few
// microseconds for a few microseconds of work). Each is an optional
// interface with a helper that falls back to the plain ops, so a device
// implements only what pays for it, and the result is the plain ops'
// (within the Device contract's round-off).

// ResidualNormer is implemented by a Device that adds a residual into the
// stream and normalises the sum in one op.
type ResidualNormer interface {
	// AddRMSNorm does x[:s.Rows·s.Width] += r[:s.Rows·s.Width], then
	// RMSNorm(y, x, w, s): x's rows are contiguous (s.XStride is 0 or
	// s.Width) and y overlaps neither x nor r.
	AddRMSNorm(x, r, y, w Tensor, s NormSpec)
}

// AddRMSNorm queues x += r and y = RMSNorm(x) (see ResidualNormer) on dev,
// as one op where dev is a ResidualNormer.
func AddRMSNorm(dev Device, x, r, y, w Tensor, s NormSpec) {
	if rn, ok := dev.(ResidualNormer); ok {
		rn.AddRMSNorm(x, r, y, w, s)
		return
	}
	dev.Add(x, r, s.Rows*s.Width)
	dev.RMSNorm(y, x, w, s)
}

// Product is one product of MatMuls: Y[i] = W·x[i].
type Product struct {
	W Mat
	Y Tensor
}

// SharedMatMuler is implemented by a Device that computes several products
// of one input in one op (the attention's q, k and v projections, a
// router and its shared expert's gate).
type SharedMatMuler interface {
	// MatMuls computes, for each p of ps, p.Y[i] = p.W·x[i] for the n rows
	// of x: MatMul(p.W, p.Y, x, n) for each in turn. Every W has x's
	// width; the Ys overlap neither x nor each other.
	MatMuls(x Tensor, n int, ps []Product)
}

// MatMuls queues the products ps of the n rows of x on dev (see
// SharedMatMuler), as one op where dev is a SharedMatMuler.
func MatMuls(dev Device, x Tensor, n int, ps ...Product) {
	if sm, ok := dev.(SharedMatMuler); ok {
		sm.MatMuls(x, n, ps)
		return
	}
	for _, p := range ps {
		dev.MatMul(p.W, p.Y, x, n)
	}
}
