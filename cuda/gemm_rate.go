package cuda

import (
	"errors"
	"fmt"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// matMulRateDim is the square problem MeasureMatMulRate times.
const matMulRateDim = 8192

// MeasureMatMulRate returns the GPU's dense matrix-product rate in FLOP/s,
// measured now: the bf16 tensor-core baseline kernel (gemm_base, float32
// accumulation) on an 8192³ product of values in [-1, 1), timed with
// events over three runs after two warm-up runs. It is the baseline the
// batched products of a prefill are compared with (bench/gpu). It needs
// about 640 MiB of device memory.
func (b *Backend) MeasureMatMulRate() (float64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errors.New("cuda: MeasureMatMulRate on a closed backend")
	}
	const sq = matMulRateDim
	m := mlxq.Matrix{Rows: sq, Cols: sq, Type: mlxq.BF16}
	host, _, err := b.dev.hostAlloc(2 * sq * sq)
	if err != nil {
		return 0, err
	}
	defer b.dev.hostFree(host)
	// bf16 values spread over [-1, 1): a fixed sequence, no zeros.
	for i := 0; i+1 < len(host); i += 2 {
		v := uint16(0x3c00 + (i/2*2654435761)%0x0380)
		if i/2%2 == 1 {
			v |= 0x8000
		}
		host[i], host[i+1] = byte(v), byte(v>>8)
	}
	var ptrs [3]devptr
	for i, n := range []int{2 * sq * sq, 2 * sq * sq, 4 * sq * sq} {
		if ptrs[i], err = b.dev.memAlloc(n); err != nil {
			return 0, fmt.Errorf("cuda: MeasureMatMulRate: %w", err)
		}
		defer b.dev.memFree(ptrs[i])
	}
	wp, xp, yp := ptrs[0], ptrs[1], ptrs[2]
	if err := b.dev.htod(wp, host); err != nil {
		return 0, err
	}
	if err := b.dev.htod(xp, host); err != nil {
		return 0, err
	}
	run := func() error { return b.gemmLaunch("gemm_base", gemmBM, gemmBN, wp, 0, 0, xp, yp, m, sq) }
	for range 2 {
		if err := run(); err != nil {
			return 0, err
		}
	}
	if err := b.dev.sync(); err != nil {
		return 0, err
	}
	const reps = 3
	ms, err := b.dev.timed(func() error {
		for range reps {
			if err := run(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !(ms > 0) {
		return 0, fmt.Errorf("cuda: %d products timed at %g ms", reps, ms)
	}
	return 2 * float64(sq) * sq * sq * reps / (float64(ms) / 1e3), nil
}
