//go:build ignore

// asm_gen_neon writes kernels_arm64.s and kernels_arm64_gen.go: the arm64
// NEON (ASIMD) row kernels, one function per (bits, group size, scale type):
// for 4 and 8 bits in a one-vector and a four-vector form, for 2, 3, 5 and 6
// bits in a one-vector form; plus dense F32/F16/BF16 dot products (one and
// four vectors). Run with `go generate` in this
// package (the directive is in kernels_arm64.go).
//
// Go's arm64 assembler lacks the floating-point vector instructions used here
// (UCVTF, FADD, FMUL, FADDP, FCVTL on vectors); they are emitted as WORD
// directives by the enc* functions below, with the mnemonic as a comment. The
// encodings follow the Arm ARM (A64 "Advanced SIMD" encoding tables); they
// were checked against GNU binutils (every distinct WORD, disassembled by
// aarch64-linux-gnu-objdump, gives the mnemonic in its comment):
//
//	grep -oE 'WORD \$0x[0-9a-f]+ // .*' kernels_arm64.s | sort -u |
//	  awk '{print ".inst " substr($2, 2) "  // " $0}' > /tmp/w.s
//	aarch64-linux-gnu-as /tmp/w.s -o /tmp/w.o && aarch64-linux-gnu-objdump -d /tmp/w.o
//
// and the kernels are tested under qemu-aarch64 (see .ci/run).
//
// NOTE: these kernels have been tested for correctness (under qemu-aarch64)
// but their speed has not been measured on arm64 hardware.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

type writer struct{ b bytes.Buffer }

func (w *writer) f(format string, a ...any) { fmt.Fprintf(&w.b, format, a...) }
func (w *writer) ins(lines ...string) {
	for _, l := range lines {
		if strings.HasSuffix(l, ":") {
			w.f("%s\n", l)
		} else {
			w.f("\t%s\n", l)
		}
	}
}

// Instruction encodings (Arm ARM, A64, Advanced SIMD), single precision,
// 128-bit (Q=1) unless noted. Fields: Rd bits 0-4, Rn 5-9, Rm 16-20.
func word(enc uint32, asm string) string { return fmt.Sprintf("WORD $0x%08x // %s", enc, asm) }

func rdn(d, n int) uint32 { return uint32(n)<<5 | uint32(d) }

// UCVTF Vd.4S, Vn.4S: "Advanced SIMD two-register miscellaneous", U=1,
// size=0x (sz=0), opcode 11101.
func encUCVTF(d, n int) string {
	return word(0x6e21d800|rdn(d, n), fmt.Sprintf("UCVTF V%d.4S, V%d.4S", d, n))
}

// FADD Vd.4S, Vn.4S, Vm.4S: "three same", U=0, opcode 11010.
func encFADD(d, n, m int) string {
	return word(0x4e20d400|uint32(m)<<16|rdn(d, n), fmt.Sprintf("FADD V%d.4S, V%d.4S, V%d.4S", d, n, m))
}

// FMUL Vd.4S, Vn.4S, Vm.4S: "three same", U=1, opcode 11011.
func encFMUL(d, n, m int) string {
	return word(0x6e20dc00|uint32(m)<<16|rdn(d, n), fmt.Sprintf("FMUL V%d.4S, V%d.4S, V%d.4S", d, n, m))
}

// FADDP Vd.4S, Vn.4S, Vm.4S (pairwise): "three same", U=1, opcode 11010.
// Result: n0+n1, n2+n3, m0+m1, m2+m3.
func encFADDP(d, n, m int) string {
	return word(0x6e20d400|uint32(m)<<16|rdn(d, n), fmt.Sprintf("FADDP V%d.4S, V%d.4S, V%d.4S", d, n, m))
}

// FADDP Sd, Vn.2S: "scalar pairwise", U=1, sz=0, opcode 01101.
func encFADDPs(d, n int) string {
	return word(0x7e30d800|rdn(d, n), fmt.Sprintf("FADDP S%d, V%d.2S", d, n))
}

