//go:build !(linux && (amd64 || arm64))

package cuda

import "testing"

// cublasRate: there is no CUDA device on this platform.
func cublasRate(tb testing.TB, b *Backend, wp, xp, yp devptr, sq int) (float64, string) {
	return 0, "no CUDA on this platform"
}

func kernelResources(b *Backend, kernel string) string { return "no CUDA on this platform" }
