package mlxq

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// Hand-computed packing: a row of 32 codes q, and the little-endian uint32
// words MLX stores for it (element i at bits [i*bits, (i+1)*bits) of the
// stream). Worked on paper from the rule, e.g. for 3 bits the codes 0..7
// fill 24 bits as octal 76543210 = 0xFAC688, and the stream is that 24-bit
// chunk repeated: word0 = 0x88|FAC688, word1 = 0xC688|FAC6, word2 = 0xFAC688|FA.
var packCases = []struct {
	bits  int
	q     func(i int) int
	words []uint32
}{
	{2, func(i int) int { return i % 4 }, []uint32{0xe4e4e4e4, 0xe4e4e4e4}},
	{2, func(i int) int { return (i / 4) % 4 }, []uint32{0xffaa5500, 0xffaa5500}},
	{3, func(i int) int { return i % 8 }, []uint32{0x88fac688, 0xc688fac6, 0xfac688fa}},
	{4, func(i int) int { return i % 16 }, []uint32{0x76543210, 0xfedcba98, 0x76543210, 0xfedcba98}},
	// 5 bits: q_i = i. word0 = e0..e5 + low 2 bits of e6 (6 -> 0b10 at bit 30), ...
	{5, func(i int) int { return i }, []uint32{0x8a418820, 0xc5a92839, 0xca307b9a, 0x38bdab49, 0xffbbcdeb}},
	// 6 bits: q_i = 63-i, except q_31 = 0 (so the group spans 0..63).
	{6, func(i int) int {
		if i == 31 {
			return 0
		}
		return 63 - i
	}, []uint32{0xbbf3dfbf, 0x5db7e39e, 0xc31cb3d3, 0xabb2dbaf, 0x59a7a29a, 0x0218a392}},
	// 8 bits: q_i = 8i, except q_31 = 255.
	{8, func(i int) int {
		if i == 31 {
			return 255
		}
		return 8 * i
	}, []uint32{0x18100800, 0x38302820, 0x58504840, 0x78706860, 0x98908880, 0xb8b0a8a0, 0xd8d0c8c0, 0xfff0e8e0}},
}

