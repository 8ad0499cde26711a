//go:build ignore

// asm_gen writes kernels_amd64.s and kernels_amd64_gen.go: the AVX2/FMA row
// kernels, one function per (bits, group size, scale type), each in a
// one-vector and a four-vector form. Run with `go generate` in this package.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

type stype struct {
	name  string // f32, f16, bf16 (index = Float)
	size  int
	loadS func(dst string) []string // broadcast scale (R8) into dst (ymm); advance R8
	load8 func(src, dst string) []string
	load1 func(src, dst string) []string // one value into the low lane of dst (xmm), may use AX
}

var stypes = []stype{
	{
		name: "f32", size: 4,
		loadS: func(d string) []string { return []string{"VBROADCASTSS (R8), " + d, "ADDQ $4, R8"} },
		load8: func(s, d string) []string { return []string{"VMOVUPS " + s + ", " + d} },
		load1: func(s, d string) []string { return []string{"VMOVSS " + s + ", " + d} },
	},
	{
		name: "f16", size: 2,
		loadS: func(d string) []string {
			x := "X" + d[1:]
			return []string{"VPBROADCASTW (R8), " + x, "VCVTPH2PS " + x + ", " + d, "ADDQ $2, R8"}
		},
		load8: func(s, d string) []string { return []string{"VCVTPH2PS " + s + ", " + d} },
		load1: func(s, d string) []string {
			return []string{"MOVWLZX " + s + ", AX", "VMOVD AX, " + d, "VCVTPH2PS " + d + ", " + d}
		},
	},
	{
		name: "bf16", size: 2,
		loadS: func(d string) []string {
			return []string{"VPBROADCASTW (R8), " + d, "VPSLLD $16, " + d + ", " + d, "ADDQ $2, R8"}
		},
		load8: func(s, d string) []string {
			return []string{"VPMOVZXWD " + s + ", " + d, "VPSLLD $16, " + d + ", " + d}
		},
		load1: func(s, d string) []string {
			return []string{"MOVWLZX " + s + ", AX", "SHLL $16, AX", "VMOVD AX, " + d}
		},
	},
}

var groups = []int{32, 64, 128}

// prefetch is how far ahead (bytes) the quantized kernels ask for weight
// data, once per group: it keeps more of the weight stream in flight than
// the hardware prefetcher alone while the core is busy converting.
var prefetch = 512

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

func y(i int) string { return fmt.Sprintf("Y%d", i) }
func x(i int) string { return fmt.Sprintf("X%d", i) }

// hsum reduces Y(r) to its low lane, adds X(extra), and stores it at dst.
func hsum(w *writer, r, tmp, extra int, dst string) {
	w.ins(
		"VEXTRACTF128 $1, "+y(r)+", "+x(tmp),
		"VADDPS "+x(tmp)+", "+x(r)+", "+x(r),
		"VMOVHLPS "+x(r)+", "+x(r)+", "+x(tmp),
		"VADDPS "+x(tmp)+", "+x(r)+", "+x(r),
		"VMOVSHDUP "+x(r)+", "+x(tmp),
		"VADDSS "+x(tmp)+", "+x(r)+", "+x(r),
		"VADDSS "+x(extra)+", "+x(r)+", "+x(r),
		"VMOVSS "+x(r)+", "+dst,
	)
}