// FCVTL Vd.4S, Vn.4H (low half) and FCVTL2 Vd.4S, Vn.8H (high half):
// "two-register miscellaneous", U=0, sz=0, opcode 10111.
func encFCVTL(d, n int, high bool) string {
	if high {
		return word(0x4e217800|rdn(d, n), fmt.Sprintf("FCVTL2 V%d.4S, V%d.8H", d, n))
	}
	return word(0x0e217800|rdn(d, n), fmt.Sprintf("FCVTL V%d.4S, V%d.4H", d, n))
}

// USHL Vd.8H, Vn.8H, Vm.8H (shift by register; a negative amount in the low
// byte of each lane of Vm shifts right): "three same", U=1, size=01,
// opcode 01000.
func encUSHL8H(d, n, m int) string {
	return word(0x6e604400|uint32(m)<<16|rdn(d, n), fmt.Sprintf("USHL V%d.8H, V%d.8H, V%d.8H", d, n, m))
}

func v(i int) string { return fmt.Sprintf("V%d", i) }

// Scale types, indexed by Float (F32, F16, BF16).
type stype struct {
	name string
	size int
}

var stypes = []stype{{"f32", 4}, {"f16", 2}, {"bf16", 2}}

// bcast loads the next value of type st from *src (advancing src) and
// broadcasts it as float32 to all four lanes of dst; tmp is a general
// register it may clobber.
func bcast(st stype, src string, dst int, tmp string) []string {
	d := v(dst)
	switch st.name {
	case "f32":
		return []string{fmt.Sprintf("VLD1R.P 4(%s), [%s.S4]", src, d)}
	case "f16":
		return []string{fmt.Sprintf("VLD1R.P 2(%s), [%s.H4]", src, d), encFCVTL(dst, dst, false)}
	}
	return []string{
		fmt.Sprintf("MOVHU.P 2(%s), %s", src, tmp),
		fmt.Sprintf("LSLW $16, %s, %s", tmp, tmp),
		fmt.Sprintf("VDUP %s, %s.S4", tmp, d),
	}
}

// scalar loads the next value of type st from *src (advancing src) into the
// low lane of dst (as Fdst).
func scalar(st stype, src string, dst int, tmp string) []string {
	switch st.name {
	case "f32":
		return []string{fmt.Sprintf("FMOVS.P 4(%s), F%d", src, dst)}
	case "f16":
		return []string{fmt.Sprintf("VLD1.P 2(%s), V%d.H[0]", src, dst), fmt.Sprintf("FCVTHS F%d, F%d", dst, dst)}
	}
	return []string{
		fmt.Sprintf("MOVHU.P 2(%s), %s", src, tmp),
		fmt.Sprintf("LSLW $16, %s, %s", tmp, tmp),
		fmt.Sprintf("FMOVS %s, F%d", tmp, dst),
	}
}

// Constant registers of the quantized kernels: V27-V30 hold the TBL indices
// that widen bytes 4k..4k+3 of a register to the four 32-bit lanes
// (neonIdx<>), V31 the nibble mask.
const (
	regIdx  = 27
	regMask = 31
)

func loadConsts(w *writer, bits int) {
	w.ins("MOVD $neonIdx<>(SB), R7", "VLD1 (R7), [V27.B16, V28.B16, V29.B16, V30.B16]")
	if bits == 4 {
		w.ins("VMOVI $15, V31.B16")
	}
}

// decode32 decodes the next 32 elements of a 4- or 8-bit row at *R0
// (advancing R0) into float32 vectors dec[0..7]; dec[k] pairs with the k-th
// four floats of the chunk's x (see the x layout in kernels_arm64.go: for 4
// bits, the 16 even elements then the 16 odd ones; for 8 bits, natural
// order). raw are two scratch registers.
func decode32(w *writer, bits int, dec [8]int, raw [2]int) {
	if bits == 4 {
		r, lo := raw[0], raw[1]
		w.ins(fmt.Sprintf("VLD1.P 16(R0), [%s.B16]", v(r)),
			fmt.Sprintf("VAND V%d.B16, %s.B16, %s.B16", regMask, v(r), v(lo)),
			fmt.Sprintf("VUSHR $4, %s.B16, %s.B16", v(r), v(r)))
		for k := 0; k < 4; k++ {
			w.ins(fmt.Sprintf("VTBL V%d.B16, [%s.B16], %s.B16", regIdx+k, v(lo), v(dec[k])))
		}
		for k := 0; k < 4; k++ {
			w.ins(fmt.Sprintf("VTBL V%d.B16, [%s.B16], %s.B16", regIdx+k, v(r), v(dec[4+k])))
		}
	} else {
		w.ins(fmt.Sprintf("VLD1.P 32(R0), [%s.B16, %s.B16]", v(raw[0]), v(raw[1])))
		for k := 0; k < 8; k++ {
			w.ins(fmt.Sprintf("VTBL V%d.B16, [%s.B16], %s.B16", regIdx+k%4, v(raw[k/4]), v(dec[k])))
		}
	}
	for k := 0; k < 8; k++ {
		w.ins(encUCVTF(dec[k], dec[k]))
	}
}

