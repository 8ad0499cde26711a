package mlxq

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Bounds on matrix dimensions. They keep every size computation far from
// integer overflow; real tensors are orders of magnitude smaller.
const (
	maxDim   = 1 << 30
	maxElems = 1 << 40
)

// ValidParams reports whether MLX affine quantization supports bits and group.
func ValidParams(bits, group int) error {
	switch bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return fmt.Errorf("mlxq: unsupported bits %d (want 2, 3, 4, 5, 6 or 8)", bits)
	}
	switch group {
	case 32, 64, 128:
	default:
		return fmt.Errorf("mlxq: unsupported group size %d (want 32, 64 or 128)", group)
	}
	return nil
}

// Matrix is a weight matrix [Rows, Cols] used as y = W x. It is quantized
// (MLX affine) if Bits > 0, else dense with elements of Type.
//
// Quantized layout: row r occupies Cols*Bits/8 bytes of Weight starting at
// r*Cols*Bits/8; within the row, element i is bits [i*Bits, (i+1)*Bits) of a
// little-endian, LSB-first bit stream (equivalently, of the row's
// little-endian uint32 words). Scales and Biases hold Rows*(Cols/GroupSize)
// little-endian values of Type, row-major; element i of row r dequantizes to
// s*q + b with s, b those of group i/GroupSize of row r.
//
// The byte slices may have any alignment (they often point into a file
// mapping); they are only read.
type Matrix struct {
	Rows, Cols      int
	Bits, GroupSize int   // 0 for dense
	Type            Float // element type for dense; scale/bias type for quantized
	Weight          []byte
	Scales, Biases  []byte
}

func checkDims(rows, cols int) error {
	if rows < 1 || cols < 1 || rows > maxDim || cols > maxDim || int64(rows)*int64(cols) > maxElems {
		return fmt.Errorf("mlxq: bad matrix shape [%d, %d]", rows, cols)
	}
	return nil
}

// NewQuantized builds a quantized Matrix, checking the parameters and that
// every slice has exactly the length the shape implies.
func NewQuantized(rows, cols, bits, group int, t Float, weight, scales, biases []byte) (Matrix, error) {
	if err := ValidParams(bits, group); err != nil {
		return Matrix{}, err
	}
	if !t.valid() {
		return Matrix{}, fmt.Errorf("mlxq: invalid scale type %d", int(t))
	}
	if err := checkDims(rows, cols); err != nil {
		return Matrix{}, err
	}
	if cols%group != 0 {
		return Matrix{}, fmt.Errorf("mlxq: %d columns is not a multiple of group size %d", cols, group)
	}
	m := Matrix{Rows: rows, Cols: cols, Bits: bits, GroupSize: group, Type: t,
		Weight: weight, Scales: scales, Biases: biases}
	if want := int64(rows) * int64(m.RowBytes()); int64(len(weight)) != want {
		return Matrix{}, fmt.Errorf("mlxq: weight is %d bytes, want %d for [%d, %d] at %d bits", len(weight), want, rows, cols, bits)
	}
	want := int64(rows) * int64(cols/group) * int64(t.Size())
	if int64(len(scales)) != want {
		return Matrix{}, fmt.Errorf("mlxq: scales are %d bytes, want %d for [%d, %d] %v group %d", len(scales), want, rows, cols, t, group)
	}
	if int64(len(biases)) != want {
		return Matrix{}, fmt.Errorf("mlxq: biases are %d bytes, want %d for [%d, %d] %v group %d", len(biases), want, rows, cols, t, group)
	}
	return m, nil
}

// NewDense builds a dense Matrix of element type t over data (row-major,
// little-endian), checking that data has exactly rows*cols elements.
func NewDense(rows, cols int, t Float, data []byte) (Matrix, error) {
	if !t.valid() {
		return Matrix{}, fmt.Errorf("mlxq: invalid element type %d", int(t))
	}
	if err := checkDims(rows, cols); err != nil {
		return Matrix{}, err
	}
	if want := int64(rows) * int64(cols) * int64(t.Size()); int64(len(data)) != want {
		return Matrix{}, fmt.Errorf("mlxq: dense data is %d bytes, want %d for [%d, %d] %v", len(data), want, rows, cols, t)
	}
	return Matrix{Rows: rows, Cols: cols, Type: t, Weight: data}, nil
}

// Quantized reports whether m is quantized.
func (m Matrix) Quantized() bool { return m.Bits > 0 }