// Single-vector quantized kernel:
// func name(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32
// Registers: SI w, DI x, R8 s, R9 b, R10 xs, CX groups left, Y0 row sum,
// Y1-Y4 group sums, Y5-Y8 temporaries, Y9 scale, Y14 bias sum, Y15 nibble mask.
func single(w *writer, bits, group int, st stype) string {
	name := fmt.Sprintf("q%dg%d%s", bits, group, st.name)
	w.f("\n// func %s(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-52\n", name)
	w.ins("MOVQ w+0(FP), SI", "MOVQ x+8(FP), DI", "MOVQ s+16(FP), R8", "MOVQ ngroups+40(FP), CX", "VXORPS Y0, Y0, Y0")
	if bits == 4 {
		w.ins("MOVL $15, AX", "VMOVD AX, X15", "VPBROADCASTD X15, Y15")
	}
	w.ins("grp:")
	if prefetch > 0 {
		w.ins(fmt.Sprintf("PREFETCHT0 %d(SI)", prefetch))
	}
	if bits == 4 {
		chunks := group / 16
		for k := 0; k < chunks; k++ {
			a, c, t1, t2 := 1, 2, 5, 6
			if k%2 == 1 {
				a, c, t1, t2 = 3, 4, 7, 8
			}
			op := "VFMADD231PS"
			if k < 2 {
				op = "VMULPS"
			}
			w.ins(
				fmt.Sprintf("VPMOVZXBD %d(SI), %s", 8*k, y(t1)),
				fmt.Sprintf("VPAND Y15, %s, %s", y(t1), y(t2)),
				fmt.Sprintf("VCVTDQ2PS %s, %s", y(t1), y(t1)),
				fmt.Sprintf("VCVTDQ2PS %s, %s", y(t2), y(t2)),
				fmt.Sprintf("%s %d(DI), %s, %s", op, 64*k, y(t2), y(a)),
				fmt.Sprintf("%s %d(DI), %s, %s", op, 64*k+32, y(t1), y(c)),
			)
		}
		w.ins("VADDPS Y2, Y1, Y1", "VADDPS Y4, Y3, Y3", "VADDPS Y3, Y1, Y1")
		w.ins(st.loadS("Y9")...)
		w.ins("VFMADD231PS Y9, Y1, Y0", fmt.Sprintf("ADDQ $%d, SI", group/2), fmt.Sprintf("ADDQ $%d, DI", group*4))
	} else {
		chunks := group / 8
		for k := 0; k < chunks; k++ {
			t := 5 + k%4
			op := "VFMADD231PS"
			if k < 4 {
				op = "VMULPS"
			}
			w.ins(
				fmt.Sprintf("VPMOVZXBD %d(SI), %s", 8*k, y(t)),
				fmt.Sprintf("VCVTDQ2PS %s, %s", y(t), y(t)),
				fmt.Sprintf("%s %d(DI), %s, %s", op, 32*k, y(t), y(1+k%4)),
			)
		}
		w.ins("VADDPS Y2, Y1, Y1", "VADDPS Y4, Y3, Y3", "VADDPS Y3, Y1, Y1")
		w.ins(st.loadS("Y9")...)
		w.ins("VFMADD231PS Y9, Y1, Y0", fmt.Sprintf("ADDQ $%d, SI", group), fmt.Sprintf("ADDQ $%d, DI", group*4))
	}
	w.ins("DECQ CX", "JNZ grp")
	biasTail(w, st, "ret+48(FP)")
	return name
}

