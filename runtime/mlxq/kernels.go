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

// byteF[c] is float32(c): a table load is cheaper than a conversion on
// most CPUs (on amd64, uint64 to float conversion takes a branch).
var byteF = func() (t [256]float32) {
	for c := range t {
		t[c] = float32(c)
	}
	return t
}()

// q8DotGo: 8 bits, one byte per element.
func q8DotGo(row []byte, x, s, b, xs []float32, group int) float32 {
	t := &byteF
	var acc float32
	for g := range s {
		w := row[g*group : (g+1)*group]
		xg := x[g*group : (g+1)*group]
		var a0, a1, a2, a3 float32
		for len(w) >= 8 && len(xg) >= 8 {
			v := binary.LittleEndian.Uint64(w)
			xx := (*[8]float32)(xg)
			a0 += t[v&255]*xx[0] + t[v>>8&255]*xx[1]
			a1 += t[v>>16&255]*xx[2] + t[v>>24&255]*xx[3]
			a2 += t[v>>32&255]*xx[4] + t[v>>40&255]*xx[5]
			a3 += t[v>>48&255]*xx[6] + t[v>>56]*xx[7]
			w, xg = w[8:], xg[8:]
		}
		acc += s[g]*((a0+a1)+(a2+a3)) + b[g]*xs[g]
	}
	return acc
}

// qDotGo: 2, 3, 5 and 6 bits. w starts at the row and runs to the end of the
// matrix data (the kernels read 8 bytes at a time, up to 3 past the last
// element they use; see load64).
func qDotGo(w []byte, x, s, b, xs []float32, group, bits int) float32 {
	switch bits {
	case 2:
		return q2DotGo(w, x, s, b, xs, group)
	case 3:
		return q3DotGo(w, x, s, b, xs, group)
	case 5:
		return q5DotGo(w, x, s, b, xs, group)
	case 6:
		return q6DotGo(w, x, s, b, xs, group)
	}
	panic("mlxq: qDotGo: bad bit width")
}

// load64 returns the little-endian uint64 at w[off:], zero past the end of w.
func load64(w []byte, off int) uint64 {
	if off+8 <= len(w) {
		return binary.LittleEndian.Uint64(w[off:])
	}
	return load64Tail(w, off)
}

func load64Tail(w []byte, off int) uint64 {
	var v uint64
	for j := 0; j < 8 && off+j < len(w); j++ {
		v |= uint64(w[off+j]) << (8 * j)
	}
	return v
}

// q2DotGo: 2 bits, 32 elements (8 bytes) per 64-bit load.
func q2DotGo(w []byte, x, s, b, xs []float32, group int) float32 {
	t := &byteF
	var acc float32
	off := 0
	for g := range s {
		xg := x[g*group : (g+1)*group]
		var a0, a1, a2, a3 float32
		for len(xg) >= 32 {
			v := load64(w, off)
			xx := (*[32]float32)(xg)
			a0 += t[v&3]*xx[0] + t[v>>2&3]*xx[1]
			a1 += t[v>>4&3]*xx[2] + t[v>>6&3]*xx[3]
			a2 += t[v>>8&3]*xx[4] + t[v>>10&3]*xx[5]
			a3 += t[v>>12&3]*xx[6] + t[v>>14&3]*xx[7]
			a0 += t[v>>16&3]*xx[8] + t[v>>18&3]*xx[9]
			a1 += t[v>>20&3]*xx[10] + t[v>>22&3]*xx[11]
			a2 += t[v>>24&3]*xx[12] + t[v>>26&3]*xx[13]
			a3 += t[v>>28&3]*xx[14] + t[v>>30&3]*xx[15]
			a0 += t[v>>32&3]*xx[16] + t[v>>34&3]*xx[17]
			a1 += t[v>>36&3]*xx[18] + t[v>>38&3]*xx[19]
			a2 += t[v>>40&3]*xx[20] + t[v>>42&3]*xx[21]
			a3 += t[v>>44&3]*xx[22] + t[v>>46&3]*xx[23]
			a0 += t[v>>48&3]*xx[24] + t[v>>50&3]*xx[25]
			a1 += t[v>>52&3]*xx[26] + t[v>>54&3]*xx[27]
			a2 += t[v>>56&3]*xx[28] + t[v>>58&3]*xx[29]
			a3 += t[v>>60&3]*xx[30] + t[v>>62]*xx[31]
			off += 8
			xg = xg[32:]
		}
		acc += s[g]*((a0+a1)+(a2+a3)) + b[g]*xs[g]
	}
	return acc
}

