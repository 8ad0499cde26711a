//go:build amd64 && !purego

package mlxq

import "golang.org/x/sys/cpu"

// The amd64 kernels need AVX2, FMA and F16C (Haswell and later). Without them the portable Go kernels run.
var (
	asmAvailable = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	asmF16       = asmAvailable
)

// q4DotAVX2 and q8DotAVX2 return sum_g s[g]*sum_{i in g} q_i x_i + b[g]*xs[g]
// over ngroups groups of chunks*16 (4-bit) or chunks*8 (8-bit) elements,
// reading s and b (ngroups values each) as the Float stype.
// chunks must be even (4-bit) or a multiple of 4 (8-bit). The 4-bit kernel
// wants x re-ordered per 16 elements as the 8 even then the 8 odd ones.
//
//go:noescape
func q4DotAVX2(w *byte, x *float32, s, b *byte, xs *float32, ngroups, chunks, stype int) float32

//go:noescape
func q8DotAVX2(w *byte, x *float32, s, b *byte, xs *float32, ngroups, chunks, stype int) float32

// dotF32AVX2, dotBF16AVX2 and dotF16AVX2 return sum_i w_i x_i over n
// elements, n a positive multiple of 32.
//
//go:noescape
func dotF32AVX2(w *byte, x *float32, n int) float32

//go:noescape
func dotBF16AVX2(w *byte, x *float32, n int) float32

//go:noescape
func dotF16AVX2(w *byte, x *float32, n int) float32

// q4DotAsm and q8DotAsm: s and b are the row's raw scales and biases of type
// t, xs its per-group sums of x (len(xs) groups).
func q4DotAsm(row []byte, x []float32, s, b []byte, t Float, xs []float32, group int) float32 {
	ng := len(xs)
	// Bounds the assembly relies on.
	_, _, _, _ = row[ng*group/2-1], x[ng*group-1], s[ng*t.Size()-1], b[ng*t.Size()-1]
	return q4DotAVX2(&row[0], &x[0], &s[0], &b[0], &xs[0], ng, group/16, int(t))
}

func q8DotAsm(row []byte, x []float32, s, b []byte, t Float, xs []float32, group int) float32 {
	ng := len(xs)
	_, _, _, _ = row[ng*group-1], x[ng*group-1], s[ng*t.Size()-1], b[ng*t.Size()-1]
	return q8DotAVX2(&row[0], &x[0], &s[0], &b[0], &xs[0], ng, group/8, int(t))
}

func dotF32Asm(w []byte, x []float32) float32 {
	n := len(x) &^ 31
	var y float32
	if n > 0 {
		_ = w[4*n-1]
		y = dotF32AVX2(&w[0], &x[0], n)
	}
	if n < len(x) {
		y += dotF32Go(w[4*n:], x[n:])
	}
	return y
}

func dotBF16Asm(w []byte, x []float32) float32 {
	n := len(x) &^ 31
	var y float32
	if n > 0 {
		_ = w[2*n-1]
		y = dotBF16AVX2(&w[0], &x[0], n)
	}
	if n < len(x) {
		y += dotBF16Go(w[2*n:], x[n:])
	}
	return y
}

func dotF16Asm(w []byte, x []float32) float32 {
	n := len(x) &^ 31
	var y float32
	if n > 0 {
		_ = w[2*n-1]
		y = dotF16AVX2(&w[0], &x[0], n)
	}
	if n < len(x) {
		y += dotF16Go(w[2*n:], x[n:])
	}
	return y
}
