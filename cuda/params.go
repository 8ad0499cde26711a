package cuda

import (
	"encoding/binary"
	"math"
)

// params is a kernel's by-value parameter struct, written field by field in
// declaration order (64-bit device addresses first, then 32-bit fields, as
// the structs in kernels/*.cu are laid out; each has a static_assert on its
// size and the host checks the size it wrote against it).
type params []byte

func (p params) ptr(v devptr) params { return binary.LittleEndian.AppendUint64(p, v) }

// u32 appends an unsigned field; callers have bounded v (dims below 2^31).
func (p params) u32(v int) params {
	if v < 0 || v > math.MaxUint32 {
		panic("cuda: parameter out of range")
	}
	return binary.LittleEndian.AppendUint32(p, uint32(v))
}

func (p params) f32(v float32) params {
	return binary.LittleEndian.AppendUint32(p, math.Float32bits(v))
}

// Sizes of the parameter structs (the static_asserts in kernels/*.cu).
const (
	sizeQGemv    = 64
	sizeQGemvSet = 192
	sizeRowNorm  = 40
	sizeElem     = 32
)