// Any-width kernel for 2, 3, 5 and 6 bits:
// func name(w *byte, x *float32, s, b *byte, xs *float32, ngroups, packs, bits int, k *bitsConsts) float32
// Every 8 elements ("pack") take exactly `bits` bytes. A pack is loaded as 8
// bytes broadcast to both 128-bit lanes; a byte shuffle gives dword i the 4
// bytes from byte (i*bits)/8 on, a variable shift by (i*bits)%8 and a mask
// leave element i. k holds the shuffle control, the shifts and the mask.
// Four packs per loop (packs per group is a multiple of 4); the 8-byte loads
// read up to 8-bits bytes past the row, which the caller must allow.
// Registers: SI w, DI x, R8 s, R11 bits, R13 3*bits, DX packs, BX packs left,
// Y0 row sum, Y1-Y4 group sums, Y5-Y8 temporaries, Y9 scale,
// Y12 shifts, Y13 shuffle, Y15 mask.
func anyBits(w *writer, st stype) string {
	name := "qxg" + st.name
	w.f("\n// func %s(w *byte, x *float32, s, b *byte, xs *float32, ngroups, packs, bits int, k *bitsConsts) float32\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-76\n", name)
	w.ins("MOVQ w+0(FP), SI", "MOVQ x+8(FP), DI", "MOVQ s+16(FP), R8", "MOVQ ngroups+40(FP), CX",
		"MOVQ packs+48(FP), DX", "MOVQ bits+56(FP), R11", "LEAQ (R11)(R11*2), R13", "MOVQ k+64(FP), AX",
		"VMOVDQU 0(AX), Y13", "VMOVDQU 32(AX), Y12", "VMOVDQU 64(AX), Y15", "VXORPS Y0, Y0, Y0")
	w.ins("grp:")
	if prefetch > 0 {
		w.ins(fmt.Sprintf("PREFETCHT0 %d(SI)", prefetch))
	}
	w.ins("VXORPS Y1, Y1, Y1", "VXORPS Y2, Y2, Y2", "VXORPS Y3, Y3, Y3", "VXORPS Y4, Y4, Y4", "MOVQ DX, BX")
	w.ins("pack:")
	addrs := []string{"(SI)", "(SI)(R11*1)", "(SI)(R11*2)", "(SI)(R13*1)"}
	for k := 0; k < 4; k++ {
		t := y(5 + k)
		w.ins(
			"VPBROADCASTQ "+addrs[k]+", "+t,
			"VPSHUFB Y13, "+t+", "+t,
			"VPSRLVD Y12, "+t+", "+t,
			"VPAND Y15, "+t+", "+t,
			"VCVTDQ2PS "+t+", "+t,
			fmt.Sprintf("VFMADD231PS %d(DI), %s, %s", 32*k, t, y(1+k)),
		)
	}
	w.ins("LEAQ (SI)(R11*4), SI", "ADDQ $128, DI", "SUBQ $4, BX", "JNZ pack")
	w.ins("VADDPS Y2, Y1, Y1", "VADDPS Y4, Y3, Y3", "VADDPS Y3, Y1, Y1")
	w.ins(st.loadS("Y9")...)
	w.ins("VFMADD231PS Y9, Y1, Y0", "DECQ CX", "JNZ grp")
	biasTail(w, st, "ret+72(FP)")
	return name
}

// biasTail adds sum_g b[g]*xs[g] to the row sum Y0 and returns it.
func biasTail(w *writer, st stype, ret string) {
	w.ins("MOVQ b+24(FP), R9", "MOVQ xs+32(FP), R10", "MOVQ ngroups+40(FP), CX", "VXORPS Y14, Y14, Y14")
	w.ins("bias8:", "CMPQ CX, $8", "JLT bias8done")
	w.ins(st.load8("(R9)", "Y5")...)
	w.ins("VFMADD231PS (R10), Y5, Y14", fmt.Sprintf("ADDQ $%d, R9", 8*st.size), "ADDQ $32, R10", "SUBQ $8, CX", "JMP bias8")
	w.ins("bias8done:", "VADDPS Y14, Y0, Y0", "VXORPS X14, X14, X14")
	w.ins("bias1:", "TESTQ CX, CX", "JZ done")
	w.ins(st.load1("(R9)", "X5")...)
	w.ins("VFMADD231SS (R10), X5, X14", fmt.Sprintf("ADDQ $%d, R9", st.size), "ADDQ $4, R10", "DECQ CX", "JMP bias1")
	w.ins("done:")
	hsum(w, 0, 1, 14, ret)
	w.ins("VZEROUPPER", "RET")
}

// vecAddr addresses vector v's copy of off(DI): vectors are R12 bytes apart
// (R13 = 3*R12).
func vecAddr(v, off int) string {
	switch v {
	case 0:
		return fmt.Sprintf("%d(DI)", off)
	case 1:
		return fmt.Sprintf("%d(DI)(R12*1)", off)
	case 2:
		return fmt.Sprintf("%d(DI)(R12*2)", off)
	}
	return fmt.Sprintf("%d(DI)(R13*1)", off)
}

// xsAddr addresses vector v's xs at (R10): DX bytes apart (BX = 3*DX).
func xsAddr(v int) string {
	switch v {
	case 0:
		return "(R10)"
	case 1:
		return "(R10)(DX*1)"
	case 2:
		return "(R10)(DX*2)"
	}
	return "(R10)(BX*1)"
}

