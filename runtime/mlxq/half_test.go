package mlxq

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestBF16Known(t *testing.T) {
	cases := []struct {
		f32  uint32
		bf16 uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0xbf800000, 0xbf80}, // -1
		{0x00000000, 0x0000},
		{0x80000000, 0x8000},
		{0x3f808000, 0x3f80}, // exact tie, even stays
		{0x3f818000, 0x3f82}, // exact tie, odd rounds up
		{0x3f808001, 0x3f81}, // just above the tie
		{0x3f807fff, 0x3f80}, // just below the tie
		{0x7f7fffff, 0x7f80}, // max float rounds to +Inf
		{0x7f800000, 0x7f80}, // +Inf
		{0xff800000, 0xff80}, // -Inf
		{0x00000001, 0x0000}, // tiny subnormal
		{0x3eaaaaab, 0x3eab}, // 1/3
	}
	for _, c := range cases {
		if got := F32ToBF16(math.Float32frombits(c.f32)); got != c.bf16 {
			t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", c.f32, got, c.bf16)
		}
	}
	if v := BF16ToF32(0x3f80); v != 1 {
		t.Errorf("BF16ToF32(0x3f80) = %v", v)
	}
	if v := BF16ToF32(0xc170); v != -15 {
		t.Errorf("BF16ToF32(0xc170) = %v", v)
	}
	for _, nan := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7fffffff} {
		got := F32ToBF16(math.Float32frombits(nan))
		if !math.IsNaN(float64(BF16ToF32(got))) {
			t.Errorf("NaN %#08x became %#04x", nan, got)
		}
		if got>>15 != uint16(nan>>31) {
			t.Errorf("NaN %#08x lost its sign: %#04x", nan, got)
		}
	}
}

// bf16Ref rounds to bfloat16 by comparing distances in float64 to the two
// neighbouring bf16 values (independent of the bit trick in F32ToBF16).
func bf16Ref(f float32) uint16 {
	b := math.Float32bits(f)
	lo := uint16(b >> 16) // truncation towards zero
	hi := lo + 1          // next bf16 away from zero
	hv := float64(BF16ToF32(hi))
	if hi&0x7fff == 0x7f80 {
		// Above the largest finite bf16, rounding treats Inf as 2^128.
		hv = math.Copysign(math.Pow(2, 128), hv)
	}
	dl := math.Abs(float64(f) - float64(BF16ToF32(lo)))
	dh := math.Abs(float64(f) - hv)
	switch {
	case dl < dh:
		return lo
	case dh < dl:
		return hi
	}
	if lo&1 == 0 {
		return lo
	}
	return hi
}

