package devicetest

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// refMat is a random matrix and its exact float64 elements.
type refMat struct {
	m    mlxq.Matrix
	w    []float64 // [Rows][Cols]
	desc string
}

// randFloat draws a value exactly representable in t: ±2^e·(1+m/2^k) for e
// in [emin, emax], and returns its bytes and its value (the encoding is
// written here from the formats' definitions, not through mlxq).
func randFloat(r *rand.Rand, t mlxq.Float, emin, emax int, neg bool) ([]byte, float64) {
	e := emin + r.IntN(emax-emin+1)
	var sign uint64
	if neg {
		sign = 1
	}
	switch t {
	case mlxq.F32:
		m := r.Uint64() & (1<<23 - 1)
		u := uint32(sign<<31 | uint64(e+127)<<23 | m)
		b := binary.LittleEndian.AppendUint32(nil, u)
		return b, float64(math.Float32frombits(u))
	case mlxq.BF16:
		m := r.Uint64() & (1<<7 - 1)
		u := uint16(sign<<15 | uint64(e+127)<<7 | m)
		v := math.Ldexp(1+float64(m)/128, e)
		if neg {
			v = -v
		}
		return binary.LittleEndian.AppendUint16(nil, u), v
	case mlxq.F16:
		if e < -14 || e > 15 {
			panic("devicetest: f16 exponent out of range")
		}
		m := r.Uint64() & (1<<10 - 1)
		u := uint16(sign<<15 | uint64(e+15)<<10 | m)
		v := math.Ldexp(1+float64(m)/1024, e)
		if neg {
			v = -v
		}
		return binary.LittleEndian.AppendUint16(nil, u), v
	}
	panic("devicetest: unknown float type")
}

// randQuant is a random MLX affine-quantized matrix: codes packed in an
// LSB-first bit stream, scales positive, biases negative (as quantization
// of a centred weight gives).
func randQuant(r *rand.Rand, rows, cols, bits, group int, ft mlxq.Float) refMat {
	ng := cols / group
	rb := cols * bits / 8
	weight := make([]byte, rows*rb)
	var scales, biases []byte
	w := make([]float64, rows*cols)
	levels := float64(int(1)<<bits - 1)
	for row := range rows {
		for g := range ng {
			sb, s := randFloat(r, ft, -3-bits, -1-bits, false)
			bb, b := randFloat(r, ft, -3, -1, true)
			scales = append(scales, sb...)
			biases = append(biases, bb...)
			for i := range group {
				c := g*group + i
				q := r.IntN(int(levels) + 1)
				pos := c * bits
				for bit := range bits {
					if q>>bit&1 == 1 {
						p := pos + bit
						weight[row*rb+p>>3] |= 1 << (p & 7)
					}
				}
				w[row*cols+c] = s*float64(q) + b
			}
		}
	}
	m, err := mlxq.NewQuantized(rows, cols, bits, group, ft, weight, scales, biases)
	if err != nil {
		panic(err)
	}
	return refMat{m: m, w: w, desc: fmt.Sprintf("q%dg%d-%v-%dx%d", bits, group, ft, rows, cols)}
}

// randDense is a random dense matrix of element type ft.
func randDense(r *rand.Rand, rows, cols int, ft mlxq.Float) refMat {
	var data []byte
	w := make([]float64, rows*cols)
	for i := range w {
		b, v := randFloat(r, ft, -5, -1, r.IntN(2) == 0)
		data = append(data, b...)
		w[i] = v
	}
	m, err := mlxq.NewDense(rows, cols, ft, data)
	if err != nil {
		panic(err)
	}
	return refMat{m: m, w: w, desc: fmt.Sprintf("dense-%v-%dx%d", ft, rows, cols)}
}

// apply returns y = W·x[i] for n rows of x and the bound's scale
// Σ_j |W_ij·x_j| per output.
func (rm refMat) apply(x []float32, n int) (y, mag []float64) {
	R, C := rm.m.Rows, rm.m.Cols
	y, mag = make([]float64, n*R), make([]float64, n*R)
	for i := range n {
		for r := range R {
			var s, a float64
			for c := range C {
				p := rm.w[r*C+c] * float64(x[i*C+c])
				s += p
				a += math.Abs(p)
			}
			y[i*R+r], mag[i*R+r] = s, max(a, 1e-30)
		}
	}
	return y, mag
}

// into returns a copy of m whose byte slices lie in buf from off, and the
// offset after them.
func into(m mlxq.Matrix, buf []byte, off int) (mlxq.Matrix, int) {
	place := func(b []byte) []byte {
		n := copy(buf[off:], b)
		s := buf[off : off+n : off+n]
		off += n
		return s
	}
	w := place(m.Weight)
	if m.Bits == 0 {
		d, err := mlxq.NewDense(m.Rows, m.Cols, m.Type, w)
		if err != nil {
			panic(err)
		}
		return d, off
	}
	s, b := place(m.Scales), place(m.Biases)
	q, err := mlxq.NewQuantized(m.Rows, m.Cols, m.Bits, m.GroupSize, m.Type, w, s, b)
	if err != nil {
		panic(err)
	}
	return q, off
}
