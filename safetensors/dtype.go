package safetensors

import "fmt"

// DType is a safetensors element type, spelled as in the header ("F32",
// "BF16", ...).
type DType string

// The element types this package reads and writes. They cover every dtype
// that MLX and Hugging Face checkpoints use.
const (
	F64        DType = "F64"
	F32        DType = "F32"
	F16        DType = "F16"
	BF16       DType = "BF16"
	I64        DType = "I64"
	I32        DType = "I32"
	I16        DType = "I16"
	I8         DType = "I8"
	U64        DType = "U64"
	U32        DType = "U32"
	U16        DType = "U16"
	U8         DType = "U8"
	BOOL       DType = "BOOL"
	F8E4M3     DType = "F8_E4M3"
	F8E5M2     DType = "F8_E5M2"
	F8E8M0     DType = "F8_E8M0"     // unsigned power-of-two scale (MX formats)
	F8E4M3FNUZ DType = "F8_E4M3FNUZ" // AMD variant of F8_E4M3
	F8E5M2FNUZ DType = "F8_E5M2FNUZ" // AMD variant of F8_E5M2
	C64        DType = "C64"         // complex64: two F32
)

// Sub-byte element types that the safetensors format knows but that this
// package refuses: their byte length is not element count x a whole number
// of bytes, and no checkpoint we handle uses them.
const (
	F4     DType = "F4"
	F6E2M3 DType = "F6_E2M3"
	F6E3M2 DType = "F6_E3M2"
)

// Size returns the number of bytes per element, or 0 if d is unknown or a
// sub-byte type.
func (d DType) Size() int {
	switch d {
	case F64, I64, U64, C64:
		return 8
	case F32, I32, U32:
		return 4
	case F16, BF16, I16, U16:
		return 2
	case I8, U8, BOOL, F8E4M3, F8E5M2, F8E8M0, F8E4M3FNUZ, F8E5M2FNUZ:
		return 1
	}
	return 0
}

// subByteBits returns the element width in bits of a sub-byte type, or 0.
func (d DType) subByteBits() int {
	switch d {
	case F4:
		return 4
	case F6E2M3, F6E3M2:
		return 6
	}
	return 0
}

// ParseDType returns the DType spelled s, or an error saying why it is not
// usable (unknown, or a sub-byte type).
func ParseDType(s string) (DType, error) {
	d := DType(s)
	if d.Size() > 0 {
		return d, nil
	}
	if b := d.subByteBits(); b > 0 {
		return "", fmt.Errorf("dtype %s is a sub-byte type (%d bits per element), not supported", s, b)
	}
	return "", fmt.Errorf("unknown dtype %s", quoteTrunc(s))
}
