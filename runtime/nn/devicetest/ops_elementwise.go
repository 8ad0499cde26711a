package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// Gather: repeated and unordered indices, rows at a stride.
func testGather(t *testing.T, dev nn.Device, _ Tolerances) {
	r := rng(9)
	for _, c := range []struct{ rows, stride int }{{1, 10}, {3, 10}, {4, 13}} {
		src := randF32(r, (c.rows-1)*c.stride+10, 1)
		ixs := []int32{7, 0, 3, 3, 9}
		ix, err := dev.Indices(ixs)
		if err != nil {
			t.Fatal(err)
		}
		D := dev.Temp(c.rows*len(ixs) + 1)
		dev.Write(D.Slice(c.rows*len(ixs), c.rows*len(ixs)+1), []float32{5})
		dev.Gather(D.Slice(0, c.rows*len(ixs)), put(dev, src), ix, c.rows, c.stride)
		got := get(t, dev, D)
		want := make([]float32, 0, c.rows*len(ixs)+1)
		for row := range c.rows {
			for _, j := range ixs {
				want = append(want, src[row*c.stride+int(j)])
			}
		}
		exact(t, fmt.Sprintf("Gather rows=%d stride=%d", c.rows, c.stride), got, append(want, 5))
		endPass(t, dev)
	}
}

// GatherRows (repeats) and ScatterRows (a permutation's part): exact
// copies, other rows untouched.
func testRows(t *testing.T, dev nn.Device, _ Tolerances) {
	r := rng(10)
	const w = 7
	src := randF32(r, 6*w, 1)
	rows := []int{4, 0, 4, 2}
	dst := randF32(r, 5*w, 1)
	D := put(dev, dst)
	dev.GatherRows(D, put(dev, src), rows, w)
	want := append([]float32(nil), dst...)
	for i, row := range rows {
		copy(want[i*w:(i+1)*w], src[row*w:(row+1)*w])
	}
	exact(t, "GatherRows", get(t, dev, D), want)

	sc := randF32(r, 3*w, 1)
	base := randF32(r, 6*w, 1)
	B := put(dev, base)
	to := []int{5, 1, 3}
	dev.ScatterRows(B, put(dev, sc), to, w)
	want = append([]float32(nil), base...)
	for i, row := range to {
		copy(want[row*w:(row+1)*w], sc[i*w:(i+1)*w])
	}
	exact(t, "ScatterRows", get(t, dev, B), want)
	endPass(t, dev)
}

// GLU: both activations, odd n, y aliasing gate (as the MLPs call it), the
// tail past n untouched.
func testGLU(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(11)
	for _, act := range []nn.Activation{nn.SiLUGate, nn.GELUTanhGate} {
		for _, alias := range []bool{false, true} {
			const n = 37
			g, u := randF32(r, n+3, 6), randF32(r, n+3, 2)
			G, U := put(dev, g), put(dev, u)
			Y := G
			if !alias {
				Y = put(dev, make([]float32, n+3))
			}
			dev.GLU(act, Y, G, U, n)
			got := get(t, dev, Y)
			want := make([]float64, n)
			for i := range want {
				x := float64(g[i])
				if act == nn.SiLUGate {
					want[i] = silu64(x) * float64(u[i])
				} else {
					want[i] = geluTanh64(x) * float64(u[i])
				}
			}
			within(t, fmt.Sprintf("GLU act=%d alias=%v", act, alias), got[:n], want, relScale(want), tol.Elementwise)
			tail := make([]float32, 3)
			if alias {
				tail = g[n:]
			}
			exact(t, "GLU tail", got[n:], tail)
			endPass(t, dev)
		}
	}
}

// SigmoidMul: rows at strides of o and g, the floats between rows
// untouched.
func testSigmoidMul(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(12)
	for _, c := range []struct{ rows, width, os, gs int }{{1, 5, 5, 5}, {3, 5, 8, 11}, {4, 16, 16, 32}} {
		o := randF32(r, (c.rows-1)*c.os+c.width, 2)
		g := randF32(r, (c.rows-1)*c.gs+c.width, 4)
		O := put(dev, o)
		dev.SigmoidMul(O, put(dev, g), c.rows, c.width, c.os, c.gs)
		got := get(t, dev, O)
		want := f64(o)
		for row := range c.rows {
			for i := range c.width {
				want[row*c.os+i] *= sigmoid64(float64(g[row*c.gs+i]))
			}
		}
		within(t, fmt.Sprintf("SigmoidMul %+v", c), got, want, relScale(want), tol.Elementwise)
		for i := range got { // untouched floats exactly
			if i%c.os >= c.width && got[i] != o[i] {
				t.Fatalf("SigmoidMul %+v wrote o[%d] outside its rows", c, i)
			}
		}
		endPass(t, dev)
	}
}