// fma emits acc += a*b, or acc = a*b when first.
func fma(acc, a, b int, first bool) string {
	if first {
		return encFMUL(acc, a, b)
	}
	return fmt.Sprintf("VFMLA %s.S4, %s.S4, %s.S4", v(b), v(a), v(acc))
}

// Single-vector quantized kernel:
// func name(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32
// Registers: R0 w, R1 x, R2 s, R3 b, R4 xs, R5 groups left; V0-V3 group
// sums, V8-V15 x, V16-V23 decoded weights, V24 row sum, V25 (lane 0) bias
// sum, V26 scale, V6-V7 raw bytes.
func single(w *writer, bits, group int, st stype) string {
	name := fmt.Sprintf("q%dg%d%s", bits, group, st.name)
	w.f("\n// func %s(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-52\n", name)
	w.ins("MOVD w+0(FP), R0", "MOVD x+8(FP), R1", "MOVD s+16(FP), R2", "MOVD b+24(FP), R3",
		"MOVD xs+32(FP), R4", "MOVD ngroups+40(FP), R5")
	loadConsts(w, bits)
	w.ins("VEOR V24.B16, V24.B16, V24.B16", "VEOR V25.B16, V25.B16, V25.B16")
	w.ins("grp:")
	dec := [8]int{16, 17, 18, 19, 20, 21, 22, 23}
	for c := 0; c < group/32; c++ {
		decode32(w, bits, dec, [2]int{6, 7})
		w.ins("VLD1.P 64(R1), [V8.S4, V9.S4, V10.S4, V11.S4]", "VLD1.P 64(R1), [V12.S4, V13.S4, V14.S4, V15.S4]")
		for k := 0; k < 8; k++ {
			w.ins(fma(k%4, dec[k], 8+k, c == 0 && k < 4))
		}
	}
	w.ins(encFADD(0, 0, 1), encFADD(2, 2, 3), encFADD(0, 0, 2))
	w.ins(bcast(st, "R2", 26, "R7")...)
	w.ins("VFMLA V26.S4, V0.S4, V24.S4")
	w.ins(scalar(st, "R3", 17, "R7")...)
	w.ins("FMOVS.P 4(R4), F16", "FMADDS F16, F25, F17, F25")
	w.ins("SUBS $1, R5, R5", "BNE grp")
	w.ins(encFADDP(24, 24, 24), encFADDPs(24, 24), "FADDS F25, F24, F24", "FMOVS F24, ret+48(FP)", "RET")
	return name
}