// Groups is the number of quantization groups per row (0 for dense).
func (m Matrix) Groups() int {
	if m.Bits == 0 {
		return 0
	}
	return m.Cols / m.GroupSize
}

// RowBytes is the number of Weight bytes per row.
func (m Matrix) RowBytes() int {
	if m.Bits > 0 {
		return m.Cols * m.Bits / 8
	}
	return m.Cols * m.Type.Size()
}

// Bytes is the total size of Weight, Scales and Biases.
func (m Matrix) Bytes() int64 {
	return int64(len(m.Weight)) + int64(len(m.Scales)) + int64(len(m.Biases))
}

// SliceRows returns rows [r0, r1) as a Matrix sharing m's memory.
func (m Matrix) SliceRows(r0, r1 int) Matrix {
	if r0 < 0 || r1 > m.Rows || r0 >= r1 {
		panic(fmt.Sprintf("mlxq: SliceRows(%d, %d) of %d rows", r0, r1, m.Rows))
	}
	s := m
	s.Rows = r1 - r0
	rb := m.RowBytes()
	s.Weight = m.Weight[r0*rb : r1*rb]
	if m.Bits > 0 {
		gb := m.Groups() * m.Type.Size()
		s.Scales = m.Scales[r0*gb : r1*gb]
		s.Biases = m.Biases[r0*gb : r1*gb]
	}
	return s
}

// Quantize quantizes w ([rows, cols], row-major) exactly as MLX's CPU
// mx.quantize does in affine mode, storing scales and biases as t.
//
// What MLX does (mlx/backend/cpu/quantized.cpp, quantize<T,U>), per group of
// `group` consecutive elements of a row, all in float32:
//
//	n_bins = 2^bits - 1; w_min, w_max over the group
//	mask  = |w_min| > |w_max|
//	scale = max((w_max - w_min) / n_bins, 1e-7); scale = mask ? scale : -scale
//	edge  = mask ? w_min : w_max
//	q0    = rint(edge / scale)           // rint: round half to even
//	bias  = 0; if q0 != 0 { scale = edge / q0; bias = edge }
//	q_i   = clamp(rint((w_i - bias) / scale), 0, n_bins)
//	scales[g] = T(scale); biases[g] = T(bias)
//
// The q_i are computed from the float32 scale and bias, before these are cast
// to the storage type T: the cast happens only when they are stored, after the
// packing loop. We do the same. MLX's scale type is its input dtype; to
// reproduce MLX bit for bit, pass values representable in t (e.g. already
// rounded to bf16 when t is BF16).
//
// Non-finite inputs are rejected (MLX's result for them is undefined).
func Quantize(w []float32, rows, cols, bits, group int, t Float) (Matrix, error) {
	if err := ValidParams(bits, group); err != nil {
		return Matrix{}, err
	}
	if !t.valid() {
		return Matrix{}, fmt.Errorf("mlxq: invalid scale type %d", int(t))
	}
	if err := checkDims(rows, cols); err != nil {
		return Matrix{}, err
	}
	if cols%group != 0 {
		return Matrix{}, fmt.Errorf("mlxq: %d columns is not a multiple of group size %d", cols, group)
	}
	if int64(len(w)) != int64(rows)*int64(cols) {
		return Matrix{}, fmt.Errorf("mlxq: %d values for a [%d, %d] matrix", len(w), rows, cols)
	}
	for i, v := range w {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return Matrix{}, fmt.Errorf("mlxq: non-finite value %v at row %d column %d", v, i/cols, i%cols)
		}
	}
	rb := cols * bits / 8
	ng := cols / group
	ts := t.Size()
	m := Matrix{Rows: rows, Cols: cols, Bits: bits, GroupSize: group, Type: t,
		Weight: make([]byte, rows*rb),
		Scales: make([]byte, rows*ng*ts),
		Biases: make([]byte, rows*ng*ts),
	}
	q := make([]uint8, group)
	for r := 0; r < rows; r++ {
		row := m.Weight[r*rb : (r+1)*rb]
		for g := 0; g < ng; g++ {
			s, b := quantizeGroup(q, w[r*cols+g*group:r*cols+(g+1)*group], bits)
			for k, v := range q {
				putBits(row, g*group+k, bits, v)
			}
			gi := r*ng + g
			storeFloat(m.Scales, gi, t, s)
			storeFloat(m.Biases, gi, t, b)
		}
	}
	return m, nil
}

