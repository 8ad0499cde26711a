//go:build !amd64 || purego

package mlxq

const (
	asmAvailable = false
	asmF16       = false
)

func q4DotAsm(row []byte, x []float32, s, b []byte, t Float, xs []float32, group int) float32 {
	panic("mlxq: no asm kernels")
}
func q8DotAsm(row []byte, x []float32, s, b []byte, t Float, xs []float32, group int) float32 {
	panic("mlxq: no asm kernels")
}
func dotF32Asm(w []byte, x []float32) float32  { panic("mlxq: no asm kernels") }
func dotBF16Asm(w []byte, x []float32) float32 { panic("mlxq: no asm kernels") }
func dotF16Asm(w []byte, x []float32) float32  { panic("mlxq: no asm kernels") }
