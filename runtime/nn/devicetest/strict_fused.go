package devicetest

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/nn"
)

// Strict implements the fused ops too, so that the graphs' use of them is
// checked against their contracts (nn.ResidualNormer, nn.SharedMatMuler):
// their results are the plain ops' bits.
var (
	_ nn.ResidualNormer = (*Strict)(nil)
	_ nn.SharedMatMuler = (*Strict)(nil)
)

// overlaps says whether a and b share a float of one buffer.
func overlaps(a, b nn.Tensor) bool {
	return a.Buf != nil && a.Buf == b.Buf && a.N > 0 && b.N > 0 && a.Off < b.Off+b.N && b.Off < a.Off+a.N
}

// AddRMSNorm implements nn.ResidualNormer.
func (d *Strict) AddRMSNorm(x, r, y, w nn.Tensor, s nn.NormSpec) {
	d.enter()
	defer d.exit()
	positive("AddRMSNorm", s.Rows, s.Width, s.XStride, s.YStride)
	if s.XStride != 0 && s.XStride != s.Width {
		panic(fmt.Sprintf("devicetest: Strict.AddRMSNorm: x stride %d, want its rows contiguous (width %d)", s.XStride, s.Width))
	}
	ys := s.YStride
	if ys == 0 {
		ys = s.Width
	}
	if ys < s.Width {
		panic(fmt.Sprintf("devicetest: Strict.AddRMSNorm: y stride %d below the width %d", ys, s.Width))
	}
	n := s.Rows * s.Width
	X, R := d.h("AddRMSNorm", x, n), d.h("AddRMSNorm", r, n)
	Y := d.h("AddRMSNorm", y, need(s.Rows, ys, s.Width))
	if overlaps(y.Slice(0, need(s.Rows, ys, s.Width)), x.Slice(0, n)) || overlaps(y.Slice(0, need(s.Rows, ys, s.Width)), r.Slice(0, n)) {
		panic("devicetest: Strict.AddRMSNorm: y overlaps x or r")
	}
	W := d.h("AddRMSNorm", w, normWeightLen("AddRMSNorm", s))
	d.push(func() {
		d.host.Add(X, R, n)
		d.host.RMSNorm(Y, X, W, s)
	})
}

// MatMuls implements nn.SharedMatMuler.
func (d *Strict) MatMuls(x nn.Tensor, n int, ps []nn.Product) {
	d.enter()
	defer d.exit()
	positive("MatMuls", n)
	if len(ps) == 0 {
		panic("devicetest: Strict.MatMuls: no products")
	}
	cols := ps[0].W.W.Cols
	X := d.h("MatMuls", x, n*cols)
	xs := x.Slice(0, n*cols)
	type job struct {
		w    nn.Mat
		y    nn.Tensor
		rows int
	}
	jobs := make([]job, len(ps))
	for i, p := range ps {
		d.m("MatMuls", p.W)
		if p.W.W.Cols != cols {
			panic(fmt.Sprintf("devicetest: Strict.MatMuls: product %d has %d columns, product 0 %d", i, p.W.W.Cols, cols))
		}
		rows := p.W.W.Rows
		Y := d.h("MatMuls", p.Y, n*rows)
		ys := p.Y.Slice(0, n*rows)
		if overlaps(ys, xs) {
			panic(fmt.Sprintf("devicetest: Strict.MatMuls: product %d's output overlaps x", i))
		}
		for j := range i {
			if overlaps(ys, ps[j].Y.Slice(0, n*ps[j].W.W.Rows)) {
				panic(fmt.Sprintf("devicetest: Strict.MatMuls: products %d and %d write the same floats", j, i))
			}
		}
		jobs[i] = job{nn.Mat{W: p.W.W}, Y, rows}
	}
	d.push(func() {
		for _, j := range jobs {
			d.host.MatMul(j.w, j.y, X, n)
		}
	})
}