// Four-vector quantized kernel:
// func name(w *byte, x *float32, xstride int, s, b *byte, xs *float32, ngroups int, out *float32)
// Vector v's x starts at x + v*xstride bytes, its xs at xs + v*ngroups*4
// bytes; out[v] gets its result. Registers: Y0-Y3 row sums, Y4-Y11 group
// sums (two per vector), Y12-Y13 decoded weights, Y14 scale, Y15 mask.
func multi(w *writer, bits, group int, st stype) string {
	name := fmt.Sprintf("q%dg%d%sx4", bits, group, st.name)
	w.f("\n// func %s(w *byte, x *float32, xstride int, s, b *byte, xs *float32, ngroups int, out *float32)\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-64\n", name)
	w.ins("MOVQ w+0(FP), SI", "MOVQ x+8(FP), DI", "MOVQ xstride+16(FP), R12", "LEAQ (R12)(R12*2), R13",
		"MOVQ s+24(FP), R8", "MOVQ ngroups+48(FP), CX",
		"VXORPS Y0, Y0, Y0", "VXORPS Y1, Y1, Y1", "VXORPS Y2, Y2, Y2", "VXORPS Y3, Y3, Y3")
	if bits == 4 {
		w.ins("MOVL $15, AX", "VMOVD AX, X15", "VPBROADCASTD X15, Y15")
	}
	w.ins("grp:")
	if prefetch > 0 {
		w.ins(fmt.Sprintf("PREFETCHT0 %d(SI)", prefetch))
	}
	var wstep int
	if bits == 4 {
		chunks := group / 16
		for k := 0; k < chunks; k++ {
			op := "VFMADD231PS"
			if k == 0 {
				op = "VMULPS"
			}
			w.ins(
				fmt.Sprintf("VPMOVZXBD %d(SI), Y12", 8*k),
				"VPAND Y15, Y12, Y13",
				"VCVTDQ2PS Y12, Y12",
				"VCVTDQ2PS Y13, Y13",
			)
			for v := 0; v < 4; v++ {
				w.ins(
					fmt.Sprintf("%s %s, Y13, %s", op, vecAddr(v, 64*k), y(4+2*v)),
					fmt.Sprintf("%s %s, Y12, %s", op, vecAddr(v, 64*k+32), y(5+2*v)),
				)
			}
		}
		wstep = group / 2
	} else {
		chunks := group / 8
		for k := 0; k < chunks; k++ {
			op := "VFMADD231PS"
			if k < 2 {
				op = "VMULPS"
			}
			w.ins(fmt.Sprintf("VPMOVZXBD %d(SI), Y12", 8*k), "VCVTDQ2PS Y12, Y12")
			for v := 0; v < 4; v++ {
				w.ins(fmt.Sprintf("%s %s, Y12, %s", op, vecAddr(v, 32*k), y(4+2*v+k%2)))
			}
		}
		wstep = group
	}
	w.ins(st.loadS("Y14")...)
	for v := 0; v < 4; v++ {
		w.ins(fmt.Sprintf("VADDPS %s, %s, %s", y(5+2*v), y(4+2*v), y(4+2*v)),
			fmt.Sprintf("VFMADD231PS Y14, %s, %s", y(4+2*v), y(v)))
	}
	w.ins(fmt.Sprintf("ADDQ $%d, SI", wstep), fmt.Sprintf("ADDQ $%d, DI", group*4), "DECQ CX", "JNZ grp")
	// Bias terms, eight groups at a time, then one at a time.
	w.ins("MOVQ b+32(FP), R9", "MOVQ xs+40(FP), R10", "MOVQ ngroups+48(FP), CX",
		"MOVQ CX, DX", "SHLQ $2, DX", "LEAQ (DX)(DX*2), BX",
		"VXORPS Y4, Y4, Y4", "VXORPS Y5, Y5, Y5", "VXORPS Y6, Y6, Y6", "VXORPS Y7, Y7, Y7")
	w.ins("bias8:", "CMPQ CX, $8", "JLT bias8done")
	w.ins(st.load8("(R9)", "Y12")...)
	for v := 0; v < 4; v++ {
		w.ins(fmt.Sprintf("VFMADD231PS %s, Y12, %s", xsAddr(v), y(4+v)))
	}
	w.ins(fmt.Sprintf("ADDQ $%d, R9", 8*st.size), "ADDQ $32, R10", "SUBQ $8, CX", "JMP bias8")
	w.ins("bias8done:")
	for v := 0; v < 4; v++ {
		w.ins(fmt.Sprintf("VADDPS %s, %s, %s", y(4+v), y(v), y(v)), fmt.Sprintf("VXORPS %s, %s, %s", x(8+v), x(8+v), x(8+v)))
	}
	w.ins("bias1:", "TESTQ CX, CX", "JZ done")
	w.ins(st.load1("(R9)", "X12")...)
	for v := 0; v < 4; v++ {
		w.ins(fmt.Sprintf("VFMADD231SS %s, X12, %s", xsAddr(v), x(8+v)))
	}
	w.ins(fmt.Sprintf("ADDQ $%d, R9", st.size), "ADDQ $4, R10", "DECQ CX", "JMP bias1")
	w.ins("done:", "MOVQ out+56(FP), R11")
	for v := 0; v < 4; v++ {
		hsum(w, v, 12, 8+v, fmt.Sprintf("%d(R11)", 4*v))
	}
	w.ins("VZEROUPPER", "RET")
	return name
}