func wordsBytes(words []uint32) []byte {
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

func TestPackingHandWords(t *testing.T) {
	for _, c := range packCases {
		nb := 1<<c.bits - 1
		// Every case's codes include 0 and nb, so the values w = q - nb make a
		// group with min -nb and max 0: |min| > |max|, scale = nb/nb = 1,
		// edge = -nb, q0 = -nb, bias = -nb, and q = w + nb exactly.
		w := make([]float32, 32)
		for i := range w {
			w[i] = float32(c.q(i) - nb)
		}
		m, err := Quantize(w, 1, 32, c.bits, 32, BF16)
		if err != nil {
			t.Fatal(err)
		}
		want := wordsBytes(c.words)
		if string(m.Weight) != string(want) {
			t.Errorf("%d-bit: packed % x, want % x", c.bits, m.Weight, want)
		}
		if s, b := binary.LittleEndian.Uint16(m.Scales), binary.LittleEndian.Uint16(m.Biases); s != 0x3f80 || BF16ToF32(b) != float32(-nb) {
			t.Errorf("%d-bit: scale %#04x bias %#04x, want 0x3f80 and %d", c.bits, s, b, -nb)
		}
		// Decode direction, from the hand-written words.
		buf := make([]byte, len(want)+2)
		copy(buf[2:], want)
		one := []byte{0x80, 0x3f}
		bias := []byte{0, 0}
		binary.LittleEndian.PutUint16(bias, F32ToBF16(float32(-nb)))
		d, err := NewQuantized(1, 32, c.bits, 32, BF16, buf[2:], one, bias)
		if err != nil {
			t.Fatal(err)
		}
		q := d.Unpack(0)
		row := make([]float32, 32)
		d.Row(row, 0)
		for i := range q {
			if int(q[i]) != c.q(i) {
				t.Fatalf("%d-bit: unpacked q[%d] = %d, want %d", c.bits, i, q[i], c.q(i))
			}
			if row[i] != float32(c.q(i)-nb) {
				t.Fatalf("%d-bit: Row[%d] = %v, want %d", c.bits, i, row[i], c.q(i)-nb)
			}
		}
	}
}

// Hand-worked quantization of single groups (group size 32, BF16 scales).
// The values listed are padded to 32 with copies of the first one.
func TestQuantizeGolden(t *testing.T) {
	cases := []struct {
		name   string
		bits   int
		x      []float32
		scale  uint16 // bf16 bits
		bias   uint16
		q      []int
		reason string
	}{
		{
			name: "positive-dominant, negative scale, ties to even", bits: 4,
			// max 15, min 0: |min| > |max| is false, so edge = 15, scale = -(15/15) = -1,
			// q0 = rint(15/-1) = -15, scale = 15/-15 = -1, bias = 15, q = rint(15 - x).
			// 2.5 -> 12.5 -> 12; 3.5 -> 11.5 -> 12; 0.5 -> 14.5 -> 14; 14.5 -> 0.5 -> 0; 13.5 -> 1.5 -> 2.
			x:     []float32{0, 15, 2.5, 3.5, 0.5, 14.5, 13.5, 7},
			scale: 0xbf80, bias: 0x4170,
			q: []int{15, 0, 12, 12, 14, 0, 2, 8},
		},
		{
			name: "mixed signs, scale adjusted by q0, q from float32 scale", bits: 4,
			// min -4, max 1: edge = -4, scale = 5/15 = fl32(1/3) = 0x3eaaaaab.
			// -4/scale = -11.9999996 -> fl32 -12.0 -> q0 = -12, scale = -4/-12 = 0x3eaaaaab, bias = -4.
			// q(1) = 5/scale = 14.9999998 -> 15.0 -> 15; q(0) = 12; q(-3) = 3; q(-2) = 6.
			// q(0.84): (0.84+4)/scale = 14.52 -> 15. With the bf16-rounded scale
			// (0x3eab = 0.333984375) it would be 14.49 -> 14: MLX uses the float32 one.
			x:     []float32{-4, 1, 0, -3, -2, 0.84},
			scale: 0x3eab, bias: 0xc080,
			q: []int{0, 15, 12, 3, 6, 15},
		},
		{
			name: "all negative", bits: 3,
			// min -10, max -4: edge = -10, scale = 6/7 = 0.85714287,
			// -10/scale = -11.666667 -> q0 = -12, scale = -10/-12 = fl32(5/6) = 0x3f555555, bias = -10.
			// q(-4) = 6/scale = 7.2 -> clamp 7; q(-7) = 3.6 -> 4; q(-5) = 6.0 -> 6; q(-9.5) = 0.6 -> 1.
			// bf16(0x3f555555) = 0x3f55 (round down).
			x:     []float32{-10, -4, -7, -5, -9.5},
			scale: 0x3f55, bias: 0xc120,
			q: []int{0, 7, 4, 6, 1},
		},
		{
			name: "all equal", bits: 4,
			// min = max = 0.5: scale = max(0, 1e-7) = 1e-7, negated (edge = max = 0.5).
			// 0.5/-1e-7 = -4999999.94 -> fl32 -5e6 -> q0 = -5e6, scale = 0.5/-5e6 = -fl32(1e-7) = 0xb3d6bf95,
			// bias = 0.5; every q = rint(0/scale) = 0. bf16(0xb3d6bf95) = 0xb3d7 (round up).
			x:     []float32{0.5},
			scale: 0xb3d7, bias: 0x3f00,
			q: []int{0},
		},
		{
			name: "all zero", bits: 8,
			// scale = -1e-7, q0 = rint(-0) = 0 so bias stays 0 and scale stays -1e-7.
			x:     []float32{0},
			scale: 0xb3d7, bias: 0x0000,
			q: []int{0},
		},
	}
	for _, c := range cases {
		x := make([]float32, 32)
		q := make([]int, 32)
		for i := range x {
			j := i
			if j >= len(c.x) {
				j = 0
			}
			x[i], q[i] = c.x[j], c.q[j]
		}
		m, err := Quantize(x, 1, 32, c.bits, 32, BF16)
		if err != nil {
			t.Fatal(err)
		}
		s, b := binary.LittleEndian.Uint16(m.Scales), binary.LittleEndian.Uint16(m.Biases)
		if s != c.scale || b != c.bias {
			t.Errorf("%s: scale %#04x bias %#04x, want %#04x %#04x", c.name, s, b, c.scale, c.bias)
		}
		got := m.Unpack(0)
		for i := range q {
			if int(got[i]) != q[i] {
				t.Errorf("%s: q[%d] (x=%v) = %d, want %d", c.name, i, x[i], got[i], q[i])
			}
		}
	}
}

// The exact float32 scale is kept for F32 storage: check it on the
// mixed-sign case, and that the edge of every group dequantizes exactly.
func TestQuantizeF32Scale(t *testing.T) {
	x := []float32{-4, 1, 0, -3, -2, 0.84}
	for len(x) < 32 {
		x = append(x, -4)
	}
	m, err := Quantize(x, 1, 32, 4, 32, F32)
	if err != nil {
		t.Fatal(err)
	}
	if s := binary.LittleEndian.Uint32(m.Scales); s != 0x3eaaaaab {
		t.Errorf("f32 scale %#08x, want 0x3eaaaaab", s)
	}
	if b := math.Float32frombits(binary.LittleEndian.Uint32(m.Biases)); b != -4 {
		t.Errorf("f32 bias %v, want -4", b)
	}
}

func randMatrix(r *rand.Rand, rows, cols int) []float32 {
	w := make([]float32, rows*cols)
	for i := range w {
		// Row-dependent offset and spread, occasional outliers.
		row := i / cols
		v := r.NormFloat64()*(0.02+0.01*float64(row%5)) + 0.01*float64(row%3-1)
		if r.IntN(50) == 0 {
			v *= 8
		}
		w[i] = float32(v)
	}
	return w
}

// unit roundoff of the scale storage type.
func unitRoundoff(t Float) float64 {
	switch t {
	case BF16:
		return 1.0 / 256
	case F16:
		return 1.0 / 2048
	}
	return 0
}

// TestRoundTrip checks dequantize(quantize(w)) element by element against
// the error the algorithm allows. With the float32 scale s and bias b
// (b = group edge): an element whose code was not clamped is off by at most
// |s|/2 (rounding to the nearest level). Because |q0| can be rounded up,
// the far end of the group can lie up to one level beyond nb*|s| and get
// clamped to nb: an element with code 0 or nb is off by at most |s|.
// Storing s and b in type t adds |q*ds| + |db| <= u*(nb*|s| + |b|) (u the unit
// roundoff; plus 2^-24 absolute for f16 subnormals), and the float32 ops a
// few ulps of the magnitudes involved.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 3, 256
	w := randMatrix(r, rows, cols)
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, group := range []int{32, 64, 128} {
			for _, ft := range []Float{F32, F16, BF16} {
				worst, err := checkRoundTrip(w, rows, cols, bits, group, ft)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d-bit g%d %v: worst err/bound %.3f", bits, group, ft, worst)
			}
		}
	}
}

