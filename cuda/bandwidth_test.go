package cuda

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// upload copies data into new device memory (through pinned memory).
func upload(tb testing.TB, b *Backend, data []byte) devptr {
	tb.Helper()
	h, _, err := b.dev.hostAlloc(len(data))
	if err != nil {
		tb.Fatal(err)
	}
	defer b.dev.hostFree(h)
	copy(h, data)
	d, err := b.dev.memAlloc(len(data))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.dev.memFree(d) })
	if err := b.dev.htod(d, h); err != nil {
		tb.Fatal(err)
	}
	if err := b.dev.sync(); err != nil {
		tb.Fatal(err)
	}
	return d
}

func randBytes(r *rand.Rand, n int) []byte {
	p := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(p[i:], r.Uint64())
	}
	return p[:n]
}

// BenchmarkMatVecBandwidth measures, in one run, the device's copy
// bandwidth (cuMemcpyDtoD of 1 GiB, bytes read plus written) and the
// quantized matvec kernels on device-resident weights far larger than the
// L2 (bytes of weights, scales, biases, x and y per product), and reports
// the ratio: the fraction of the copy bandwidth the decode matvec reaches.
func BenchmarkMatVecBandwidth(bb *testing.B) {
	b := openOrSkip(bb)
	r := rand.New(rand.NewPCG(7, 8))
	copyGBs := copyBandwidth(bb, b)
	bb.ReportMetric(copyGBs, "copy-GB/s")

	for _, c := range []struct{ rows, cols, bits, group int }{
		{32768, 8192, 4, 64}, {32768, 8192, 4, 32}, {16384, 8192, 8, 64},
	} {
		w := mlxq.Matrix{Rows: c.rows, Cols: c.cols, Bits: c.bits, GroupSize: c.group, Type: mlxq.BF16}
		kernel, _ := gemvKernel(w)
		nsb := c.rows * (c.cols / c.group) * 2
		scales := benchScales(r, nsb)
		wp := upload(bb, b, randBytes(r, c.rows*w.RowBytes()))
		sp, bp := upload(bb, b, scales), upload(bb, b, scales)
		xp := upload(bb, b, benchInput(r, c.cols))
		yp := upload(bb, b, make([]byte, 4*c.rows))
		for range 3 { // warm up
			if err := b.gemv(kernel, wp, sp, bp, xp, yp, w, 1); err != nil {
				bb.Fatal(err)
			}
		}
		const reps = 20
		ms, err := b.dev.timed(func() error {
			for range reps {
				if err := b.gemv(kernel, wp, sp, bp, xp, yp, w, 1); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			bb.Fatal(err)
		}
		bytes := float64(c.rows*w.RowBytes()+2*nsb+4*c.cols+4*c.rows) * reps
		gbs := bytes / (float64(ms) / 1e3) / 1e9
		bb.Logf("%s [%d, %d] q%d g%d bf16: %.1f us per product, %.0f GB/s = %.2fx the copy bandwidth",
			kernel, c.rows, c.cols, c.bits, c.group, 1e3*float64(ms)/reps, gbs, gbs/copyGBs)
		bb.ReportMetric(gbs/copyGBs, "x-copy-q"+strconv.Itoa(c.bits)+"-g"+strconv.Itoa(c.group))
	}
}

// copyBandwidth measures the device's copy bandwidth (cuMemcpyDtoD of
// 1 GiB, bytes read plus written) and logs it.
func copyBandwidth(bb *testing.B, b *Backend) float64 {
	const copyBytes = 1 << 30
	src, dst := upload(bb, b, make([]byte, copyBytes)), upload(bb, b, make([]byte, copyBytes))
	const copies = 10
	ms, err := b.dev.timed(func() error {
		for range copies + 2 {
			if err := b.dev.dtod(dst, src, copyBytes); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		bb.Fatal(err)
	}
	copyGBs := 2 * float64(copyBytes) * (copies + 2) / (float64(ms) / 1e3) / 1e9
	bb.Logf("copy: %.0f GB/s (read+write, %d x 1 GiB in %.2f ms)", copyGBs, copies+2, ms)
	return copyGBs
}

// benchScales is n bytes of bf16 scales (or biases) in [0.001, 0.011): a
// benchmark matrix's, small enough that its products stay finite.
func benchScales(r *rand.Rand, n int) []byte {
	scales := make([]byte, n)
	for i := 0; i+1 < n; i += 2 {
		binary.LittleEndian.PutUint16(scales[i:], mlxq.F32ToBF16(0.001+0.01*r.Float32()))
	}
	return scales
}

// benchInput is a random float32 vector of n elements, as bytes.
func benchInput(r *rand.Rand, n int) []byte { return benchInputScaled(r, n, 1) }

// benchInputScaled is benchInput with randVec's scale.
func benchInputScaled(r *rand.Rand, n int, scale float32) []byte {
	xs := make([]byte, 4*n)
	mlxq.EncodeFloats(xs, randVec(r, n, scale), mlxq.F32)
	return xs
}
