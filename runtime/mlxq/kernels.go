package mlxq

//go:generate go run asm_gen_neon.go

import (
	"encoding/binary"
	"math"
)

// Portable row kernels. Each quantized kernel returns
//
//	sum_g ( s[g] * sum_{i in g} q_i x_i  +  b[g] * xs[g] )
//
// which equals sum_i (s q_i + b) x_i, with xs[g] = sum_{i in g} x_i
// precomputed once per call. Accumulation is float32 in several independent
// accumulators.

// nibbles[c] holds the two 4-bit codes of byte c as float32: low, high.
var nibbles = func() (t [256][2]float32) {
	for c := range t {
		t[c] = [2]float32{float32(c & 15), float32(c >> 4)}
	}
	return t
}()

// q4DotGo: 4 bits, x in natural order. Byte j of a group holds element 2j in
// its low nibble and 2j+1 in its high nibble.
func q4DotGo(row []byte, x, s, b, xs []float32, group int) float32 {
	gb := group / 2
	var acc float32
	for g := range s {
		w := row[g*gb : (g+1)*gb]
		xg := x[g*group : (g+1)*group]
		var a0, a1, a2, a3 float32
		for len(w) >= 4 && len(xg) >= 8 {
			xx := (*[8]float32)(xg)
			t0, t1, t2, t3 := &nibbles[w[0]], &nibbles[w[1]], &nibbles[w[2]], &nibbles[w[3]]
			a0 += t0[0]*xx[0] + t0[1]*xx[1]
			a1 += t1[0]*xx[2] + t1[1]*xx[3]
			a2 += t2[0]*xx[4] + t2[1]*xx[5]
			a3 += t3[0]*xx[6] + t3[1]*xx[7]
			w, xg = w[4:], xg[8:]
		}
		acc += s[g]*((a0+a1)+(a2+a3)) + b[g]*xs[g]
	}
	return acc
}

// q8DotGo: 8 bits, one byte per element.
func q8DotGo(row []byte, x, s, b, xs []float32, group int) float32 {
	var acc float32
	for g := range s {
		w := row[g*group : (g+1)*group]
		xg := x[g*group : (g+1)*group]
		var a0, a1, a2, a3 float32
		for k := 0; k+8 <= len(w) && k+8 <= len(xg); k += 8 {
			v := binary.LittleEndian.Uint64(w[k:])
			xx := (*[8]float32)(xg[k:])
			a0 += float32(v&255)*xx[0] + float32(v>>8&255)*xx[1]
			a1 += float32(v>>16&255)*xx[2] + float32(v>>24&255)*xx[3]
			a2 += float32(v>>32&255)*xx[4] + float32(v>>40&255)*xx[5]
			a3 += float32(v>>48&255)*xx[6] + float32(v>>56)*xx[7]
		}
		acc += s[g]*((a0+a1)+(a2+a3)) + b[g]*xs[g]
	}
	return acc
}

// qDotGo: any width. Every 8 elements take exactly `bits` bytes, starting on
// a byte boundary; they are read as one little-endian word. w starts at the
// row and runs to the end of the matrix data, so an 8-byte load is used
// wherever it stays inside w, and the tail is assembled byte by byte.
func qDotGo(w []byte, x, s, b, xs []float32, group, bits int) float32 {
	mask := uint64(1)<<bits - 1
	sh := uint(bits)
	var acc float32
	off := 0
	for g := range s {
		xg := x[g*group : (g+1)*group]
		var a0, a1 float32
		for k := 0; k+8 <= len(xg); k += 8 {
			var v uint64
			if off+8 <= len(w) {
				v = binary.LittleEndian.Uint64(w[off:])
			} else {
				for j := 0; j < bits; j++ {
					v |= uint64(w[off+j]) << (8 * j)
				}
			}
			off += bits
			xx := (*[8]float32)(xg[k:])
			// (shift & 63) tells the compiler the shifts are in range.
			a0 += float32(v&mask)*xx[0] + float32(v>>(sh&63)&mask)*xx[1]
			a1 += float32(v>>(2*sh&63)&mask)*xx[2] + float32(v>>(3*sh&63)&mask)*xx[3]
			a0 += float32(v>>(4*sh&63)&mask)*xx[4] + float32(v>>(5*sh&63)&mask)*xx[5]
			a1 += float32(v>>(6*sh&63)&mask)*xx[6] + float32(v>>(7*sh&63)&mask)*xx[7]
		}
		acc += s[g]*(a0+a1) + b[g]*xs[g]
	}
	return acc
}

// denseDotGo returns sum_i w_i x_i for a row of type t.
func denseDotGo(t Float, w []byte, x []float32) float32 {
	switch t {
	case F32:
		return dotF32Go(w, x)
	case BF16:
		return dotBF16Go(w, x)
	}
	return dotF16Go(w, x)
}

func dotF32Go(w []byte, x []float32) float32 {
	var a0, a1, a2, a3 float32
	n := min(len(x), len(w)/4)
	i := 0
	for ; i+4 <= n; i += 4 {
		ww := w[4*i : 4*i+16]
		a0 += math.Float32frombits(binary.LittleEndian.Uint32(ww[0:])) * x[i]
		a1 += math.Float32frombits(binary.LittleEndian.Uint32(ww[4:])) * x[i+1]
		a2 += math.Float32frombits(binary.LittleEndian.Uint32(ww[8:])) * x[i+2]
		a3 += math.Float32frombits(binary.LittleEndian.Uint32(ww[12:])) * x[i+3]
	}
	for ; i < n; i++ {
		a0 += math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:])) * x[i]
	}
	return (a0 + a1) + (a2 + a3)
}

func dotBF16Go(w []byte, x []float32) float32 {
	var a0, a1, a2, a3 float32
	n := min(len(x), len(w)/2)
	i := 0
	for ; i+4 <= n; i += 4 {
		v := binary.LittleEndian.Uint64(w[2*i:])
		xx := (*[4]float32)(x[i:])
		a0 += math.Float32frombits(uint32(v)<<16) * xx[0]
		a1 += math.Float32frombits(uint32(v>>16)<<16) * xx[1]
		a2 += math.Float32frombits(uint32(v>>32)<<16) * xx[2]
		a3 += math.Float32frombits(uint32(v>>48)<<16) * xx[3]
	}
	for ; i < n; i++ {
		a0 += BF16ToF32(binary.LittleEndian.Uint16(w[2*i:])) * x[i]
	}
	return (a0 + a1) + (a2 + a3)
}

func dotF16Go(w []byte, x []float32) float32 {
	t := f16Tab()[:1<<16]
	var a0, a1, a2, a3 float32
	n := min(len(x), len(w)/2)
	i := 0
	for ; i+4 <= n; i += 4 {
		v := binary.LittleEndian.Uint64(w[2*i:])
		xx := (*[4]float32)(x[i:])
		a0 += t[uint16(v)] * xx[0]
		a1 += t[uint16(v>>16)] * xx[1]
		a2 += t[uint16(v>>32)] * xx[2]
		a3 += t[uint16(v>>48)] * xx[3]
	}
	for ; i < n; i++ {
		a0 += t[binary.LittleEndian.Uint16(w[2*i:])] * x[i]
	}
	return (a0 + a1) + (a2 + a3)
}