// checkRoundTrip quantizes w and checks every dequantized element against the
// bound derived above, and (for F32 storage) that each group's edge is exact.
// It returns the largest err/bound seen.
func checkRoundTrip(w []float32, rows, cols, bits, group int, ft Float) (float64, error) {
	nb := float64(int(1)<<bits - 1)
	m, err := Quantize(w, rows, cols, bits, group, ft)
	if err != nil {
		return 0, err
	}
	u := unitRoundoff(ft)
	d := m.Dequantize()
	worst := 0.0
	for r := 0; r < rows; r++ {
		q := m.Unpack(r)
		for i := 0; i < cols; i++ {
			gi := r*(cols/group) + i/group
			sS := math.Abs(float64(ft.load(m.Scales, gi)))
			bS := math.Abs(float64(ft.load(m.Biases, gi)))
			s := sS * (1 + 2*u) // bound on the unrounded |s|
			lvl := s / 2
			if q[i] == 0 || float64(q[i]) == nb {
				lvl = s
			}
			x := float64(w[r*cols+i])
			mag := nb*s + bS + math.Abs(x)
			bound := lvl + u*(nb*s+bS) + 0x1p-20*mag
			if ft == F16 {
				bound += 0x1p-24 * (nb + 1)
			}
			e := math.Abs(float64(d[r*cols+i]) - x)
			if !(e <= bound) {
				return 0, fmt.Errorf("%d-bit g%d %v: row %d col %d: x=%v deq=%v err %g > bound %g (s=%g b=%g q=%d)",
					bits, group, ft, r, i, x, d[r*cols+i], e, bound, sS, bS, q[i])
			}
			if bound > 0 {
				worst = max(worst, e/bound)
			}
		}
	}
	if ft == F32 {
		// The edge of each group (its larger-magnitude end) is exact.
		for r := 0; r < rows; r++ {
			for g := 0; g < cols/group; g++ {
				xs := w[r*cols+g*group : r*cols+(g+1)*group]
				mn, mx := xs[0], xs[0]
				for _, v := range xs {
					mn, mx = min(mn, v), max(mx, v)
				}
				edge := mx
				if abs32(mn) > abs32(mx) {
					edge = mn
				}
				if abs32(edge) < 1e-7 {
					continue // q0 may be 0: then the bias is 0, not the edge
				}
				found := false
				for i, v := range xs {
					if v == edge && d[r*cols+g*group+i] == edge {
						found = true
					}
				}
				if !found {
					return 0, fmt.Errorf("%d-bit g%d: row %d group %d edge %v not exact", bits, group, r, g, edge)
				}
			}
		}
	}
	return worst, nil
}

