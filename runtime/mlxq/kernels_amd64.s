//go:build amd64 && !purego

#include "textflag.h"

// Horizontal sum of Y0 into the low lane of X0, plus X14.
#define HSUM \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS       X1, X0, X0; \
	VMOVHLPS     X0, X0, X1; \
	VADDPS       X1, X0, X0; \
	VMOVSHDUP    X0, X1; \
	VADDSS       X1, X0, X0; \
	VADDSS       X14, X0, X0; \
	VZEROUPPER

// Load the scale and bias of the current group (stored as F32, F16 or BF16
// per R11, pointers R8 and R9, advanced) into Y9 (broadcast) and X10, then
// accumulate: Y0 += Y9 * Y1, X14 += X10 * xs[g] (R10, advanced).
#define SCALE_BIAS_ACC \
	CMPQ         R11, $2; \
	JEQ          sbbf16; \
	CMPQ         R11, $1; \
	JEQ          sbf16; \
	VBROADCASTSS (R8), Y9; \
	VMOVSS       (R9), X10; \
	ADDQ         $4, R8; \
	ADDQ         $4, R9; \
	JMP          sbdone; \
sbbf16: \
	MOVWLZX      (R8), AX; \
	SHLL         $16, AX; \
	VMOVD        AX, X9; \
	VPBROADCASTD X9, Y9; \
	MOVWLZX      (R9), AX; \
	SHLL         $16, AX; \
	VMOVD        AX, X10; \
	ADDQ         $2, R8; \
	ADDQ         $2, R9; \
	JMP          sbdone; \
sbf16: \
	MOVWLZX      (R8), AX; \
	VMOVD        AX, X9; \
	VCVTPH2PS    X9, X9; \
	VBROADCASTSS X9, Y9; \
	MOVWLZX      (R9), AX; \
	VMOVD        AX, X10; \
	VCVTPH2PS    X10, X10; \
	ADDQ         $2, R8; \
	ADDQ         $2, R9; \
sbdone: \
	VFMADD231PS  Y9, Y1, Y0; \
	VFMADD231SS  (R10), X10, X14; \
	ADDQ         $4, R10

// func q4DotAVX2(w *byte, x *float32, s, b *byte, xs *float32, ngroups, chunks, stype int) float32
//
// Per 8-byte chunk (16 elements): widen the bytes to 8 dwords, split into low
// nibbles (even elements) and high nibbles (odd elements), convert, and
// multiply-add with x (re-ordered: 8 even then 8 odd). Two chunks per loop.
// Each group gets four fresh accumulators; their sum is scaled by s[g] into
// Y0, and b[g]*xs[g] goes into X14. s and b are read as stype (0 F32, 1 F16,
// 2 BF16).
TEXT ·q4DotAVX2(SB), NOSPLIT, $0-68
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ s+16(FP), R8
	MOVQ b+24(FP), R9
	MOVQ xs+32(FP), R10
	MOVQ ngroups+40(FP), CX
	MOVQ chunks+48(FP), DX
	MOVQ stype+56(FP), R11
	MOVL $15, AX
	MOVQ AX, X15
	VPBROADCASTD X15, Y15
	VXORPS Y0, Y0, Y0
	VXORPS X14, X14, X14

q4group:
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	MOVQ   DX, BX

q4chunk:
	VPMOVZXBD   (SI), Y5
	VPMOVZXBD   8(SI), Y6
	VPAND       Y15, Y5, Y7
	VPSRLD      $4, Y5, Y5
	VPAND       Y15, Y6, Y8
	VPSRLD      $4, Y6, Y6
	VCVTDQ2PS   Y7, Y7
	VCVTDQ2PS   Y5, Y5
	VCVTDQ2PS   Y8, Y8
	VCVTDQ2PS   Y6, Y6
	VFMADD231PS (DI), Y7, Y1
	VFMADD231PS 32(DI), Y5, Y2
	VFMADD231PS 64(DI), Y8, Y3
	VFMADD231PS 96(DI), Y6, Y4
	ADDQ        $16, SI
	ADDQ        $128, DI
	SUBQ        $2, BX
	JNZ         q4chunk

	VADDPS       Y2, Y1, Y1
	VADDPS       Y4, Y3, Y3
	VADDPS       Y3, Y1, Y1
	SCALE_BIAS_ACC
	DECQ         CX
	JNZ          q4group
	HSUM
	MOVSS X0, ret+64(FP)
	RET

