package metal

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// Kernel tests, run on whatever kernelTestBackend returns: a Backend over the
// C++ shim on Linux (shim_test.go), over the real GPU on macOS
// (metal_darwin_test.go). Every kernel is compared with an independent
// float64 Go reference written here (and, where the runtime has one, with
// the CPU backend) on random inputs, with a tolerance per kernel.

// failOnFallback makes t fail if any runtime.Backend call of b fell back to
// the CPU during t (a device error, which the fallback would hide).
func failOnFallback(t *testing.T, b *Backend) {
	before := b.Stats().Fallbacks
	t.Cleanup(func() {
		if n := b.Stats().Fallbacks - before; n > 0 {
			t.Errorf("%d calls fell back to the CPU after a device error: %v", n, b.Err())
		}
	})
}

func randF32(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32((r.Float64()*2 - 1) * scale)
	}
	return x
}

// closeTo checks |got-want| <= rel*mag[i] + abs for every element, where mag
// is the magnitude of the terms that made want[i] (nil: |want[i]|).
func closeTo(t *testing.T, what string, got []float32, want, mag []float64, rel, abs float64) {
	t.Helper()
	if len(got) < len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i, w := range want {
		m := math.Abs(w)
		if mag != nil {
			m = mag[i]
		}
		d := math.Abs(float64(got[i]) - w)
		if !(d <= rel*m+abs) { // also catches NaN
			if bad < 5 {
				t.Errorf("%s[%d] = %.9g, want %.9g (diff %.3g, tolerance %.3g)", what, i, got[i], w, d, rel*m+abs)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values out of tolerance", what, bad, len(want))
	}
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// ---- independent references ----

// refFloat decodes element i of a little-endian array of type t.
func refFloat(b []byte, i int, t mlxq.Float) float64 {
	switch t {
	case mlxq.F32:
		return float64(math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24))
	case mlxq.BF16:
		return float64(math.Float32frombits((uint32(b[2*i]) | uint32(b[2*i+1])<<8) << 16))
	}
	// IEEE half, decoded by hand.
	u := uint16(b[2*i]) | uint16(b[2*i+1])<<8
	sign := 1.0
	if u&0x8000 != 0 {
		sign = -1
	}
	e, m := int(u>>10&0x1f), float64(u&0x3ff)
	if e == 0 {
		return sign * m * math.Pow(2, -24)
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

// refWeight is W[r][c] of a quantized or dense matrix: the packed row is one
// LSB-first bit stream, read bit by bit.
func refWeight(w mlxq.Matrix, r, c int) float64 {
	if w.Bits == 0 {
		return refFloat(w.Weight, r*w.Cols+c, w.Type)
	}
	row := w.Weight[r*w.Cols*w.Bits/8:]
	q := 0
	for k := 0; k < w.Bits; k++ {
		bit := c*w.Bits + k
		q |= int(row[bit/8]>>(bit%8)&1) << k
	}
	g := r*(w.Cols/w.GroupSize) + c/w.GroupSize
	return refFloat(w.Scales, g, w.Type)*float64(q) + refFloat(w.Biases, g, w.Type)
}

// refMatMul returns y = W x for n vectors and the magnitudes sum |w x|.
func refMatMul(w mlxq.Matrix, x []float32, n int) (y, mag []float64) {
	y = make([]float64, n*w.Rows)
	mag = make([]float64, n*w.Rows)
	for r := 0; r < w.Rows; r++ {
		for c := 0; c < w.Cols; c++ {
			wv := refWeight(w, r, c)
			for v := 0; v < n; v++ {
				p := wv * float64(x[v*w.Cols+c])
				y[v*w.Rows+r] += p
				mag[v*w.Rows+r] += math.Abs(p)
			}
		}
	}
	return y, mag
}

func randMatrix(t *testing.T, r *rand.Rand, rows, cols, bits, group int, ft mlxq.Float) mlxq.Matrix {
	t.Helper()
	w := randF32(r, rows*cols, 1)
	if bits == 0 {
		data := make([]byte, rows*cols*ft.Size())
		mlxq.EncodeFloats(data, w, ft)
		m, err := mlxq.NewDense(rows, cols, ft, data)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m, err := mlxq.Quantize(w, rows, cols, bits, group, ft)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gemvCases are the shapes and formats the GEMV tests cover: every bit
// width, every group size, every scale type, dense types, row counts that
// leave a partial threadgroup, columns that leave lanes idle.
var gemvCases = []struct {
	bits, group int
	ft          mlxq.Float
	rows, cols  int
	n           int
}{
	{4, 64, mlxq.BF16, 37, 640, 1},
	{4, 32, mlxq.F16, 16, 256, 3},
	{4, 128, mlxq.F32, 9, 384, 2},
	{8, 64, mlxq.BF16, 37, 640, 1},
	{8, 32, mlxq.F32, 8, 96, 2},
	{8, 128, mlxq.F16, 11, 256, 1},
	{2, 64, mlxq.BF16, 13, 320, 2},
	{3, 32, mlxq.BF16, 13, 288, 1},
	{5, 64, mlxq.F16, 10, 192, 1},
	{6, 128, mlxq.F32, 10, 384, 2},
	{0, 0, mlxq.F32, 21, 200, 2},
	{0, 0, mlxq.F16, 9, 72, 1},
	{0, 0, mlxq.BF16, 17, 130, 3},
}

func testGEMV(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range gemvCases {
		name := fmt.Sprintf("bits%d_g%d_%v_%dx%d_n%d", c.bits, c.group, c.ft, c.rows, c.cols, c.n)
		t.Run(name, func(t *testing.T) {
			w := randMatrix(t, r, c.rows, c.cols, c.bits, c.group, c.ft)
			x := randF32(r, c.n*c.cols, 1)
			want, mag := refMatMul(w, x, c.n)
			got := make([]float32, c.n*c.rows)
			b.MatMul(w, got, x, c.n)
			closeTo(t, "y", got, want, mag, 2e-6, 1e-6)
			cpu := make([]float32, c.n*c.rows)
			runtime.CPU{}.MatMul(w, cpu, x, c.n)
			closeTo(t, "y vs CPU backend", got, f64(cpu), mag, 4e-6, 1e-6)
		})
	}
	if err := b.Err(); err != nil {
		t.Fatalf("device error (results came from the CPU fallback): %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func refRMS(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * inv * w[i]
	}
	return y
}

func refSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
func refSilu(x float64) float64    { return x * refSigmoid(x) }

func testNorms(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(3, 4))
	const eps = 1e-6
	t.Run("rms_norm", func(t *testing.T) {
		rows, dim := 5, 300 // more values than threads per row
		x, w := randF32(r, rows*dim, 2), randF32(r, dim, 1.5)
		var want []float64
		for i := range rows {
			want = append(want, refRMS(f64(x[i*dim:(i+1)*dim]), f64(w), eps)...)
		}
		got := make([]float32, rows*dim)
		b.RMSNorm(got, x, w, eps)
		closeTo(t, "y", got, want, nil, 2e-6, 1e-7)
		cpu := make([]float32, rows*dim)
		runtime.CPU{}.RMSNorm(cpu, x, w, eps)
		closeTo(t, "y vs CPU backend", got, f64(cpu), nil, 2e-6, 1e-7)
		b.RMSNorm(x, x, w, eps) // in place
		closeTo(t, "in place", x, want, nil, 2e-6, 1e-7)
	})
	t.Run("rms_norm_strided", func(t *testing.T) {
		// Per-head q norm inside q_proj output: heads of 16 at stride 32,
		// the gate halves in between must stay untouched.
		rows, dim, stride := 6, 16, 32
		x, w := randF32(r, rows*stride, 3), randF32(r, dim, 1)
		orig := append([]float32(nil), x...)
		must(t, b.RMSNormRows(x, x, w, rows, dim, stride, stride, eps))
		for i := range rows {
			want := refRMS(f64(orig[i*stride:i*stride+dim]), f64(w), eps)
			closeTo(t, fmt.Sprintf("row %d", i), x[i*stride:], want, nil, 2e-6, 1e-7)
			for j := dim; j < stride; j++ {
				if x[i*stride+j] != orig[i*stride+j] {
					t.Fatalf("gate value %d of row %d changed", j, i)
				}
			}
		}
	})
	t.Run("gated_rms_norm", func(t *testing.T) {
		rows, dim := 4, 16
		x, z, w := randF32(r, rows*dim, 2), randF32(r, rows*dim, 4), randF32(r, dim, 1)
		var want []float64
		for i := range rows {
			n := refRMS(f64(x[i*dim:(i+1)*dim]), f64(w), eps)
			for j := range n {
				want = append(want, n[j]*refSilu(float64(z[i*dim+j])))
			}
		}
		got := make([]float32, rows*dim)
		must(t, b.GatedRMSNorm(got, x, z, w, eps))
		closeTo(t, "y", got, want, nil, 4e-6, 1e-7)
	})
	t.Run("l2_norm", func(t *testing.T) {
		rows, dim := 3, 128
		x := randF32(r, rows*dim, 1)
		scale := float32(1 / math.Sqrt(float64(dim)))
		var want []float64
		for i := range rows {
			var ss float64
			for _, v := range x[i*dim : (i+1)*dim] {
				ss += float64(v) * float64(v)
			}
			inv := 1 / math.Sqrt(ss+eps) * float64(scale)
			for _, v := range x[i*dim : (i+1)*dim] {
				want = append(want, float64(v)*inv)
			}
		}
		must(t, b.L2NormRows(x, x, dim, eps, scale))
		closeTo(t, "y", x, want, nil, 2e-6, 1e-8)
	})
}

func testRoPE(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(5, 6))
	t.Run("table", func(t *testing.T) {
		cos, sin := RopeTable(3, 4, 8, 1e7)
		for tok := range 4 {
			for i := range 4 {
				ang := float64(3+tok) * math.Pow(1e7, -float64(2*i)/8)
				if math.Abs(float64(cos[tok*4+i])-math.Cos(ang)) > 1e-6 || math.Abs(float64(sin[tok*4+i])-math.Sin(ang)) > 1e-6 {
					t.Fatalf("token %d pair %d: cos/sin %v/%v, want %v/%v", tok, i, cos[tok*4+i], sin[tok*4+i], math.Cos(ang), math.Sin(ang))
				}
			}
		}
	})
	t.Run("rope_neox", func(t *testing.T) {
		tokens, heads, hd, rotary := 3, 4, 16, 8
		headStride, rowStride := 2*hd, 4*2*hd // q heads interleaved with their gates
		half := rotary / 2
		x := randF32(r, tokens*rowStride, 2)
		orig := append([]float32(nil), x...)
		cos, sin := RopeTable(1000, tokens, rotary, 1e7)
		must(t, b.RoPE(x, tokens, heads, rowStride, headStride, cos, sin))
		for tok := range tokens {
			for h := range heads {
				o := tok*rowStride + h*headStride
				want := f64(orig[o : o+hd])
				for i := range half {
					c, s := float64(cos[tok*half+i]), float64(sin[tok*half+i])
					a, bb := float64(orig[o+i]), float64(orig[o+i+half])
					want[i], want[i+half] = a*c-bb*s, bb*c+a*s
				}
				closeTo(t, fmt.Sprintf("token %d head %d", tok, h), x[o:], want, nil, 1e-6, 1e-6)
				for j := hd; j < headStride; j++ {
					if x[o+j] != orig[o+j] {
						t.Fatalf("token %d head %d: value %d past the head changed", tok, h, j)
					}
				}
			}
		}
	})
}

// refAttention is causal softmax attention in float64, with the magnitude
// sum p|v| of each output.
func refAttention(q, k, v []float32, d AttentionDims) (o, mag []float64) {
	o = make([]float64, d.Tokens*d.Heads*d.HeadDim)
	mag = make([]float64, len(o))
	kvs := d.KVHeads * d.HeadDim
	for t := range d.Tokens {
		n := d.Keys - (d.Tokens - 1 - t)
		for h := range d.Heads {
			g := h / (d.Heads / d.KVHeads)
			qh := q[t*d.Heads*d.QHeadStride+h*d.QHeadStride:]
			s := make([]float64, n)
			mx := math.Inf(-1)
			for j := range n {
				for i := range d.HeadDim {
					s[j] += float64(qh[i]) * float64(k[j*kvs+g*d.HeadDim+i])
				}
				s[j] *= float64(d.Scale)
				mx = math.Max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			for i := range d.HeadDim {
				idx := (t*d.Heads+h)*d.HeadDim + i
				for j := range n {
					vv := float64(v[j*kvs+g*d.HeadDim+i])
					o[idx] += s[j] / sum * vv
					mag[idx] += s[j] / sum * math.Abs(vv)
				}
			}
		}
	}
	return o, mag
}

func testAttention(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, d := range []AttentionDims{
		{Tokens: 3, Heads: 4, KVHeads: 2, HeadDim: 16, Keys: 7, QHeadStride: 32, Scale: 0.25},
		{Tokens: 1, Heads: 2, KVHeads: 1, HeadDim: 32, Keys: 300, QHeadStride: 32, Scale: 1 / float32(math.Sqrt(32))},
		{Tokens: 2, Heads: 3, KVHeads: 3, HeadDim: 8, Keys: 2, QHeadStride: 8, Scale: 0.5},
	} {
		t.Run(fmt.Sprintf("attn_decode_T%d_H%d_KV%d_keys%d", d.Tokens, d.Heads, d.KVHeads, d.Keys), func(t *testing.T) {
			q := randF32(r, d.Tokens*d.Heads*d.QHeadStride, 2)
			k := randF32(r, d.Keys*d.KVHeads*d.HeadDim, 2)
			v := randF32(r, d.Keys*d.KVHeads*d.HeadDim, 1)
			want, mag := refAttention(q, k, v, d)
			got := make([]float32, len(want))
			must(t, b.Attention(got, q, k, v, d))
			closeTo(t, "o", got, want, mag, 1e-5, 1e-7)
		})
	}
	t.Run("sigmoid_mul_rows", func(t *testing.T) {
		// The output gate: o (stride 16) *= sigmoid(gate inside q, stride 32).
		rows, dim := 5, 16
		o, g := randF32(r, rows*dim, 1), randF32(r, rows*2*dim, 4)
		var want []float64
		for i := range rows {
			for j := range dim {
				want = append(want, float64(o[i*dim+j])*refSigmoid(float64(g[i*2*dim+dim+j])))
			}
		}
		must(t, b.SigmoidMul(o, o, g[dim:], rows, dim, dim, 2*dim, dim))
		closeTo(t, "y", o, want, nil, 1e-6, 1e-8)
	})
}

func testDeltaNet(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, K := range []int{4, 2} {
		t.Run(fmt.Sprintf("conv1d_step_K%d", K), func(t *testing.T) {
			C, T := 70, 3 // C not a multiple of the threadgroup size
			u, w := randF32(r, T*C, 2), randF32(r, C*K, 1)
			win := randF32(r, (K-1)*C, 2)
			// Reference: the full input history, oldest first.
			hist := append(f64(win), f64(u)...)
			want := make([]float64, T*C)
			for tok := range T {
				for ch := range C {
					var acc float64
					for j := range K {
						acc += float64(w[ch*K+j]) * hist[(tok+j)*C+ch]
					}
					want[tok*C+ch] = refSilu(acc)
				}
			}
			out := make([]float32, T*C)
			must(t, b.ConvStep(out, win, u, w, C, K))
			closeTo(t, "out", out, want, nil, 2e-6, 1e-7)
			for i, v := range win { // the window now holds the last K-1 inputs, exactly
				if float64(v) != hist[T*C+i] {
					t.Fatalf("window[%d] = %v, want %v", i, v, hist[T*C+i])
				}
			}
		})
	}
	t.Run("gdn_gates", func(t *testing.T) {
		n, T := 5, 3
		bb, a := randF32(r, T*n, 8), randF32(r, T*n, 30) // a + dt crosses softplus's threshold of 20
		negA, dt := randF32(r, n, 1), randF32(r, n, 1)
		for i := range negA {
			negA[i] = -float32(math.Exp(float64(negA[i])))
		}
		beta, g := make([]float32, T*n), make([]float32, T*n)
		must(t, b.GDNGates(beta, g, bb, a, negA, dt))
		wantB, wantG := make([]float64, T*n), make([]float64, T*n)
		for i := range wantB {
			wantB[i] = refSigmoid(float64(bb[i]))
			x := float64(a[i]) + float64(dt[i%n])
			sp := x
			if x <= 20 {
				sp = math.Log1p(math.Exp(x))
			}
			wantG[i] = float64(negA[i%n]) * sp
		}
		closeTo(t, "beta", beta, wantB, nil, 1e-6, 1e-7)
		closeTo(t, "g", g, wantG, nil, 2e-6, 1e-6)
	})
	t.Run("gated_delta_step", func(t *testing.T) {
		d := DeltaDims{Tokens: 3, ValueHeads: 4, KeyHeads: 2, KeyDim: 16, ValueDim: 70}
		S := randF32(r, d.ValueHeads*d.KeyDim*d.ValueDim, 0.5)
		q := randF32(r, d.Tokens*d.KeyHeads*d.KeyDim, 0.3)
		k := randF32(r, d.Tokens*d.KeyHeads*d.KeyDim, 0.3)
		v := randF32(r, d.Tokens*d.ValueHeads*d.ValueDim, 1)
		beta := randF32(r, d.Tokens*d.ValueHeads, 0.5)
		g := randF32(r, d.Tokens*d.ValueHeads, 1)
		for i := range beta {
			beta[i] += 0.5
			g[i] -= 1.2
		}
		// Reference: the recurrence in float64, written out per head.
		rs := f64(S)
		wantO := make([]float64, d.Tokens*d.ValueHeads*d.ValueDim)
		dk, dv := d.KeyDim, d.ValueDim
		for tok := range d.Tokens {
			for h := range d.ValueHeads {
				kh := h / (d.ValueHeads / d.KeyHeads)
				kv := f64(k[(tok*d.KeyHeads+kh)*dk:][:dk])
				qv := f64(q[(tok*d.KeyHeads+kh)*dk:][:dk])
				vv := f64(v[(tok*d.ValueHeads+h)*dv:][:dv])
				bt, decay := float64(beta[tok*d.ValueHeads+h]), math.Exp(float64(g[tok*d.ValueHeads+h]))
				Sh := rs[h*dk*dv : (h+1)*dk*dv]
				for i := range Sh {
					Sh[i] *= decay
				}
				for j := range dv {
					var m float64
					for i := range dk {
						m += Sh[i*dv+j] * kv[i]
					}
					delta := bt * (vv[j] - m)
					for i := range dk {
						Sh[i*dv+j] += kv[i] * delta
					}
					var o float64
					for i := range dk {
						o += Sh[i*dv+j] * qv[i]
					}
					wantO[(tok*d.ValueHeads+h)*dv+j] = o
				}
			}
		}
		o := make([]float32, len(wantO))
		must(t, b.GatedDeltaStep(S, o, q, k, v, beta, g, d))
		closeTo(t, "o", o, wantO, nil, 1e-5, 1e-6)
		closeTo(t, "S", S, rs, nil, 1e-5, 1e-6)
	})
}

func testElementwise(t *testing.T, b *Backend) {
	r := rand.New(rand.NewPCG(11, 12))
	n := 1000
	t.Run("swiglu", func(t *testing.T) {
		g, u := randF32(r, n, 6), randF32(r, n, 2)
		want := make([]float64, n)
		for i := range want {
			want[i] = refSilu(float64(g[i])) * float64(u[i])
		}
		got := make([]float32, n)
		b.SwiGLU(got, g, u)
		closeTo(t, "y", got, want, nil, 1e-6, 1e-8)
		cpu := make([]float32, n)
		runtime.CPU{}.SwiGLU(cpu, g, u)
		closeTo(t, "y vs CPU backend", got, f64(cpu), nil, 1e-6, 1e-8)
	})
	t.Run("residual_add", func(t *testing.T) {
		x, y := randF32(r, n, 3), randF32(r, n, 3)
		want := make([]float64, n)
		for i := range want {
			want[i] = float64(x[i] + y[i]) // one float32 rounding, as on the GPU
		}
		must(t, b.Add(x, x, y))
		closeTo(t, "x", x, want, nil, 0, 0)
	})
	t.Run("scale_add", func(t *testing.T) {
		x, y := randF32(r, n, 3), randF32(r, n, 3)
		want := make([]float64, n)
		for i := range want {
			want[i] = float64(y[i]) + 0.37*float64(x[i])
		}
		must(t, b.ScaleAdd(y, x, 0.37))
		closeTo(t, "y", y, want, nil, 1e-6, 1e-7)
		// The shared-expert gate: one logit per row.
		rows := 4
		s := randF32(r, rows, 3)
		y2, x2 := randF32(r, n, 1), randF32(r, n, 1)
		want2 := make([]float64, n)
		for i := range want2 {
			want2[i] = float64(y2[i]) + refSigmoid(float64(s[i/(n/rows)]))*float64(x2[i])
		}
		must(t, b.SigmoidScaleAdd(y2, x2, s))
		closeTo(t, "sigmoid gate", y2, want2, nil, 1e-6, 1e-7)
	})
}

func TestKernels(t *testing.T) { runKernelCases(t, kernelTestBackend(t), true) }

// runKernelCases runs every kernel case on b, then checks that every kernel
// of the Metal library ran. With layer, the layer device's kernels (the
// shared bodies, copy_f32) are checked too, by the nn.Device conformance
// suite (runtime/nn/devicetest.Ops) run on b's layer device.
func runKernelCases(t *testing.T, b *Backend, layer bool) {
	if layer {
		t.Run("layer-device", func(t *testing.T) {
			dev := b.LayerDevice()
			if dev == nil {
				t.Fatal("no layer device")
			}
			before := dev.(*Device).LayerStats()
			devicetest.Ops(t, dev, devicetest.DefaultTolerances())
			must(t, dev.EndPass())
			st := dev.(*Device).LayerStats()
			if st.HostOps != before.HostOps {
				t.Errorf("%d ops ran on the CPU", st.HostOps-before.HostOps)
			}
			t.Logf("layer device: %d kernels in %d command buffers", st.Launches-before.Launches, st.Submits-before.Submits)
		})
		t.Run("fused-shared", func(t *testing.T) { testFusedShared(t, b.LayerDevice().(*Device)) })
	}
	t.Run("gemv", func(t *testing.T) { testGEMV(t, b) })
	t.Run("norms", func(t *testing.T) { testNorms(t, b) })
	t.Run("rope", func(t *testing.T) { testRoPE(t, b) })
	t.Run("attention", func(t *testing.T) { testAttention(t, b) })
	t.Run("deltanet", func(t *testing.T) { testDeltaNet(t, b) })
	t.Run("elementwise", func(t *testing.T) { testElementwise(t, b) })
	if t.Failed() {
		return
	}
	// Every kernel in the source ran at least once.
	lib, err := kernelLibrary()
	must(t, err)
	ran := b.kernelLaunches()
	for _, name := range lib.names {
		if !layer && lib.kernels[name].Entry {
			continue
		}
		if ran[name] == 0 && !untestedKernels[name] {
			t.Errorf("kernel %s was never run by the tests", name)
		}
	}
	if err := b.Err(); err != nil {
		t.Fatalf("device error: %v", err)
	}
}

// untestedKernels are kernels the tests cannot run (named in README.md).
var untestedKernels = map[string]bool{}

// place copies the matrix's three arrays into buf at off (weight), then the
// scales and biases right after, and returns the matrix over buf.
func placeMatrix(t *testing.T, w mlxq.Matrix, buf []byte, off int) mlxq.Matrix {
	t.Helper()
	n := copy(buf[off:], w.Weight)
	s0 := off + n
	copy(buf[s0:], w.Scales)
	b0 := s0 + len(w.Scales)
	copy(buf[b0:], w.Biases)
	m, err := mlxq.NewQuantized(w.Rows, w.Cols, w.Bits, w.GroupSize, w.Type,
		buf[off:s0], buf[s0:b0], buf[b0:b0+len(w.Biases)])
	must(t, err)
	return m
}

func TestBackendMemory(t *testing.T) {
	b := kernelTestBackend(t)
	r := rand.New(rand.NewPCG(13, 14))
	const rows, cols = 24, 256
	q4 := randMatrix(t, r, rows, cols, 4, 64, mlxq.BF16)
	q3 := randMatrix(t, r, rows, cols, 3, 64, mlxq.BF16)
	mem, err := b.Alloc(64 << 10)
	must(t, err)
	defer func() { must(t, b.Free(mem)) }()
	xs, err := b.AllocFloat32(2 * cols)
	must(t, err)
	defer func() { must(t, b.FreeFloat32(xs)) }()
	copy(xs, randF32(r, 2*cols, 1))
	x, y := xs[:cols], xs[cols:cols+rows]

	run := func(t *testing.T, w mlxq.Matrix, y []float32, stagedWeights bool) {
		t.Helper()
		before := b.Stats()
		b.MatMul(w, y, x, 1)
		after := b.Stats()
		want, mag := refMatMul(w, x, 1)
		closeTo(t, "y", y, want, mag, 2e-6, 1e-6)
		staged := after.StagedBytes - before.StagedBytes
		if stagedWeights != (staged >= int64(len(w.Weight))) {
			t.Errorf("staged %d bytes; weights (%d bytes) staged = %v, want %v", staged, len(w.Weight), !stagedWeights, stagedWeights)
		}
		if !stagedWeights && staged != 0 {
			t.Errorf("%d bytes were copied, want zero copy", staged)
		}
	}
	// 2-byte but not 4-byte aligned: the GPU reads the words in place, as
	// two 16-bit loads (a 32-bit load here aborts the sanitized shim).
	t.Run("q4_2byte_aligned_in_place", func(t *testing.T) { run(t, placeMatrix(t, q4, mem, 2), y, false) })
	t.Run("q4_odd_offset_staged", func(t *testing.T) { run(t, placeMatrix(t, q4, mem, 4097), y, true) })
	t.Run("q3_odd_offset_in_place", func(t *testing.T) {
		w := placeMatrix(t, q3, mem, 8193)
		// The scales follow at an odd offset too: those must be staged, the
		// bytewise 3-bit weights need not be.
		before := b.Stats()
		b.MatMul(w, y, x, 1)
		want, mag := refMatMul(w, x, 1)
		closeTo(t, "y", y, want, mag, 2e-6, 1e-6)
		if got := b.Stats().StagedBytes - before.StagedBytes; got != int64(2*len(w.Scales)) {
			t.Errorf("staged %d bytes, want the scales and biases only (%d)", got, 2*len(w.Scales))
		}
	})
	t.Run("output_aliasing_input_is_staged", func(t *testing.T) {
		// y overlaps x: the product must still see the original x.
		w := placeMatrix(t, q4, mem, 0)
		x0 := append([]float32(nil), x...)
		want, mag := refMatMul(w, x0, 1)
		b.MatMul(w, xs[cols-8:cols-8+rows], x, 1)
		closeTo(t, "y", xs[cols-8:], want, mag, 2e-6, 1e-6)
		copy(x, x0)
	})
	t.Run("pread_expert_into_shared_memory", func(t *testing.T) {
		// An expert blob on disk, read with one positional read into Alloc
		// memory and used in place.
		blob := make([]byte, 16384)
		w := placeMatrix(t, q4, blob, 0)
		path := t.TempDir() + "/layer_00.bin"
		must(t, os.WriteFile(path, append(make([]byte, 16384), blob...), 0o644))
		f, err := os.Open(path)
		must(t, err)
		defer f.Close()
		slot, err := b.Alloc(len(blob))
		must(t, err)
		defer func() { must(t, b.Free(slot)) }()
		_, err = f.ReadAt(slot, 16384)
		must(t, err)
		dw, err := mlxq.NewQuantized(w.Rows, w.Cols, w.Bits, w.GroupSize, w.Type,
			slot[:len(w.Weight)], slot[len(w.Weight):len(w.Weight)+len(w.Scales)], slot[len(w.Weight)+len(w.Scales):len(w.Weight)+2*len(w.Scales)])
		must(t, err)
		run(t, dw, y, false)
	})
	t.Run("free_errors", func(t *testing.T) {
		if err := b.Free(make([]byte, 8)); err == nil {
			t.Error("Free of Go memory succeeded")
		}
		if _, err := b.Alloc(0); err == nil {
			t.Error("Alloc(0) succeeded")
		}
	})
}

func TestOpsErrors(t *testing.T) {
	b := kernelTestBackend(t)
	x := make([]float32, 64)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"RMSNormRows short x", b.RMSNormRows(x, x[:10], x[:16], 2, 16, 16, 16, 1e-6)},
		{"RMSNormRows stride", b.RMSNormRows(x, x, x[:16], 2, 16, 8, 16, 1e-6)},
		{"GatedRMSNorm rows", b.GatedRMSNorm(x, x[:10], x, x[:16], 1e-6)},
		{"L2NormRows dim", b.L2NormRows(x, x, 0, 1e-6, 1)},
		{"RoPE table", b.RoPE(x, 2, 1, 32, 32, x[:3], x[:3])},
		{"RoPE rotary too wide", b.RoPE(x, 1, 1, 32, 4, x[:4], x[:4])},
		{"Attention groups", b.Attention(x, x, x, x, AttentionDims{Tokens: 1, Heads: 3, KVHeads: 2, HeadDim: 4, Keys: 1, QHeadStride: 4})},
		{"Attention head dim", b.Attention(x, x, x, x, AttentionDims{Tokens: 1, Heads: 1, KVHeads: 1, HeadDim: 1024, Keys: 1, QHeadStride: 1024})},
		{"Attention keys", b.Attention(x, x, x, x, AttentionDims{Tokens: 2, Heads: 1, KVHeads: 1, HeadDim: 4, Keys: 1, QHeadStride: 4})},
		{"GDNGates rows", b.GDNGates(x, x, x[:7], x, x[:2], x)},
		{"GatedDeltaStep heads", b.GatedDeltaStep(x, x, x, x, x, x, x, DeltaDims{Tokens: 1, ValueHeads: 3, KeyHeads: 2, KeyDim: 1, ValueDim: 1})},
		{"GatedDeltaStep short S", b.GatedDeltaStep(x, x, x, x, x, x, x, DeltaDims{Tokens: 1, ValueHeads: 1, KeyHeads: 1, KeyDim: 16, ValueDim: 16})},
		{"ConvStep channels", b.ConvStep(x, x, x[:10], x, 4, 4)},
		{"Add lengths", b.Add(x[:2], x, x)},
		{"SigmoidScaleAdd rows", b.SigmoidScaleAdd(x, x[:10], x[:3])},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		} else if !strings.HasPrefix(c.err.Error(), "metal: ") {
			t.Errorf("%s: error %q does not name the package", c.name, c.err)
		}
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
}

// TestTinyModels runs the committed tiny checkpoints through the runtime's
// forward pass with this backend (every layer on its layer device: the
// graphs find it through nn.Layered) and compares the logits, prefill and
// one decode step, with the CPU backend's; every op ran on a kernel.
func TestTinyModels(t *testing.T) {
	b := modelTestBackend(t)
	dev, _ := b.LayerDevice().(*Device)
	if dev == nil {
		t.Fatal("no layer device")
	}
	before := dev.LayerStats()
	defer func() {
		st := dev.LayerStats()
		if st.Launches == before.Launches || st.HostOps != before.HostOps {
			t.Errorf("layer device: %d kernels, %d ops on the CPU", st.Launches-before.Launches, st.HostOps-before.HostOps)
		}
		t.Logf("layer device: %d kernels in %d command buffers", st.Launches-before.Launches, st.Submits-before.Submits)
	}()
	for _, name := range []string{"qwen3_next-f32", "qwen3_next-q4g64", "qwen3_next-q8g32",
		"qwen3_5_moe-f32", "qwen3_5_moe-q4g32", "qwen3_5_moe-q8g64",
		"gemma4-f32", "gemma4-nokeqv-f32", "gemma4-q4g32", "gemma4-towers-q4g64"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "tiny", name)
			if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
				t.Skipf("tiny model %s missing", dir)
			}
			cpu, err := runtime.Load(dir, nil)
			must(t, err)
			defer cpu.Close()
			gpu, err := runtime.Load(dir, &runtime.LoadOptions{Backend: b})
			must(t, err)
			defer gpu.Close()
			V := cpu.Config.Vocab
			prompt := []int{1, 17, 42, 99 % V, 7}
			next := []int{23}
			sc, sg := cpu.NewState(), gpu.NewState()
			opt := &runtime.ForwardOptions{AllLogits: true}
			for step, toks := range [][]int{prompt, next} {
				want, err := cpu.Forward(sc, toks, opt)
				must(t, err)
				got, err := gpu.Forward(sg, toks, opt)
				must(t, err)
				var scale float64
				for _, v := range want {
					scale = math.Max(scale, math.Abs(float64(v)))
				}
				closeTo(t, fmt.Sprintf("step %d logits", step), got, f64(want), nil, 0, 1e-4*(1+scale))
				for tk := range toks {
					if g, w := argmax(got[tk*V:(tk+1)*V]), argmax(want[tk*V:(tk+1)*V]); g != w {
						t.Errorf("step %d token %d: greedy %d, CPU %d", step, tk, g, w)
					}
				}
			}
		})
	}
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
