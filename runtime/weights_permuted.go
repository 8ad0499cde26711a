package runtime

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// PermutedMatrix is Matrix with its rows reordered: row i of the tensor is
// row dst[i] of the result (dst a permutation of [0, rows)). The result
// lies in memory the model owns: its place in the arena, reordered there
// through a temporary copy, or else a fresh copy (a TensorSource's own
// bytes are never written). An architecture uses it to undo a checkpoint's
// interleaved fused projection once, at load, where it would otherwise
// gather each product's output (qwen3_next's in_proj_qkvz).
func (b *Weights) PermutedMatrix(module string, rows, cols int, dst []int32) (mlxq.Matrix, error) {
	if err := checkPermutation(dst, rows); err != nil {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s.weight: %w", module, err)
	}
	m, err := b.Matrix(module, rows, cols)
	if err != nil || b.sizing() {
		return m, err
	}
	inPlace := b.arena != nil
	out := m
	out.Weight = permuteRows(m.Weight, m.RowBytes(), dst, inPlace)
	if m.Quantized() {
		gb := m.Groups() * m.Type.Size()
		out.Scales = permuteRows(m.Scales, gb, dst, inPlace)
		out.Biases = permuteRows(m.Biases, gb, dst, inPlace)
	}
	return out, nil
}

// checkPermutation checks that dst is a permutation of [0, n).
func checkPermutation(dst []int32, n int) error {
	if len(dst) != n {
		return fmt.Errorf("a row order of %d entries for %d rows", len(dst), n)
	}
	seen := make([]bool, n)
	for i, d := range dst {
		if d < 0 || int(d) >= n || seen[d] {
			return fmt.Errorf("row order entry %d (%d) is out of range or repeated", i, d)
		}
		seen[d] = true
	}
	return nil
}

// permuteRows moves row i of buf (rows of rb bytes) to row dst[i]: in buf
// itself when inPlace, else into a new slice.
func permuteRows(buf []byte, rb int, dst []int32, inPlace bool) []byte {
	tmp := make([]byte, len(buf))
	for i, d := range dst {
		copy(tmp[int(d)*rb:(int(d)+1)*rb], buf[i*rb:(i+1)*rb])
	}
	if !inPlace {
		return tmp
	}
	copy(buf, tmp)
	return buf
}