// Four-vector quantized kernel:
// func name(w *byte, x *float32, xstride int, s, b *byte, xs *float32, ngroups int, out *float32)
// Vector i's x starts at x + i*xstride bytes, its xs at xs + i*ngroups*4
// bytes; out[i] gets its result. Registers: R0 w, R1 R8 R9 R10 x, R2 s, R3
// b, R4 R11 R12 R13 xs, R5 groups left; V0-V7 group sums (two per vector),
// V8-V11 x, V12-V15 row sums, V16-V23 decoded weights, V24-V25 raw bytes,
// V26 bias sums (lane i for vector i).
func multi(w *writer, bits, group int, st stype) string {
	name := fmt.Sprintf("q%dg%d%sx4", bits, group, st.name)
	w.f("\n// func %s(w *byte, x *float32, xstride int, s, b *byte, xs *float32, ngroups int, out *float32)\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-64\n", name)
	w.ins("MOVD w+0(FP), R0", "MOVD x+8(FP), R1", "MOVD xstride+16(FP), R6", "MOVD s+24(FP), R2", "MOVD b+32(FP), R3",
		"MOVD xs+40(FP), R4", "MOVD ngroups+48(FP), R5",
		"ADD R6, R1, R8", "ADD R6, R8, R9", "ADD R6, R9, R10",
		"LSL $2, R5, R6", "ADD R6, R4, R11", "ADD R6, R11, R12", "ADD R6, R12, R13")
	loadConsts(w, bits)
	for i := 12; i <= 15; i++ {
		w.ins(fmt.Sprintf("VEOR V%d.B16, V%d.B16, V%d.B16", i, i, i))
	}
	w.ins("VEOR V26.B16, V26.B16, V26.B16")
	w.ins("grp:")
	xr := []string{"R1", "R8", "R9", "R10"}
	dec := [8]int{16, 17, 18, 19, 20, 21, 22, 23}
	for c := 0; c < group/32; c++ {
		decode32(w, bits, dec, [2]int{24, 25})
		for i := 0; i < 4; i++ {
			for h := 0; h < 2; h++ {
				w.ins(fmt.Sprintf("VLD1.P 64(%s), [V8.S4, V9.S4, V10.S4, V11.S4]", xr[i]))
				for k := 0; k < 4; k++ {
					w.ins(fma(2*i+k%2, dec[4*h+k], 8+k, c == 0 && h == 0 && k < 2))
				}
			}
		}
	}
	w.ins(bcast(st, "R2", 8, "R7")...)
	for i := 0; i < 4; i++ {
		w.ins(encFADD(2*i, 2*i, 2*i+1), fmt.Sprintf("VFMLA V8.S4, V%d.S4, V%d.S4", 2*i, 12+i))
	}
	w.ins(bcast(st, "R3", 9, "R7")...)
	for i, r := range []string{"R4", "R11", "R12", "R13"} {
		w.ins(fmt.Sprintf("VLD1.P 4(%s), V10.S[%d]", r, i))
	}
	w.ins("VFMLA V9.S4, V10.S4, V26.S4")
	w.ins("SUBS $1, R5, R5", "BNE grp")
	w.ins(encFADDP(0, 12, 13), encFADDP(1, 14, 15), encFADDP(2, 0, 1), encFADD(2, 2, 26),
		"MOVD out+56(FP), R6", "VST1 [V2.S4], (R6)", "RET")
	return name
}

// anyConsts returns the constants of the 2-, 3-, 5- and 6-bit kernel (96
// bytes, as 12 little-endian uint64): four TBL index registers, register k
// giving halfword lane i the two bytes from byte (8k+i)*bits/8 of the
// chunk's 4*bits bytes (index 0xff, out of range, gives zero), then the
// per-lane right shifts (as negative USHL amounts) ((8k+i)*bits)%8, then the
// per-lane mask 2^bits-1.
func anyConsts(bits int) []uint64 {
	var b [96]byte
	for k := 0; k < 4; k++ {
		for i := 0; i < 8; i++ {
			start := (8*k + i) * bits / 8
			b[16*k+2*i] = byte(start)
			b[16*k+2*i+1] = byte(start + 1)
		}
	}
	for i := 0; i < 8; i++ {
		sh := int16(-((i * bits) % 8))
		b[64+2*i] = byte(uint16(sh))
		b[64+2*i+1] = byte(uint16(sh) >> 8)
		m := uint16(1)<<bits - 1
		b[80+2*i] = byte(m)
		b[80+2*i+1] = byte(m >> 8)
	}
	out := make([]uint64, 12)
	for i := range out {
		for j := 7; j >= 0; j-- {
			out[i] = out[i]<<8 | uint64(b[8*i+j])
		}
	}
	return out
}