// Dense kernels. Loads of 8 elements as float32 into dst.
var denseLoad = map[string]func(off int, dst string) []string{
	"f32": func(off int, d string) []string { return []string{fmt.Sprintf("VMOVUPS %d(SI), %s", 4*off, d)} },
	"f16": func(off int, d string) []string { return []string{fmt.Sprintf("VCVTPH2PS %d(SI), %s", 2*off, d)} },
	"bf16": func(off int, d string) []string {
		return []string{fmt.Sprintf("VPMOVZXWD %d(SI), %s", 2*off, d), fmt.Sprintf("VPSLLD $16, %s, %s", d, d)}
	},
}

// func name(w *byte, x *float32, n int) float32, n a positive multiple of 32.
func denseSingle(w *writer, st stype) string {
	name := "dot" + st.name
	w.f("\n// func %s(w *byte, x *float32, n int) float32\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-28\n", name)
	w.ins("MOVQ w+0(FP), SI", "MOVQ x+8(FP), DI", "MOVQ n+16(FP), CX",
		"VXORPS Y1, Y1, Y1", "VXORPS Y2, Y2, Y2", "VXORPS Y3, Y3, Y3", "VXORPS Y4, Y4, Y4")
	w.ins("loop:")
	for k := 0; k < 4; k++ {
		w.ins(denseLoad[st.name](8*k, y(5+k))...)
	}
	for k := 0; k < 4; k++ {
		w.ins(fmt.Sprintf("VFMADD231PS %d(DI), %s, %s", 32*k, y(5+k), y(1+k)))
	}
	w.ins(fmt.Sprintf("ADDQ $%d, SI", 32*st.size), "ADDQ $128, DI", "SUBQ $32, CX", "JNZ loop")
	w.ins("VADDPS Y2, Y1, Y1", "VADDPS Y4, Y3, Y3", "VADDPS Y3, Y1, Y0", "VXORPS X14, X14, X14")
	hsum(w, 0, 1, 14, "ret+24(FP)")
	w.ins("VZEROUPPER", "RET")
	return name
}

// func name(w *byte, x *float32, xstride, n int, out *float32), n a positive
// multiple of 16.
func denseMulti(w *writer, st stype) string {
	name := "dot" + st.name + "x4"
	w.f("\n// func %s(w *byte, x *float32, xstride, n int, out *float32)\n", name)
	w.f("TEXT ·%s(SB), NOSPLIT, $0-40\n", name)
	w.ins("MOVQ w+0(FP), SI", "MOVQ x+8(FP), DI", "MOVQ xstride+16(FP), R12", "LEAQ (R12)(R12*2), R13",
		"MOVQ n+24(FP), CX")
	for i := 4; i < 12; i++ {
		w.ins(fmt.Sprintf("VXORPS %s, %s, %s", y(i), y(i), y(i)))
	}
	w.ins("loop:")
	for k := 0; k < 2; k++ {
		w.ins(denseLoad[st.name](8*k, "Y12")...)
		for v := 0; v < 4; v++ {
			w.ins(fmt.Sprintf("VFMADD231PS %s, Y12, %s", vecAddr(v, 32*k), y(4+2*v+k)))
		}
	}
	w.ins(fmt.Sprintf("ADDQ $%d, SI", 16*st.size), "ADDQ $64, DI", "SUBQ $16, CX", "JNZ loop")
	w.ins("MOVQ out+32(FP), R11", "VXORPS X14, X14, X14")
	for v := 0; v < 4; v++ {
		w.ins(fmt.Sprintf("VADDPS %s, %s, %s", y(5+2*v), y(4+2*v), y(v)))
		hsum(w, v, 12, 14, fmt.Sprintf("%d(R11)", 4*v))
	}
	w.ins("VZEROUPPER", "RET")
	return name
}

