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

func benchRaw(b *testing.B, bits int) {
	r := rand.New(rand.NewPCG(1, 2))
	const cols = 2048
	m, _ := Quantize(randMatrix(r, 1, cols), 1, cols, bits, 64, BF16)
	x := randVec(r, cols)
	xs := make([]float32, cols/64)
	b.SetBytes(int64(len(m.Weight)))
	var sink float32
	for b.Loop() {
		if bits == 4 {
			sink += q4DotAsm(m.Weight, x, m.Scales, m.Biases, BF16, xs, 64)
		} else {
			sink += q8DotAsm(m.Weight, x, m.Scales, m.Biases, BF16, xs, 64)
		}
	}
	_ = sink
}

func BenchmarkRawQ4(b *testing.B) { benchRaw(b, 4) }
func BenchmarkRawQ8(b *testing.B) { benchRaw(b, 8) }
