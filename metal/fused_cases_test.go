package metal

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/qpack-go/qpack/runtime/nn"
)

// The shared kernels that the CUDA layer launches in place of others
// (cuda/layer_normfuse.go) and this layer device does not: rms_norm_rope
// against rms_norm_rows then rope, scatter_rows2 against scatter_rows
// twice, encoded on the layer device, the same bits.
func testFusedShared(t *testing.T, d *Device) {
	r := rand.New(rand.NewPCG(31, 37))
	vec := func(n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = scale * float32(r.NormFloat64())
		}
		return v
	}
	put := func(v []float32) nn.Tensor {
		x := d.Temp(len(v))
		d.Write(x, v)
		return x
	}
	get := func(x nn.Tensor) []float32 {
		v := make([]float32, x.N)
		must(t, d.Read(v, x))
		return v
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: [%d] = %g, want %g", what, i, got[i], want[i])
			}
		}
	}
	for _, c := range []struct {
		rows, width, stride int
		kind                nn.NormKind
		pairs, half, inter  int
	}{
		{8, 256, 512, nn.NormWeight, 32, 32, 0},
		{3, 96, 100, nn.NormOffset, 40, 0, 1},
		{2, 512, 512, nn.NormUnit, 64, 256, 0},
	} {
		what := fmt.Sprintf("rms_norm_rope %+v", c)
		x := vec((c.rows-1)*c.stride+c.width, 2)
		w, f := put(vec(c.width, 1)), put(vec(c.pairs, 0.3))
		s := nn.NormSpec{Rows: c.rows, Width: c.width, Kind: c.kind}
		wp := normWeight("RMSNorm", w, s)
		two, one := put(x), put(x)
		d.mu.Lock()
		p := d.b.params("rms_norm_rows").u32("rows", c.rows).u32("width", c.width).u32("xstride", c.stride).
			u32("ystride", c.stride).f32("eps", 1e-6).u32("kind", int(c.kind))
		d.entry("rms_norm_rows", c.rows, 1, p, ptrIn("x", two), wp, ptrOut("y", two))
		p = d.b.params("rope").u32("rows", c.rows).u32("pairs", c.pairs).u32("half_", c.half).u32("stride", c.stride).
			u32("perpos", 2).u32("pos0", 9).u32("interleaved", c.inter)
		d.entry("rope", ceilDiv(c.rows*c.pairs, tgThreads), 1, p, ptrOut("x", two), ptrIn("invfreq", f))
		p = d.b.params("rms_norm_rope").u32("rows", c.rows).u32("width", c.width).u32("stride", c.stride).
			f32("eps", 1e-6).u32("kind", int(c.kind)).u32("pairs", c.pairs).u32("half_", c.half).
			u32("perpos", 2).u32("pos0", 9).u32("interleaved", c.inter)
		d.entry("rms_norm_rope", c.rows, 1, p, ptrOut("x", one), wp, ptrIn("invfreq", f))
		d.mu.Unlock()
		same(what, get(one), get(two))
	}
	const n, far, w0, w1 = 4, 7, 40, 72
	k, v := put(vec(n*w0, 1)), put(vec(n*w1, 1))
	kc, vc := vec(far*w0, 1), vec(far*w1, 1)
	k1, v1, k2, v2 := put(kc), put(vc), put(kc), put(vc)
	d.mu.Lock()
	ix, ok := d.ints([]int{6, 0, 3, 5})
	if !ok {
		d.mu.Unlock()
		t.Fatal("staging the rows")
	}
	for _, a := range [][3]nn.Tensor{{k1, k, nn.Tensor{}}, {v1, v, nn.Tensor{}}} {
		width := a[0].N / far
		p := d.b.params("scatter_rows").u32("n", n).u32("width", width)
		d.entry("scatter_rows", ceilDiv(n*width, tgThreads), 1, p, ptrOut("dst", a[0]), ptrIn("src", a[1]), ptrIn("rows", ix))
	}
	p := d.b.params("scatter_rows2").u32("n", n).u32("width0", w0).u32("width1", w1)
	d.entry("scatter_rows2", ceilDiv(n*(w0+w1), tgThreads), 1, p, ptrOut("dst0", k2), ptrIn("src0", k),
		ptrOut("dst1", v2), ptrIn("src1", v), ptrIn("rows", ix))
	d.mu.Unlock()
	same("scatter_rows2 keys", get(k2), get(k1))
	same("scatter_rows2 values", get(v2), get(v1))
	must(t, d.EndPass())
}