func main() {
	var s writer
	s.f("// Code generated by asm_gen.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n")
	s.f(`
// 4-bit kernels take x re-arranged per 16 elements as x_even - x_odd/16
// (8 values) then x_odd/16 (8 values): each byte c = lo + 16*hi is widened
// to a dword, and lo*(x_even - x_odd/16) + c*(x_odd/16) = lo*x_even + hi*x_odd.
// 8-bit kernels take x as is. A group's sum of q*x is scaled by its scale
// into the row sum; the biases are applied at the end as sum_g b[g]*xs[g].
`)
	var g writer
	g.f("// Code generated by asm_gen.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\npackage mlxq\n")
	var single1, multi4 [2][3][3]string
	for bi, bits := range []int{4, 8} {
		for gi, group := range groups {
			for ti, st := range stypes {
				single1[bi][gi][ti] = single(&s, bits, group, st)
				multi4[bi][gi][ti] = multi(&s, bits, group, st)
			}
		}
	}
	var anyb [3]string
	for ti, st := range stypes {
		anyb[ti] = anyBits(&s, st)
	}
	var dense1, dense4 [3]string
	for ti, st := range stypes {
		dense1[ti] = denseSingle(&s, st)
		dense4[ti] = denseMulti(&s, st)
	}
	for bi := range single1 {
		for gi := range single1[bi] {
			for ti := range single1[bi][gi] {
				g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, s, b *byte, xs *float32, ngroups int) float32\n", single1[bi][gi][ti])
				g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, xstride int, s, b *byte, xs *float32, ngroups int, out *float32)\n", multi4[bi][gi][ti])
			}
		}
	}
	for ti := range anyb {
		g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, s, b *byte, xs *float32, ngroups, packs, bits int, k *bitsConsts) float32\n", anyb[ti])
	}
	for ti := range dense1 {
		g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, n int) float32\n", dense1[ti])
		g.f("\n//go:noescape\nfunc %s(w *byte, x *float32, xstride, n int, out *float32)\n", dense4[ti])
	}
	table := func(name, typ string, t [2][3][3]string) {
		g.f("\n// %s is indexed [bits 4, 8][group 32, 64, 128][scale type].\nvar %s = [2][3][3]%s{\n", name, name, typ)
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
	table("qMulti", "func(w *byte, x *float32, xstride int, s, b *byte, xs *float32, ngroups int, out *float32)", multi4)
	g.f("\n// qAny is indexed by scale type.\n")
	g.f("var qAny = [3]func(w *byte, x *float32, s, b *byte, xs *float32, ngroups, packs, bits int, k *bitsConsts) float32{%s}\n", strings.Join(anyb[:], ", "))
	g.f("\n// denseSingle and denseMulti are indexed by element type.\n")
	g.f("var denseSingle = [3]func(w *byte, x *float32, n int) float32{%s}\n", strings.Join(dense1[:], ", "))
	g.f("var denseMulti = [3]func(w *byte, x *float32, xstride, n int, out *float32){%s}\n", strings.Join(dense4[:], ", "))
	if err := os.WriteFile("kernels_amd64.s", s.b.Bytes(), 0o644); err != nil {
		panic(err)
	}
	if err := os.WriteFile("kernels_amd64_gen.go", g.b.Bytes(), 0o644); err != nil {
		panic(err)
	}
}