func TestNewQuantizedErrors(t *testing.T) {
	w := make([]byte, 4*64/2)
	s := make([]byte, 4*2*2)
	cases := []struct {
		rows, cols, bits, group int
		t                       Float
		w, s, b                 []byte
		msg                     string
	}{
		{4, 64, 4, 32, BF16, w, s, s, ""},
		{4, 64, 7, 32, BF16, w, s, s, "bits"},
		{4, 64, 4, 16, BF16, w, s, s, "group"},
		{4, 64, 4, 32, Float(9), w, s, s, "scale type"},
		{4, 48, 4, 32, BF16, w, s, s, "multiple"},
		{4, 64, 4, 32, BF16, w[1:], s, s, "weight is"},
		{4, 64, 4, 32, BF16, w, s[2:], s, "scales are"},
		{4, 64, 4, 32, BF16, w, s, s[:4], "biases are"},
		{4, 64, 4, 32, F32, w, s, s, "scales are"},
		{0, 64, 4, 32, BF16, nil, nil, nil, "shape"},
		{-1, 64, 4, 32, BF16, w, s, s, "shape"},
		{maxDim + 32, 64, 4, 32, BF16, w, s, s, "shape"},
		{1 << 29, 1 << 29, 4, 32, BF16, w, s, s, "shape"}, // 2^58 elements
	}
	for _, c := range cases {
		_, err := NewQuantized(c.rows, c.cols, c.bits, c.group, c.t, c.w, c.s, c.b)
		if c.msg == "" {
			if err != nil {
				t.Errorf("%+v: %v", c, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("rows %d cols %d bits %d group %d: error %v, want %q", c.rows, c.cols, c.bits, c.group, err, c.msg)
		}
	}
	if _, err := NewDense(3, 5, BF16, make([]byte, 29)); err == nil {
		t.Error("NewDense accepted a short slice")
	}
	if _, err := NewDense(3, 5, BF16, make([]byte, 30)); err != nil {
		t.Error(err)
	}
	if _, err := Quantize([]float32{float32(math.NaN())}, 1, 1, 4, 32, BF16); err == nil {
		t.Error("Quantize accepted 1 column with group 32")
	}
	nan := make([]float32, 32)
	nan[7] = float32(math.Inf(1))
	if _, err := Quantize(nan, 1, 32, 4, 32, BF16); err == nil || !strings.Contains(err.Error(), "column 7") {
		t.Errorf("Quantize with Inf: %v", err)
	}
}

func TestSliceRowsAndBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	w := randMatrix(r, 10, 64)
	m, err := Quantize(w, 10, 64, 4, 32, BF16)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Bytes(), int64(10*32+2*10*2*2); got != want {
		t.Errorf("Bytes = %d, want %d", got, want)
	}
	s := m.SliceRows(3, 7)
	full := m.Dequantize()
	part := s.Dequantize()
	if s.Rows != 4 || fmt.Sprint(part) != fmt.Sprint(full[3*64:7*64]) {
		t.Error("SliceRows rows differ")
	}
}
