package mlxq

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// Float is a floating-point storage type: the element type of a dense matrix,
// or the type of the scales and biases of a quantized one.
type Float int

const (
	F32 Float = iota
	F16
	BF16
)

// FloatFromDType maps a safetensors dtype name ("F32", "F16", "BF16") to a Float.
func FloatFromDType(dtype string) (Float, error) {
	switch dtype {
	case "F32":
		return F32, nil
	case "F16":
		return F16, nil
	case "BF16":
		return BF16, nil
	}
	return 0, fmt.Errorf("mlxq: unsupported float dtype %q (want F32, F16 or BF16)", dtype)
}

// Size is the number of bytes of one element (0 for an invalid Float).
func (f Float) Size() int {
	switch f {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// String returns the safetensors dtype name.
func (f Float) String() string {
	switch f {
	case F32:
		return "F32"
	case F16:
		return "F16"
	case BF16:
		return "BF16"
	}
	return fmt.Sprintf("Float(%d)", int(f))
}

func (f Float) valid() bool { return f == F32 || f == F16 || f == BF16 }

// BF16ToF32 widens a bfloat16 bit pattern to float32 (exact).
func BF16ToF32(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

// F32ToBF16 narrows a float32 to bfloat16, rounding to nearest, ties to even.
// Overflow gives ±Inf; NaN stays NaN (quieted, sign kept).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 widens an IEEE half-precision bit pattern to float32 (exact,
// subnormals included).
func F16ToF32(u uint16) float32 {
	sign := uint32(u&0x8000) << 16
	exp := uint32(u>>10) & 0x1f
	mant := uint32(u & 0x3ff)
	switch exp {
	case 0:
		// zero or subnormal: mant * 2^-24, exactly representable in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(math.Float32bits(v) | sign)
	case 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 narrows a float32 to IEEE half precision, rounding to nearest,
// ties to even, producing subnormals and ±Inf on overflow. NaN stays NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7fffffff
	if a >= 0x7f800000 {
		if a == 0x7f800000 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(a>>13)&0x3ff // quiet NaN, top payload kept
	}
	e := int(a>>23) - 127
	if e >= -14 {
		if e > 15 {
			return sign | 0x7c00
		}
		h := uint32(e+15)<<10 | (a>>13)&0x3ff
		rest := a & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++ // a carry into the exponent is right, up to 0x7c00 = Inf
		}
		return sign | uint16(h)
	}
	// Subnormal result: value = m * 2^(e-23) with m the 24-bit significand;
	// in units of 2^-24 that is m >> sh with sh = -(e+1) >= 14.
	sh := uint(-(e + 1))
	if sh > 24 {
		return sign // below half the smallest subnormal
	}
	m := a&0x7fffff | 0x800000
	q := m >> sh
	rest := m & (1<<sh - 1)
	half := uint32(1) << (sh - 1)
	if rest > half || (rest == half && q&1 == 1) {
		q++
	}
	return sign | uint16(q)
}

var (
	f16TableOnce sync.Once
	f16Table     []float32
)

// f16Tab returns a 65536-entry table of all half values as float32.
func f16Tab() []float32 {
	f16TableOnce.Do(func() {
		t := make([]float32, 1<<16)
		for i := range t {
			t[i] = F16ToF32(uint16(i))
		}
		f16Table = t
	})
	return f16Table
}

// DecodeFloats decodes len(dst) little-endian values of type f from src into
// dst. It panics if src holds fewer than len(dst)*f.Size() bytes or f is not
// a valid Float (a programming error, not a data error).
func DecodeFloats(dst []float32, src []byte, f Float) {
	n := len(dst)
	if !f.valid() {
		panic(fmt.Sprintf("mlxq: DecodeFloats: invalid Float %d", int(f)))
	}
	if len(src) < n*f.Size() {
		panic(fmt.Sprintf("mlxq: DecodeFloats: %d bytes of %v for %d values", len(src), f, n))
	}
	switch f {
	case F32:
		src = src[:4*n]
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case BF16:
		src = src[:2*n]
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	case F16:
		t := f16Tab()[:1<<16]
		src = src[:2*n]
		for i := range dst {
			dst[i] = t[binary.LittleEndian.Uint16(src[2*i:])]
		}
	}
}

// EncodeFloats encodes src into dst as little-endian values of type f,
// rounding to nearest even. It panics if dst is shorter than len(src)*f.Size().
func EncodeFloats(dst []byte, src []float32, f Float) {
	if !f.valid() {
		panic(fmt.Sprintf("mlxq: EncodeFloats: invalid Float %d", int(f)))
	}
	if len(dst) < len(src)*f.Size() {
		panic(fmt.Sprintf("mlxq: EncodeFloats: %d bytes for %d values of %v", len(dst), len(src), f))
	}
	for i, v := range src {
		switch f {
		case F32:
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		case BF16:
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		case F16:
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
	}
}

// round rounds v to the Float type's precision and back.
func (f Float) round(v float32) float32 {
	switch f {
	case BF16:
		return BF16ToF32(F32ToBF16(v))
	case F16:
		return F16ToF32(F32ToF16(v))
	}
	return v
}

// load reads element i of a little-endian array of type f.
func (f Float) load(b []byte, i int) float32 {
	switch f {
	case F32:
		return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	case BF16:
		return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
	default:
		return F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
	}
}
