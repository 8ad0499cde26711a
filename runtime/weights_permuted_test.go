package runtime

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// permSource is a TensorSource of one 4-bit [6, 64] matrix "m" (groups of
// 32, bf16 scales and biases) whose row r holds values r·100 + column.
func permSource(t *testing.T) (MapTensors, mlxq.Matrix) {
	t.Helper()
	const rows, cols = 6, 64
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(i/cols*100 + i%cols)
	}
	m, err := mlxq.Quantize(w, rows, cols, 4, 32, mlxq.BF16)
	if err != nil {
		t.Fatal(err)
	}
	words := make([]byte, len(m.Weight))
	copy(words, m.Weight)
	return MapTensors{
		"m.weight": {DType: "U32", Shape: []int64{rows, cols * 4 / 32}, Data: words},
		"m.scales": {DType: "BF16", Shape: []int64{rows, cols / 32}, Data: slices.Clone(m.Scales)},
		"m.biases": {DType: "BF16", Shape: []int64{rows, cols / 32}, Data: slices.Clone(m.Biases)},
	}, m
}

// TestPermutedMatrix: row i of the tensor is row dst[i] of the result, from
// the Go heap (the source's bytes untouched) and from an arena (reordered
// in place), and a bad row order is refused naming the tensor.
func TestPermutedMatrix(t *testing.T) {
	dst := []int32{3, 0, 5, 1, 4, 2}
	cfg := &Config{}
	cfg.Quant.Present, cfg.Quant.Global = true, QuantParams{Bits: 4, GroupSize: 32}
	for _, arena := range []bool{false, true} {
		src, want := permSource(t)
		before := map[string][]byte{}
		for n, d := range src {
			before[n] = slices.Clone(d.Data)
		}
		b := &Weights{cfg: cfg, src: src}
		if arena {
			plan := &Weights{cfg: cfg, src: src, arena: &denseArena{}}
			if m, err := plan.PermutedMatrix("m", 6, 64, dst); err != nil || m.Rows != 0 {
				t.Fatalf("sizing pass: %+v, %v", m, err)
			}
			b.arena = &denseArena{mem: make([]byte, plan.arena.off)}
		}
		got, err := b.PermutedMatrix("m", 6, 64, dst)
		if err != nil {
			t.Fatal(err)
		}
		row, wantRow := make([]float32, 64), make([]float32, 64)
		for i, d := range dst {
			want.Row(wantRow, i)
			got.Row(row, int(d))
			if !slices.Equal(row, wantRow) {
				t.Errorf("arena %v: result row %d is not source row %d", arena, d, i)
			}
			if math.Abs(float64(row[1]-float32(i*100+1))) > 4 {
				t.Errorf("arena %v: result row %d starts %v, want about %d", arena, d, row[:2], i*100)
			}
		}
		for n, d := range src {
			if !bytes.Equal(d.Data, before[n]) {
				t.Errorf("arena %v: the source's %s was written", arena, n)
			}
		}
		if arena && len(b.arena.mem) > 0 && &got.Weight[0] != &b.arena.mem[0] {
			t.Errorf("the result is not the arena's memory")
		}
	}
	src, _ := permSource(t)
	b := &Weights{cfg: cfg, src: src}
	for _, bad := range [][]int32{{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 4}, {0, 1, 2, 3, 4, 6}, {-1, 1, 2, 3, 4, 5}} {
		if _, err := b.PermutedMatrix("m", 6, 64, bad); err == nil || !strings.Contains(err.Error(), "tensor m.weight") {
			t.Errorf("row order %v: error %v, want one naming tensor m.weight", bad, err)
		}
	}
}