// q3DotGo: 3 bits, 16 elements (6 bytes) per 64-bit load.
func q3DotGo(w []byte, x, s, b, xs []float32, group int) float32 {
	t := &byteF
	var acc float32
	off := 0
	for g := range s {
		xg := x[g*group : (g+1)*group]
		var a0, a1, a2, a3 float32
		for len(xg) >= 16 {
			v := load64(w, off)
			xx := (*[16]float32)(xg)
			a0 += t[v&7]*xx[0] + t[v>>3&7]*xx[1]
			a1 += t[v>>6&7]*xx[2] + t[v>>9&7]*xx[3]
			a2 += t[v>>12&7]*xx[4] + t[v>>15&7]*xx[5]
			a3 += t[v>>18&7]*xx[6] + t[v>>21&7]*xx[7]
			a0 += t[v>>24&7]*xx[8] + t[v>>27&7]*xx[9]
			a1 += t[v>>30&7]*xx[10] + t[v>>33&7]*xx[11]
			a2 += t[v>>36&7]*xx[12] + t[v>>39&7]*xx[13]
			a3 += t[v>>42&7]*xx[14] + t[v>>45&7]*xx[15]
			off += 6
			xg = xg[16:]
		}
		acc += s[g]*((a0+a1)+(a2+a3)) + b[g]*xs[g]
	}
	return acc
}

// q5DotGo: 5 bits, 8 elements (5 bytes) per 64-bit load.
func q5DotGo(w []byte, x, s, b, xs []float32, group int) float32 {
	t := &byteF
	var acc float32
	off := 0
	for g := range s {
		xg := x[g*group : (g+1)*group]
		var a0, a1, a2, a3 float32
		for len(xg) >= 8 {
			v := load64(w, off)
			xx := (*[8]float32)(xg)
			a0 += t[v&31]*xx[0] + t[v>>5&31]*xx[1]
			a1 += t[v>>10&31]*xx[2] + t[v>>15&31]*xx[3]
			a2 += t[v>>20&31]*xx[4] + t[v>>25&31]*xx[5]
			a3 += t[v>>30&31]*xx[6] + t[v>>35&31]*xx[7]
			off += 5
			xg = xg[8:]
		}
		acc += s[g]*((a0+a1)+(a2+a3)) + b[g]*xs[g]
	}
	return acc
}

// q6DotGo: 6 bits, 8 elements (6 bytes) per 64-bit load.
func q6DotGo(w []byte, x, s, b, xs []float32, group int) float32 {
	t := &byteF
	var acc float32
	off := 0
	for g := range s {
		xg := x[g*group : (g+1)*group]
		var a0, a1, a2, a3 float32
		for len(xg) >= 8 {
			v := load64(w, off)
			xx := (*[8]float32)(xg)
			a0 += t[v&63]*xx[0] + t[v>>6&63]*xx[1]
			a1 += t[v>>12&63]*xx[2] + t[v>>18&63]*xx[3]
			a2 += t[v>>24&63]*xx[4] + t[v>>30&63]*xx[5]
			a3 += t[v>>36&63]*xx[6] + t[v>>42&63]*xx[7]
			off += 6
			xg = xg[8:]
		}
		acc += s[g]*((a0+a1)+(a2+a3)) + b[g]*xs[g]
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