// Single-vector kernel for 2, 3, 5 and 6 bits, same signature and
// registers as single, plus V4 mask and V31 shifts (V27-V30 hold this
// width's TBL indices). Per 32 elements (exactly 4*bits bytes, read without
// reading past them): one TBL per 8 elements gathers each element's two
// bytes into a 16-bit lane, USHL and AND extract it, UXTL/UXTL2 widen.
func anyBits(w *writer, bits, group int, st stype) string {
	name := fmt.Sprintf("q%dg%d%s", bits, group, st.name)
	w.f("\n// func %s(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-52\n", name)
	w.ins("MOVD w+0(FP), R0", "MOVD x+8(FP), R1", "MOVD s+16(FP), R2", "MOVD b+24(FP), R3",
		"MOVD xs+32(FP), R4", "MOVD ngroups+40(FP), R5")
	w.ins(fmt.Sprintf("MOVD $neonAny%d<>(SB), R7", bits), "VLD1.P 64(R7), [V27.B16, V28.B16, V29.B16, V30.B16]",
		"VLD1.P 16(R7), [V31.B16]", "VLD1 (R7), [V4.B16]")
	w.ins("VEOR V24.B16, V24.B16, V24.B16", "VEOR V25.B16, V25.B16, V25.B16")
	w.ins("grp:")
	table := "[V6.B16]"
	if bits > 4 {
		table = "[V6.B16, V7.B16]"
	}
	for c := 0; c < group/32; c++ {
		switch bits {
		case 2:
			w.ins("VLD1.P 8(R0), [V6.B8]")
		case 3:
			w.ins("VLD1.P 8(R0), [V6.B8]", "VLD1.P 4(R0), V6.S[2]")
		case 5:
			w.ins("VLD1.P 16(R0), [V6.B16]", "VLD1.P 4(R0), V7.S[0]")
		case 6:
			w.ins("VLD1.P 16(R0), [V6.B16]", "VLD1.P 8(R0), [V7.B8]")
		}
		for k := 0; k < 4; k++ {
			w.ins(fmt.Sprintf("VTBL V%d.B16, %s, V%d.B16", regIdx+k, table, 16+2*k))
		}
		for k := 0; k < 4; k++ {
			w.ins(encUSHL8H(16+2*k, 16+2*k, 31))
		}
		for k := 0; k < 4; k++ {
			w.ins(fmt.Sprintf("VAND V4.B16, V%d.B16, V%d.B16", 16+2*k, 16+2*k))
		}
		for k := 0; k < 4; k++ {
			w.ins(fmt.Sprintf("VUXTL2 V%d.H8, V%d.S4", 16+2*k, 17+2*k), fmt.Sprintf("VUXTL V%d.H4, V%d.S4", 16+2*k, 16+2*k))
		}
		for k := 0; k < 8; k++ {
			w.ins(encUCVTF(16+k, 16+k))
		}
		w.ins("VLD1.P 64(R1), [V8.S4, V9.S4, V10.S4, V11.S4]", "VLD1.P 64(R1), [V12.S4, V13.S4, V14.S4, V15.S4]")
		for k := 0; k < 8; k++ {
			w.ins(fma(k%4, 16+k, 8+k, c == 0 && k < 4))
		}
	}
	w.ins(encFADD(0, 0, 1), encFADD(2, 2, 3), encFADD(0, 0, 2))
	w.ins(bcast(st, "R2", 26, "R7")...)
	w.ins("VFMLA V26.S4, V0.S4, V24.S4")
	w.ins(scalar(st, "R3", 17, "R7")...)
	w.ins("FMOVS.P 4(R4), F16", "FMADDS F16, F25, F17, F25")
	w.ins("SUBS $1, R5, R5", "BNE grp")
	w.ins(encFADDP(24, 24, 24), encFADDPs(24, 24), "FADDS F25, F24, F24", "FMOVS F24, ret+48(FP)", "RET")
	return name
}

// decode16 loads the next 16 dense elements of type st at *R0 (advancing
// R0) as float32 into dec[0..3]; raw are two scratch registers, zero a
// register holding zero (for BF16).
func decode16(w *writer, st stype, dec [4]int, raw [2]int, zero int) {
	switch st.name {
	case "f32":
		w.ins(fmt.Sprintf("VLD1.P 64(R0), [V%d.S4, V%d.S4, V%d.S4, V%d.S4]", dec[0], dec[1], dec[2], dec[3]))
		return
	case "f16":
		w.ins(fmt.Sprintf("VLD1.P 32(R0), [V%d.H8, V%d.H8]", raw[0], raw[1]))
		for k := 0; k < 4; k++ {
			w.ins(encFCVTL(dec[k], raw[k/2], k%2 == 1))
		}
		return
	}
	// bf16: interleave zero halves below each value: (0, w) = w<<16.
	w.ins(fmt.Sprintf("VLD1.P 32(R0), [V%d.H8, V%d.H8]", raw[0], raw[1]))
	for k := 0; k < 4; k++ {
		op := "VZIP1"
		if k%2 == 1 {
			op = "VZIP2"
		}
		w.ins(fmt.Sprintf("%s V%d.H8, V%d.H8, V%d.H8", op, raw[k/2], zero, dec[k]))
	}
}

