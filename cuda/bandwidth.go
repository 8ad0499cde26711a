package cuda

import (
	"errors"
	"fmt"
)

// MeasureCopyBandwidth measures the device memory's bandwidth as
// BenchmarkMatVecBandwidth does: cuMemcpyDtoD of n bytes between two device
// buffers, reps times on the backend's stream after two untimed warm-up
// copies, timed by events around the copies; it returns bytes read plus
// bytes written per second (2·n·reps ÷ the GPU time). n should be far larger
// than the L2 (1 GiB is the usual figure); the two buffers are freed before
// it returns.
func (b *Backend) MeasureCopyBandwidth(n, reps int) (float64, error) {
	if n <= 0 || reps <= 0 {
		return 0, fmt.Errorf("cuda: MeasureCopyBandwidth(%d, %d): both must be positive", n, reps)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errors.New("cuda: MeasureCopyBandwidth on a closed backend")
	}
	src, err := b.dev.memAlloc(n)
	if err != nil {
		return 0, err
	}
	defer b.dev.memFree(src)
	dst, err := b.dev.memAlloc(n)
	if err != nil {
		return 0, err
	}
	defer b.dev.memFree(dst)
	for range 2 {
		if err := b.dev.dtod(dst, src, n); err != nil {
			return 0, err
		}
	}
	if err := b.dev.sync(); err != nil {
		return 0, err
	}
	ms, err := b.dev.timed(func() error {
		for range reps {
			if err := b.dev.dtod(dst, src, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !(ms > 0) {
		return 0, fmt.Errorf("cuda: %d copies of %d bytes timed at %g ms", reps, n, ms)
	}
	return 2 * float64(n) * float64(reps) / (float64(ms) / 1e3), nil
}