// func q8DotAVX2(w *byte, x *float32, s, b *byte, xs *float32, ngroups, chunks, stype int) float32
//
// Same as q4DotAVX2 with one byte per element and x in natural order; four
// 8-byte chunks per loop.
TEXT ·q8DotAVX2(SB), NOSPLIT, $0-68
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ s+16(FP), R8
	MOVQ b+24(FP), R9
	MOVQ xs+32(FP), R10
	MOVQ ngroups+40(FP), CX
	MOVQ chunks+48(FP), DX
	MOVQ stype+56(FP), R11
	VXORPS Y0, Y0, Y0
	VXORPS X14, X14, X14

q8group:
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	MOVQ   DX, BX

q8chunk:
	VPMOVZXBD   (SI), Y5
	VPMOVZXBD   8(SI), Y6
	VPMOVZXBD   16(SI), Y7
	VPMOVZXBD   24(SI), Y8
	VCVTDQ2PS   Y5, Y5
	VCVTDQ2PS   Y6, Y6
	VCVTDQ2PS   Y7, Y7
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS (DI), Y5, Y1
	VFMADD231PS 32(DI), Y6, Y2
	VFMADD231PS 64(DI), Y7, Y3
	VFMADD231PS 96(DI), Y8, Y4
	ADDQ        $32, SI
	ADDQ        $128, DI
	SUBQ        $4, BX
	JNZ         q8chunk

	VADDPS       Y2, Y1, Y1
	VADDPS       Y4, Y3, Y3
	VADDPS       Y3, Y1, Y1
	SCALE_BIAS_ACC
	DECQ         CX
	JNZ          q8group
	HSUM
	MOVSS X0, ret+64(FP)
	RET

// Dense dot products, 32 elements per loop into four accumulators.
#define DENSE_TAIL \
	VADDPS Y2, Y1, Y1; \
	VADDPS Y4, Y3, Y3; \
	VADDPS Y3, Y1, Y0; \
	VXORPS X14, X14, X14

// func dotF32AVX2(w *byte, x *float32, n int) float32
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4

f32loop:
	VMOVUPS     (SI), Y5
	VMOVUPS     32(SI), Y6
	VMOVUPS     64(SI), Y7
	VMOVUPS     96(SI), Y8
	VFMADD231PS (DI), Y5, Y1
	VFMADD231PS 32(DI), Y6, Y2
	VFMADD231PS 64(DI), Y7, Y3
	VFMADD231PS 96(DI), Y8, Y4
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JNZ         f32loop
	DENSE_TAIL
	HSUM
	MOVSS X0, ret+24(FP)
	RET

// func dotBF16AVX2(w *byte, x *float32, n int) float32
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4

bf16loop:
	VPMOVZXWD   (SI), Y5
	VPMOVZXWD   16(SI), Y6
	VPMOVZXWD   32(SI), Y7
	VPMOVZXWD   48(SI), Y8
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VPSLLD      $16, Y8, Y8
	VFMADD231PS (DI), Y5, Y1
	VFMADD231PS 32(DI), Y6, Y2
	VFMADD231PS 64(DI), Y7, Y3
	VFMADD231PS 96(DI), Y8, Y4
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JNZ         bf16loop
	DENSE_TAIL
	HSUM
	MOVSS X0, ret+24(FP)
	RET

// func dotF16AVX2(w *byte, x *float32, n int) float32
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-28
	MOVQ   w+0(FP), SI
	MOVQ   x+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4

f16loop:
	VCVTPH2PS   (SI), Y5
	VCVTPH2PS   16(SI), Y6
	VCVTPH2PS   32(SI), Y7
	VCVTPH2PS   48(SI), Y8
	VFMADD231PS (DI), Y5, Y1
	VFMADD231PS 32(DI), Y6, Y2
	VFMADD231PS 64(DI), Y7, Y3
	VFMADD231PS 96(DI), Y8, Y4
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JNZ         f16loop
	DENSE_TAIL
	HSUM
	MOVSS X0, ret+24(FP)
	RET