func TestBF16Exhaustive(t *testing.T) {
	for u := 0; u < 1<<16; u++ {
		f := BF16ToF32(uint16(u))
		if math.IsNaN(float64(f)) {
			continue
		}
		if got := F32ToBF16(f); got != uint16(u) {
			t.Fatalf("bf16 %#04x round trip gave %#04x", u, got)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		b := r.Uint32()
		if b&0x7f800000 == 0x7f800000 {
			continue
		}
		f := math.Float32frombits(b)
		if got, want := F32ToBF16(f), bf16Ref(f); got != want {
			t.Fatalf("F32ToBF16(%#08x) = %#04x, want %#04x", b, got, want)
		}
	}
}

// f16Value is the value of a half bit pattern by the textbook formula.
func f16Value(u uint16) float64 {
	sign := 1.0
	if u&0x8000 != 0 {
		sign = -1
	}
	e := int(u>>10) & 31
	m := float64(u & 0x3ff)
	switch e {
	case 0:
		return sign * m * math.Pow(2, -24)
	case 31:
		if m == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

func TestF16Exhaustive(t *testing.T) {
	for u := 0; u < 1<<16; u++ {
		f := F16ToF32(uint16(u))
		want := f16Value(uint16(u))
		if math.IsNaN(want) {
			if !math.IsNaN(float64(f)) {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", u, f)
			}
			if back := F32ToF16(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x became %#04x", u, back)
			}
			continue
		}
		if float64(f) != want || math.Signbit(float64(f)) != (u&0x8000 != 0) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", u, f, want)
		}
		if back := F32ToF16(f); back != uint16(u) {
			t.Fatalf("f16 %#04x round trip gave %#04x", u, back)
		}
	}
}

// f16Ref rounds to half by searching the sorted list of non-negative finite
// halves for the nearest, ties to even, overflow to Inf per IEEE (anything
// at or above 65520 = max + half an ulp rounds to Inf).
func f16Ref(halves []uint16, f float32) uint16 {
	sign := uint16(0)
	v := float64(f)
	if math.Signbit(v) {
		sign = 0x8000
		v = -v
	}
	if v >= 65520 {
		return sign | 0x7c00
	}
	i := sort.Search(len(halves), func(i int) bool { return f16Value(halves[i]) >= v })
	if i < len(halves) && f16Value(halves[i]) == v {
		return sign | halves[i]
	}
	if i == len(halves) { // between the largest half and 65520
		return sign | 0x7bff
	}
	lo, hi := halves[i-1], halves[i]
	dl, dh := v-f16Value(lo), f16Value(hi)-v
	switch {
	case dl < dh:
		return sign | lo
	case dh < dl:
		return sign | hi
	}
	if lo&1 == 0 {
		return sign | lo
	}
	return sign | hi
}

func TestF16Rounding(t *testing.T) {
	var halves []uint16
	for u := 0; u < 0x7c00; u++ {
		halves = append(halves, uint16(u))
	}
	check := func(f float32) {
		t.Helper()
		if got, want := F32ToF16(f), f16Ref(halves, f); got != want {
			t.Fatalf("F32ToF16(%v = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
	specials := []float32{0, 65504, 65519.99, 65520, 65536, 1e10, 5.960464e-08, 2.9802322e-08, 2.9802326e-08,
		2.98023e-08, 6.097555e-05, 6.1035156e-05, 1 + 1.0/2048, 1 + 3.0/2048, 1.0 / 3, 1e-30}
	for _, f := range specials {
		check(f)
		check(-f)
	}
	// Exact ties between neighbouring halves, normal and subnormal.
	for u := 0; u < 0x7bff; u += 37 {
		mid := (f16Value(uint16(u)) + f16Value(uint16(u+1))) / 2
		check(float32(mid))
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100000; i++ {
		// Mostly within and around the half range.
		e := r.IntN(50) - 30
		f := float32((r.Float64()*2 - 1) * math.Pow(2, float64(e)))
		check(f)
	}
	if got := F32ToF16(float32(math.Inf(-1))); got != 0xfc00 {
		t.Errorf("-Inf -> %#04x", got)
	}
}

func TestDecodeFloatsMisaligned(t *testing.T) {
	vals := []float32{1, -2.5, 0.15625, 3e-5, -65504, 0.333}
	for _, f := range []Float{F32, F16, BF16} {
		buf := make([]byte, 3+len(vals)*f.Size())
		src := buf[3:]
		for i, v := range vals {
			switch f {
			case F32:
				binary.LittleEndian.PutUint32(src[4*i:], math.Float32bits(v))
			case F16:
				binary.LittleEndian.PutUint16(src[2*i:], F32ToF16(v))
			case BF16:
				binary.LittleEndian.PutUint16(src[2*i:], F32ToBF16(v))
			}
		}
		dst := make([]float32, len(vals))
		DecodeFloats(dst, src, f)
		for i, v := range vals {
			if dst[i] != f.round(v) {
				t.Errorf("%v: value %d = %v, want %v", f, i, dst[i], f.round(v))
			}
		}
		enc := make([]byte, len(src))
		EncodeFloats(enc, vals, f)
		if string(enc) != string(src) {
			t.Errorf("%v: EncodeFloats differs", f)
		}
	}
}

func TestFloatFromDType(t *testing.T) {
	for _, c := range []struct {
		s    string
		f    Float
		size int
	}{{"F32", F32, 4}, {"F16", F16, 2}, {"BF16", BF16, 2}} {
		f, err := FloatFromDType(c.s)
		if err != nil || f != c.f || f.Size() != c.size || f.String() != c.s {
			t.Errorf("%s: got %v %v size %d", c.s, f, err, f.Size())
		}
	}
	for _, s := range []string{"F64", "U32", "bf16", ""} {
		if _, err := FloatFromDType(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}
