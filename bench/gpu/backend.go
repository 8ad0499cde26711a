package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/qpack-go/qpack/cuda"
	"github.com/qpack-go/qpack/runtime"
)

// errNoGPU marks a step skipped because no CUDA device opens here.
var errNoGPU = errors.New("no CUDA device")

// The optional methods of a GPU backend this command uses, checked at run
// time so that it builds against a backend without them.
type (
	// copyBandwidther measures the device memory's copy bandwidth, bytes
	// read plus written per second (cuda/bandwidth.go).
	copyBandwidther interface {
		MeasureCopyBandwidth(n, reps int) (float64, error)
	}
	// expertCacheSetter sets the device expert cache's byte budget
	// (branch cudalayer).
	expertCacheSetter interface{ SetExpertCacheBytes(n int64) }
	// matMulRater measures the device's batched quantized matmul rate in
	// FLOP/s (branch gemm).
	matMulRater interface {
		MeasureMatMulRate() (float64, error)
	}
)

// openBackend opens the backend a step names; an error wrapping errNoGPU
// means the machine has no CUDA device (the step is skipped).
func openBackend(name string) (runtime.Backend, error) {
	switch name {
	case "cpu":
		return runtime.CPU{}, nil
	case "cuda":
		b, err := cuda.New()
		if errors.Is(err, cuda.ErrNoDevice) {
			return nil, fmt.Errorf("%w: %v", errNoGPU, err)
		}
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("backend %q: want cpu or cuda", name)
}

func closeBackend(b runtime.Backend) {
	if c, ok := b.(io.Closer); ok {
		c.Close()
	}
}

// deviceName names the backend's device.
func deviceName(b runtime.Backend) string {
	if n, ok := b.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "cpu"
}

// setDeviceCache sets the device expert cache's budget where the backend
// has one ("" then), else says what it has instead.
func setDeviceCache(b runtime.Backend, n int64) string {
	if _, ok := b.(*cuda.Backend); !ok {
		return "none (cpu)"
	}
	s, ok := b.(expertCacheSetter)
	if !ok {
		return "none in this build (no SetExpertCacheBytes): experts stay in pinned host memory the GPU reads over the bus"
	}
	s.SetExpertCacheBytes(n)
	return ""
}

// matMulRate is the backend's measured matmul rate, or why there is none.
func matMulRate(b runtime.Backend) (float64, string) {
	m, ok := b.(matMulRater)
	if !ok {
		return 0, "not measured: this backend has no MeasureMatMulRate"
	}
	r, err := m.MeasureMatMulRate()
	if err != nil {
		return 0, "matmul rate: " + err.Error()
	}
	return r, ""
}

// cudaStats records the CUDA backend's counters and first device error.
func cudaStats(b runtime.Backend, res *stepResult) {
	cb, ok := b.(*cuda.Backend)
	if !ok {
		return
	}
	res.CUDAStats = cb.Stats()
	if err := cb.Err(); err != nil {
		res.CUDAErr = err.Error()
	}
}

// cudaCounters returns the CUDA backend's counters (false for another
// backend).
func cudaCounters(b runtime.Backend) (cuda.Stats, bool) {
	cb, ok := b.(*cuda.Backend)
	if !ok {
		return cuda.Stats{}, false
	}
	return cb.Stats(), true
}