// quantizeGroup quantizes one group into q (len(q) == len(x)) and returns the
// float32 scale and bias, following MLX's CPU algorithm (see Quantize).
func quantizeGroup(q []uint8, x []float32, bits int) (scale, bias float32) {
	nBins := float32(int(1)<<bits - 1)
	const eps = float32(1e-7)
	wMin := float32(math.Inf(1))
	wMax := float32(math.Inf(-1))
	for _, v := range x {
		wMax = max(wMax, v)
		wMin = min(wMin, v)
	}
	mask := abs32(wMin) > abs32(wMax)
	scale = max(float32(float32(wMax-wMin)/nBins), eps)
	edge := wMax
	if mask {
		edge = wMin
	} else {
		scale = -scale
	}
	q0 := rint32(float32(edge / scale))
	if q0 != 0 {
		scale = float32(edge / q0)
		bias = edge
	}
	for i, v := range x {
		e := rint32(float32(float32(v-bias) / scale))
		e = min(max(e, 0), nBins)
		q[i] = uint8(e)
	}
	return scale, bias
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// rint32 rounds to the nearest integer, ties to even (C's rint in the default
// rounding mode). Exact: float32 -> float64 -> float32 loses nothing.
func rint32(v float32) float32 { return float32(math.RoundToEven(float64(v))) }

func storeFloat(dst []byte, i int, t Float, v float32) {
	switch t {
	case F32:
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	case BF16:
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
	case F16:
		binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
	}
}

// putBits ORs the bits-wide value v into element i of the LSB-first bit
// stream row (which must be zero there).
func putBits(row []byte, i, bits int, v uint8) {
	pos := i * bits
	sh := uint(pos & 7)
	x := uint16(v) << sh
	row[pos>>3] |= byte(x)
	if int(sh)+bits > 8 {
		row[pos>>3+1] |= byte(x >> 8)
	}
}

// getBits reads element i of the LSB-first bit stream row. It never reads
// past the byte holding the element's last bit.
func getBits(row []byte, i, bits int) uint8 {
	pos := i * bits
	sh := uint(pos & 7)
	x := uint16(row[pos>>3])
	if int(sh)+bits > 8 {
		x |= uint16(row[pos>>3+1]) << 8
	}
	return uint8(x>>sh) & uint8(1<<bits-1)
}

// Unpack returns the quantized codes of row r (len Cols).
func (m Matrix) Unpack(r int) []uint8 {
	if m.Bits == 0 {
		panic("mlxq: Unpack of a dense matrix")
	}
	rb := m.RowBytes()
	row := m.Weight[r*rb : (r+1)*rb]
	q := make([]uint8, m.Cols)
	for i := range q {
		q[i] = getBits(row, i, m.Bits)
	}
	return q
}

// Row writes row r, dequantized (or decoded, for dense), into dst[:Cols].
func (m Matrix) Row(dst []float32, r int) {
	if r < 0 || r >= m.Rows {
		panic(fmt.Sprintf("mlxq: Row %d of %d", r, m.Rows))
	}
	if len(dst) < m.Cols {
		panic(fmt.Sprintf("mlxq: Row: dst has %d values, want %d", len(dst), m.Cols))
	}
	dst = dst[:m.Cols]
	rb := m.RowBytes()
	row := m.Weight[r*rb : (r+1)*rb]
	if m.Bits == 0 {
		DecodeFloats(dst, row, m.Type)
		return
	}
	ng := m.Groups()
	g := m.GroupSize
	for j := 0; j < ng; j++ {
		s := m.Type.load(m.Scales, r*ng+j)
		b := m.Type.load(m.Biases, r*ng+j)
		out := dst[j*g : (j+1)*g]
		switch m.Bits {
		case 4:
			src := row[j*g/2 : (j+1)*g/2]
			for k, v := range src {
				out[2*k] = float32(s*float32(v&15)) + b
				out[2*k+1] = float32(s*float32(v>>4)) + b
			}
		case 8:
			src := row[j*g : (j+1)*g]
			for k, v := range src {
				out[k] = float32(s*float32(v)) + b
			}
		default:
			for k := range out {
				out[k] = float32(s*float32(getBits(row, j*g+k, m.Bits))) + b
			}
		}
	}
}

// Dequantize returns the whole matrix as float32 (dequantized or decoded),
// row-major. Each element is s*q + b computed in float32 (the product
// rounded to float32 before the add, on every platform) from the stored s, b.
func (m Matrix) Dequantize() []float32 {
	out := make([]float32, m.Rows*m.Cols)
	for r := 0; r < m.Rows; r++ {
		m.Row(out[r*m.Cols:(r+1)*m.Cols], r)
	}
	return out
}
