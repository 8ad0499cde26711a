// Package mlxq implements MLX affine quantization: quantize and dequantize for
// 2, 3, 4, 5, 6 and 8 bits with group sizes 32, 64 and 128, packing exactly as
// MLX does (an LSB-first bit stream in little-endian uint32 words), with scales
// and biases in bf16, f16 or f32, plus matrix-vector products computed directly
// on the packed data.
package mlxq