// Add, Scale, Softcap over odd n, tails untouched.
func testAddScale(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(13)
	const n = 41
	x, y := randF32(r, n+2, 3), randF32(r, n+2, 3)
	X := put(dev, x)
	dev.Add(X, put(dev, y), n)
	got := get(t, dev, X)
	want := make([]float64, n)
	for i := range want {
		want[i] = float64(x[i]) + float64(y[i])
	}
	within(t, "Add", got[:n], want, relScale(want), tol.Elementwise)
	exact(t, "Add tail", got[n:], x[n:])

	X = put(dev, x)
	dev.Scale(X, -0.37, n)
	got = get(t, dev, X)
	for i := range want {
		want[i] = float64(x[i]) * float64(float32(-0.37))
	}
	within(t, "Scale", got[:n], want, relScale(want), tol.Elementwise)
	exact(t, "Scale tail", got[n:], x[n:])

	big := randF32(r, n+2, 100)
	X = put(dev, big)
	dev.Softcap(X, 30, n)
	got = get(t, dev, X)
	for i := range want {
		want[i] = 30 * math.Tanh(float64(big[i])/30)
	}
	within(t, "Softcap", got[:n], want, relScale(want), tol.Elementwise)
	exact(t, "Softcap tail", got[n:], big[n:])
	endPass(t, dev)
}

// AddGated: out[r] += sigmoid(g[r])·x[r].
func testAddGated(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(14)
	for _, c := range []struct{ rows, width int }{{1, 9}, {3, 9}, {5, 32}} {
		out, x, g := randF32(r, c.rows*c.width, 2), randF32(r, c.rows*c.width, 2), randF32(r, c.rows, 4)
		O := put(dev, out)
		dev.AddGated(O, put(dev, x), put(dev, g), c.rows, c.width)
		want := make([]float64, len(out))
		for i := range want {
			want[i] = float64(out[i]) + sigmoid64(float64(g[i/c.width]))*float64(x[i])
		}
		within(t, fmt.Sprintf("AddGated %+v", c), get(t, dev, O), want, relScale(want), tol.Elementwise)
		endPass(t, dev)
	}
}

// Combine: out[t] = Σ_j wts[t·k+j]·res[t·k+j] over previous contents.
func testCombine(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(15)
	for _, c := range []struct{ T, k, width int }{{1, 1, 7}, {1, 3, 7}, {3, 2, 7}, {5, 4, 33}} {
		res := randF32(r, c.T*c.k*c.width, 2)
		wts := randRange(r, c.T*c.k, 0, 1)
		O := put(dev, randF32(r, c.T*c.width, 5)) // overwritten, not added to
		dev.Combine(O, put(dev, res), wts, c.T, c.k, c.width)
		want := make([]float64, c.T*c.width)
		for tt := range c.T {
			for j := range c.k {
				s := tt*c.k + j
				for i := range c.width {
					want[tt*c.width+i] += float64(wts[s]) * float64(res[s*c.width+i])
				}
			}
		}
		within(t, fmt.Sprintf("Combine %+v", c), get(t, dev, O), want, relScale(want), tol.Elementwise)
		endPass(t, dev)
	}
}

// Route: the selection exactly RouteSoftmaxTopK's (exact ties: the lower
// index first), the weights within tolerance of the float64 softmax,
// renormalised or not.
func testRoute(t *testing.T, dev nn.Device, tol Tolerances) {
	r := rng(16)
	const T, E = 5, 12
	for _, k := range []int{1, 3, 4} {
		for _, norm := range []bool{false, true} {
			logits := make([]float32, T*E)
			for tt := range T {
				row := logits[tt*E : (tt+1)*E]
				perm := r.Perm(E)
				for i := range row {
					row[i] = float32(perm[i])*0.25 - 1.5 // distinct, well apart
				}
				switch tt {
				case 0: // every logit tied
					for i := range row {
						row[i] = 0.5
					}
				case 1: // a tie at the top
					hi := 3 + float32(E)*0.25
					row[9], row[2] = hi, hi
				case 2: // a tie across the k-th place
					row[1], row[10], row[6] = 4, 4, 4
				}
			}
			sel := nn.NewRouting(T, k)
			L := put(dev, logits)
			if err := dev.Route(sel, L, T, E, norm); err != nil {
				t.Fatalf("Route: %v", err)
			}
			ref := nn.NewRouting(T, k)
			nn.RouteSoftmaxTopK(ref, append([]float32(nil), logits...), T, E, norm)
			for i := range ref.Sel {
				if sel.Sel[i] != ref.Sel[i] {
					t.Fatalf("k=%d norm=%v: selection %v, RouteSoftmaxTopK %v", k, norm, sel.Sel, ref.Sel)
				}
			}
			want := make([]float64, T*k)
			for tt := range T {
				p := softmax64(f64(logits[tt*E : (tt+1)*E]))
				var sum float64
				for j := range k {
					want[tt*k+j] = p[ref.Sel[tt*k+j]]
					sum += want[tt*k+j]
				}
				if norm {
					for j := range k {
						want[tt*k+j] /= sum
					}
				}
			}
			within(t, fmt.Sprintf("Route k=%d norm=%v weights", k, norm), sel.Wts, want, relScale(want), tol.Elementwise)
			endPass(t, dev)
		}
	}
}