// func name(w *byte, x *float32, n int) float32, n a positive multiple of 32.
// Registers: V0-V7 sums, V8-V15 x, V16-V23 weights, V24-V27 raw, V28 zero.
func denseSingle(w *writer, st stype) string {
	name := "dot" + st.name
	w.f("\n// func %s(w *byte, x *float32, n int) float32\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-28\n", name)
	w.ins("MOVD w+0(FP), R0", "MOVD x+8(FP), R1", "MOVD n+16(FP), R5")
	for i := 0; i < 8; i++ {
		w.ins(fmt.Sprintf("VEOR V%d.B16, V%d.B16, V%d.B16", i, i, i))
	}
	w.ins("VEOR V28.B16, V28.B16, V28.B16", "loop:")
	decode16(w, st, [4]int{16, 17, 18, 19}, [2]int{24, 25}, 28)
	decode16(w, st, [4]int{20, 21, 22, 23}, [2]int{26, 27}, 28)
	w.ins("VLD1.P 64(R1), [V8.S4, V9.S4, V10.S4, V11.S4]", "VLD1.P 64(R1), [V12.S4, V13.S4, V14.S4, V15.S4]")
	for k := 0; k < 8; k++ {
		w.ins(fma(k, 16+k, 8+k, false))
	}
	w.ins("SUBS $32, R5, R5", "BNE loop")
	w.ins(encFADD(0, 0, 1), encFADD(2, 2, 3), encFADD(4, 4, 5), encFADD(6, 6, 7),
		encFADD(0, 0, 2), encFADD(4, 4, 6), encFADD(0, 0, 4),
		encFADDP(0, 0, 0), encFADDPs(0, 0), "FMOVS F0, ret+24(FP)", "RET")
	return name
}

// func name(w *byte, x *float32, xstride, n int, out *float32), n a positive
// multiple of 16. Registers: V0-V7 sums (two per vector), V8-V11 x, V16-V19
// weights, V24-V25 raw, V28 zero.
func denseMulti(w *writer, st stype) string {
	name := "dot" + st.name + "x4"
	w.f("\n// func %s(w *byte, x *float32, xstride, n int, out *float32)\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-40\n", name)
	w.ins("MOVD w+0(FP), R0", "MOVD x+8(FP), R1", "MOVD xstride+16(FP), R6", "MOVD n+24(FP), R5",
		"ADD R6, R1, R8", "ADD R6, R8, R9", "ADD R6, R9, R10")
	for i := 0; i < 8; i++ {
		w.ins(fmt.Sprintf("VEOR V%d.B16, V%d.B16, V%d.B16", i, i, i))
	}
	w.ins("VEOR V28.B16, V28.B16, V28.B16", "loop:")
	decode16(w, st, [4]int{16, 17, 18, 19}, [2]int{24, 25}, 28)
	for i, r := range []string{"R1", "R8", "R9", "R10"} {
		w.ins(fmt.Sprintf("VLD1.P 64(%s), [V8.S4, V9.S4, V10.S4, V11.S4]", r))
		for k := 0; k < 4; k++ {
			w.ins(fma(2*i+k%2, 16+k, 8+k, false))
		}
	}
	w.ins("SUBS $16, R5, R5", "BNE loop")
	for i := 0; i < 4; i++ {
		w.ins(encFADD(2*i, 2*i, 2*i+1))
	}
	w.ins(encFADDP(1, 0, 2), encFADDP(3, 4, 6), encFADDP(0, 1, 3),
		"MOVD out+32(FP), R6", "VST1 [V0.S4], (R6)", "RET")
	return name
}

var groups = []int{32, 64, 128}

