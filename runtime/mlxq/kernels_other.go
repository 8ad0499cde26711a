//go:build !(amd64 || arm64) || purego

package mlxq

const asmAvailable = false

const asmAnyBits = false

func permuteQ4(dst, src []float32) { panic("mlxq: no asm kernels") }

func qDotAsm(bits int, row []byte, x []float32, s, b []byte, t Float, xs []float32, group int) float32 {
	panic("mlxq: no asm kernels")
}

func qDot4Asm(bits int, row []byte, x []float32, cols int, s, b []byte, t Float, xs []float32, group int, out *[4]float32) {
	panic("mlxq: no asm kernels")
}

func qAnyAsm(bits int, w []byte, x []float32, s, b []byte, t Float, xs []float32, group int) (float32, bool) {
	panic("mlxq: no asm kernels")
}

func denseDotAsm(t Float, w []byte, x []float32) float32 { panic("mlxq: no asm kernels") }

func denseDot4Asm(t Float, w []byte, x []float32, cols int, out *[4]float32) {
	panic("mlxq: no asm kernels")
}
