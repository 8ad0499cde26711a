package cuda

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// Geometry of the batched products (kernels/25_gemm.cu).
const (
	gemmBM    = 128 // QP_GM_BM: vectors per group of the tensor-core kernels
	gemmBN    = 128 // QP_GM_BN: weight rows per group
	gemmBK    = 32  // QP_GM_BK: columns per step (cols must be a multiple)
	gemmFMABM = 64  // QP_GF_BM: vectors per group of the FMA fallback
	gemmFMABN = 64  // QP_GF_BN: weight rows per group of the FMA fallback
	sizeQGemm = 72  // the QGemm struct

	// useGemm's thresholds, from BenchmarkGemmRate's crossover lines on an
	// H200 (testdata/cuda/gemmrate.log): the batched kernel's time is
	// nearly flat up to n = 128 (27-33 us for a [2048, 512] q4 matrix,
	// 105-117 us for [8192, 2048]) while the matvec's grows with n; the
	// batched product wins from n = 64 on the experts' shapes and from
	// n = 32 on matrices of gemmLargeElems elements or more.
	gemmMinVectors  = 32
	gemmManyVectors = 64
	gemmLargeElems  = 8 << 20
)

// useGemm reports whether MatMul of n vectors on w should run the batched
// product (Backend.gemm) instead of the matvec per vector (Backend.gemv):
// on 4- and 8-bit or dense matrices (the other widths keep the matvec,
// whose generic kernel is as good as the fallback's generic decode), with
// enough vectors that reading W once per vector costs more (see
// gemmMinVectors).
func useGemm(w mlxq.Matrix, n int) bool {
	switch w.Bits {
	case 0, 4, 8:
	default:
		return false
	}
	return n >= gemmManyVectors || n >= gemmMinVectors && w.Rows*w.Cols >= gemmLargeElems
}

// gemmHalf selects the bf16-input tensor-core kernels (twice the tensor
// rate, worst-case error 7.8e-3 x sum|w x|) instead of the tf32 ones
// (9.8e-4 x sum|w x| plus the float32 sums'; kernels/25_gemm.cu). Off: the
// project's bound for quantized products is 1e-3 x sum|w x|.
const gemmHalf = false

// gemmKernel names the tensor-core kernel for w (tf32 inputs, or bf16 with
// half), or "" where only the FMA fallback applies (columns not a multiple
// of gemmBK, other widths; dense f16 and f32 have tf32 kernels only).
func gemmKernel(w mlxq.Matrix, half bool) string {
	if w.Cols%gemmBK != 0 {
		return ""
	}
	k := ""
	switch w.Bits {
	case 4:
		k = "gemm_q4"
	case 8:
		k = "gemm_q8"
	case 0:
		switch w.Type {
		case mlxq.BF16:
			k = "gemm_bf16"
		case mlxq.F16:
			k = "gemm_f16"
		case mlxq.F32:
			k = "gemm_f32"
		}
	}
	if half && k != "" {
		if k == "gemm_f16" || k == "gemm_f32" {
			return k
		}
		k += "_h"
	}
	return k
}

// gemm queues Y = X·Wᵀ for n vectors on device addresses, with the meaning
// of Backend.gemv's arguments: wp, sp, bp the weight, scales and biases of
// w (sp, bp unused for dense), xp the n×Cols float32 inputs, yp the n×Rows
// float32 outputs. w must be a valid Matrix (checkMatrix). The
// tensor-core kernel runs where gemmKernel has one and the weight and
// input addresses are 16-byte aligned (as staging and Alloc'ed weights
// are); any other case runs the FMA fallback. Launches of at most
// maxGridY row blocks each.
func (b *Backend) gemm(wp, sp, bp, xp, yp devptr, w mlxq.Matrix, n int) error {
	if n < 1 || n >= 1<<31 || w.Rows < 1 || w.Cols < 1 || w.Rows >= 1<<31 || w.Cols >= 1<<31 {
		return fmt.Errorf("cuda: gemm: n=%d for a [%d, %d] matrix", n, w.Rows, w.Cols)
	}
	kernel, bm, bn := gemmKernel(w, gemmHalf), gemmBM, gemmBN
	// float32 weights keep float32 products (the FMA kernel, within 1e-4
	// like the matvec): the tf32 kernel would round them to 10 bits.
	if kernel == "" || kernel == "gemm_f32" || wp%16 != 0 || xp%16 != 0 {
		kernel, bm, bn = "gemm_fma", gemmFMABM, gemmFMABN
	}
	return b.gemmLaunch(kernel, bm, bn, wp, sp, bp, xp, yp, w, n)
}

// gemmLaunch queues kernel over [n, w.Rows] in blocks of bm vectors by bn
// rows, splitting the rows so that no launch has more than maxGridY row
// blocks (each launch gets its rows' weights, scales, biases and output
// columns by offset; Y keeps its row stride w.Rows).
func (b *Backend) gemmLaunch(kernel string, bm, bn int, wp, sp, bp, xp, yp devptr, w mlxq.Matrix, n int) error {
	rowBytes := uint64(w.RowBytes())
	sRow := uint64(w.Groups() * w.Type.Size()) // 0 for dense
	step := maxGridY * bn
	for r0 := 0; r0 < w.Rows; r0 += step {
		nr := min(w.Rows-r0, step)
		off := uint64(r0)
		p := params(make([]byte, 0, sizeQGemm)).ptr(wp + off*rowBytes).ptr(sp + off*sRow).ptr(bp + off*sRow).
			ptr(xp).ptr(yp + 4*off).
			u32(n).u32(nr).u32(w.Cols).u32(w.GroupSize).u32(int(w.Type)).u32(w.Bits).u32(w.Rows).u32(0)
		if err := b.launch(kernel, [3]int{ceilDiv(n, bm), ceilDiv(nr, bn), 1}, tgThreads, p, sizeQGemm); err != nil {
			return err
		}
	}
	return nil
}

// matMulGemm is matMul with the batched product, for MatMul calls where
// useGemm(w, n) holds: the arguments are placed as matMul places them
// (weights in place from Alloc memory where 16-byte aligned, as the
// tensor-core kernels need; otherwise staged, 256-byte aligned), then gemm
// runs. Called with b.mu held.
func (b *Backend) matMulGemm(w mlxq.Matrix, y, x []float32, n int) error {
	salign := w.Type.Size()
	aw, as, ab := inW(w.Weight, 16), inW(w.Scales, salign), inW(w.Biases, salign)
	ax, ay := inF(x), outF(y)
	return b.run([]*arg{aw, as, ab, ax, ay}, func() error {
		return b.gemm(aw.ptr, as.ptr, ab.ptr, ax.ptr, ay.ptr, w, n)
	})
}
