package mlxq

import (
	"math/rand/v2"
	"testing"
)

// In-cache kernel throughput, one goroutine (go test -bench Kernel).
func benchKernel(b *testing.B, bits int, asm bool) {
	saved := useAsm
	useAsm = asm && asmAvailable
	defer func() { useAsm = saved }()
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 64, 2048
	m, err := Quantize(randMatrix(r, rows, cols), rows, cols, bits, 64, BF16)
	if err != nil {
		b.Fatal(err)
	}
	x := randVec(r, cols)
	y := make([]float32, rows)
	b.SetBytes(int64(len(m.Weight)))
	for b.Loop() {
		m.MatVec(y, x)
	}
}

func BenchmarkKernelQ4Asm(b *testing.B) { benchKernel(b, 4, true) }
func BenchmarkKernelQ8Asm(b *testing.B) { benchKernel(b, 8, true) }
func BenchmarkKernelQ4Go(b *testing.B)  { benchKernel(b, 4, false) }
func BenchmarkKernelQ8Go(b *testing.B)  { benchKernel(b, 8, false) }
func BenchmarkKernelQ3Go(b *testing.B)  { benchKernel(b, 3, false) }
func BenchmarkKernelQ3Asm(b *testing.B) { benchKernel(b, 3, true) }
func BenchmarkKernelQ6Asm(b *testing.B) { benchKernel(b, 6, true) }
func BenchmarkKernelQ2Go(b *testing.B)  { benchKernel(b, 2, false) }
func BenchmarkKernelQ5Go(b *testing.B)  { benchKernel(b, 5, false) }
func BenchmarkKernelQ6Go(b *testing.B)  { benchKernel(b, 6, false) }
