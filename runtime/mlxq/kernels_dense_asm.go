//go:build (amd64 || arm64) && !purego

package mlxq

// The dense row kernels' Go wrappers are the same on amd64 and arm64: the
// assembly (denseSingle, denseMulti) handles whole blocks, denseDotGo the tail.

// denseDotAsm returns sum_i w_i x_i for a row of type t.
func denseDotAsm(t Float, w []byte, x []float32) float32 {
	n := len(x) &^ 31
	var y float32
	if n > 0 {
		_ = w[n*t.Size()-1]
		y = denseSingle[t](&w[0], &x[0], n)
	}
	if n < len(x) {
		y += denseDotGo(t, w[n*t.Size():], x[n:])
	}
	return y
}

// denseDot4Asm is denseDotAsm for four vectors cols apart in x.
func denseDot4Asm(t Float, w []byte, x []float32, cols int, out *[4]float32) {
	n := cols &^ 15
	_, _ = w[cols*t.Size()-1], x[4*cols-1]
	if n > 0 {
		denseMulti[t](&w[0], &x[0], 4*cols, n, &out[0])
	} else {
		*out = [4]float32{}
	}
	if n < cols {
		for v := range out {
			out[v] += denseDotGo(t, w[n*t.Size():cols*t.Size()], x[v*cols+n:(v+1)*cols])
		}
	}
}