func main() {
	var w writer
	w.f("// Code generated by asm_gen_neon.go; DO NOT EDIT.\n\n//go:build arm64 && !purego\n\n#include \"textflag.h\"\n")
	// TBL indices: lane j of register k takes byte 4k+j; 0xff bytes
	// (out of range) give zero, so each lane is that byte zero-extended.
	w.f("\n// neonIdx: TBL indices widening bytes 4k..4k+3 to 32-bit lanes, k = 0..3.\n")
	for k := 0; k < 4; k++ {
		for h := 0; h < 2; h++ {
			lo := uint64(0xffffff00 | uint32(4*k+2*h))
			hi := uint64(0xffffff00 | uint32(4*k+2*h+1))
			w.f("DATA neonIdx<>+%d(SB)/8, $0x%016x\n", 16*k+8*h, hi<<32|lo)
		}
	}
	w.f("GLOBL neonIdx<>(SB), RODATA|NOPTR, $64\n")

	var g writer
	g.f("// Code generated by asm_gen_neon.go; DO NOT EDIT.\n\n//go:build arm64 && !purego\n\npackage mlxq\n")
	var single1, multi4 [2][3][3]string
	for bi, bits := range []int{4, 8} {
		for gi, group := range groups {
			for ti, st := range stypes {
				single1[bi][gi][ti] = single(&w, bits, group, st)
				multi4[bi][gi][ti] = multi(&w, bits, group, st)
				g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32\n", single1[bi][gi][ti])
				g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, xstride int, s, b *byte, xs *float32, ngroups int, out *float32)\n", multi4[bi][gi][ti])
			}
		}
	}
	var anyb [4][3][3]string
	for bi, bits := range []int{2, 3, 5, 6} {
		w.f("\n// neonAny%d: TBL indices, shifts and mask of the %d-bit kernels.\n", bits, bits)
		for i, c := range anyConsts(bits) {
			w.f("DATA neonAny%d<>+%d(SB)/8, $0x%016x\n", bits, 8*i, c)
		}
		w.f("GLOBL neonAny%d<>(SB), RODATA|NOPTR, $96\n", bits)
		for gi, group := range groups {
			for ti, st := range stypes {
				anyb[bi][gi][ti] = anyBits(&w, bits, group, st)
				g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32\n", anyb[bi][gi][ti])
			}
		}
	}
	var dense1, dense4 [3]string
	for ti, st := range stypes {
		dense1[ti] = denseSingle(&w, st)
		dense4[ti] = denseMulti(&w, st)
		g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, n int) float32\n", dense1[ti])
		g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, xstride, n int, out *float32)\n", dense4[ti])
	}
	table := func(name, sig string, t [2][3][3]string) {
		g.f("\n// %s is indexed [bits 4, 8][group 32, 64, 128][scale type].\nvar %s = [2][3][3]%s{\n", name, name, sig)
		for bi := range t {
			g.f("\t{\n")
			for gi := range t[bi] {
				g.f("\t\t{%s},\n", strings.Join(t[bi][gi][:], ", "))
			}
			g.f("\t},\n")
		}
		g.f("}\n")
	}
	table("qSingle", "func(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32", single1)
	g.f("\n// qAnySingle is indexed [bits 2, 3, 5, 6][group 32, 64, 128][scale type].\nvar qAnySingle = [4][3][3]func(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32{\n")
	for bi := range anyb {
		g.f("\t{\n")
		for gi := range anyb[bi] {
			g.f("\t\t{%s},\n", strings.Join(anyb[bi][gi][:], ", "))
		}
		g.f("\t},\n")
	}
	g.f("}\n")
	table("qMulti", "func(w *byte, x *float32, xstride int, s, b *byte, xs *float32, ngroups int, out *float32)", multi4)
	g.f("\n// denseSingle and denseMulti are indexed by element type.\n")
	g.f("var denseSingle = [3]func(w *byte, x *float32, n int) float32{%s}\n", strings.Join(dense1[:], ", "))
	g.f("var denseMulti = [3]func(w *byte, x *float32, xstride, n int, out *float32){%s}\n", strings.Join(dense4[:], ", "))

	if err := os.WriteFile("kernels_arm64.s", w.b.Bytes(), 0o644); err != nil {
		panic(err)
	}
	if err := os.WriteFile("kernels_arm64_gen.go", g.b.Bytes(), 0o644); err != nil {
		panic(err)
	}
}
