package mlxq

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzNewQuantized feeds arbitrary shapes, parameters and bytes to
// NewQuantized. Mismatched inputs must be rejected with an error; accepted
// ones must be usable by every method without panicking, and MatVec must
// agree with a dot product over Row when the scales and biases are tame.
func FuzzNewQuantized(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, rows, cols, bits, group int, typ uint8, split1, split2 uint16, fit bool) {
		ft := Float(typ % 4) // 3 is invalid
		var w, s, b []byte
		if fit && rows >= 1 && rows <= 8 && cols >= 1 && cols <= 512 && ValidParams(bits, group) == nil &&
			ft.valid() && cols%group == 0 && len(data) > 0 {
			// Exactly sized slices filled cyclically from data, at odd offsets.
			cyc := func(n, off int) []byte {
				buf := make([]byte, n+off)
				for i := range buf {
					buf[i] = data[i%len(data)]
				}
				return buf[off:]
			}
			nsb := rows * (cols / group) * ft.Size()
			w, s, b = cyc(rows*cols*bits/8, 1), cyc(nsb, 2), cyc(nsb, 3)
		} else {
			a := min(int(split1), len(data))
			c := min(max(int(split2), a), len(data))
			w, s, b = data[:a], data[a:c], data[c:]
		}
		m, err := NewQuantized(rows, cols, bits, group, ft, w, s, b)
		if err != nil {
			if m.Rows != 0 || m.Weight != nil {
				t.Fatal("error with a non-zero Matrix")
			}
			return
		}
		x := make([]float32, cols)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		y := make([]float32, rows)
		m.MatVec(y, x)
		Y := make([]float32, 2*rows)
		m.MatMul(Y, append(append([]float32{}, x...), x...), 2)
		row := make([]float32, cols)
		d := m.Dequantize()
		tame := true
		for i := 0; i < rows*(cols/group); i++ {
			for _, v := range []float32{ft.load(s, i), ft.load(b, i)} {
				if !(math.Abs(float64(v)) < 1e6) {
					tame = false
				}
			}
		}
		for r := 0; r < rows; r++ {
			m.Row(row, r)
			var ref, mag float64
			for i, v := range row {
				if v != d[r*cols+i] && !math.IsNaN(float64(v)) {
					t.Fatalf("Row and Dequantize differ at [%d,%d]", r, i)
				}
				ref += float64(v) * float64(x[i])
				mag += math.Abs(float64(v) * float64(x[i]))
			}
			if tame && math.Abs(float64(y[r])-ref) > 1e-4*mag+1e-3 {
				t.Fatalf("row %d: MatVec %v, Row dot %v", r, y[r], ref)
			}
			if tame && y[r] != Y[rows+r] {
				// Two vectors take the one-vector kernel: same numbers.
				t.Fatalf("row %d: MatMul %v, MatVec %v", r, Y[rows+r], y[r])
			}
		}
	})
}

// FuzzRoundTrip quantizes arbitrary finite values and checks the
// dequantization error bound of TestRoundTrip.
func FuzzRoundTrip(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, bits, groupSel, typ uint8) {
		bitsList := []int{2, 3, 4, 5, 6, 8}
		groups := []int{32, 64, 128}
		nbits := bitsList[int(bits)%len(bitsList)]
		group := groups[int(groupSel)%len(groups)]
		ft := Float(typ % 3)
		limit := 1e30
		if ft == F16 {
			limit = 1000 // keep scales and biases inside the half range
		}
		n := len(data) / 4
		if n < group {
			return
		}
		cols := group
		rows := min(n/group, 4)
		w := make([]float32, rows*cols)
		for i := range w {
			v := math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || math.Abs(float64(v)) > limit {
				v = 0
			}
			w[i] = v
		}
		if _, err := checkRoundTrip(w, rows, cols, nbits, group, ft); err != nil {
			t.Fatal(err)
		}
	})
}
