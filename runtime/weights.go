package runtime

import (
	"fmt"
	"strings"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

// Weights turns named tensors into the model's weights, checking names,
// dtypes and shapes and naming the tensor in every error.
//
// An architecture's Build reads its tensors through a Weights. Build may be
// called twice: with an Allocator, a first sizing pass checks every tensor
// without reading it (the matrices and vectors it returns are empty) and
// adds up the memory to take, then a second pass reads them into it.
type Weights struct {
	cfg *Config
	src TensorSource
	// arena, if set, receives the tensors the model keeps. While it has no
	// memory yet (the sizing pass), tensors are checked but not read, and
	// their sizes are added up; the weights built are empty.
	arena *denseArena
}

func (b *Weights) sizing() bool { return b.arena != nil && b.arena.mem == nil }

// keep reads tensor name (size bytes, from its Info) into memory the Model
// keeps: its place in the arena if there is one, else wherever the source
// puts it.
func (b *Weights) keep(name string, size int64) ([]byte, error) {
	if b.arena == nil {
		return b.src.Read(name)
	}
	dst, err := b.arena.take(size)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	if err := readInto(b.src, name, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

func (b *Weights) floatType(name, dtype string) (mlxq.Float, error) {
	f, err := mlxq.FloatFromDType(dtype)
	if err != nil {
		return 0, fmt.Errorf("tensor %s: dtype %s is not a float type (want F32, F16 or BF16)", name, dtype)
	}
	return f, nil
}

// ShapeString writes a shape as [2, 3].
func ShapeString(s []int64) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Vector reads a float tensor of exactly want elements (any shape whose
// product is want, e.g. [C, K, 1]) as float32.
func (b *Weights) Vector(name string, shape ...int64) ([]float32, error) {
	dtype, got, ok := b.src.Info(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s missing", name)
	}
	if !sameShape(got, shape) {
		return nil, fmt.Errorf("tensor %s: shape %s, want %s", name, ShapeString(got), ShapeString(shape))
	}
	f, err := b.floatType(name, dtype)
	if err != nil {
		return nil, err
	}
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if b.sizing() {
		b.arena.reserve(4 * n)
		return nil, nil
	}
	data, err := b.src.Read(name)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != n*int64(f.Size()) {
		return nil, fmt.Errorf("tensor %s: %d bytes, want %d", name, len(data), n*int64(f.Size()))
	}
	var out []float32
	if b.arena != nil {
		if out, err = b.arena.float32s(n); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
	} else {
		out = make([]float32, n)
	}
	mlxq.DecodeFloats(out, data, f)
	return out, nil
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Config is the model's configuration.
func (b *Weights) Config() *Config { return b.cfg }

// Info returns a tensor's dtype and shape, or false if it is absent.
func (b *Weights) Info(name string) (dtype string, shape []int64, ok bool) { return b.src.Info(name) }

// Sizing reports whether this is the sizing pass (see Weights).
func (b *Weights) Sizing() bool { return b.sizing() }

// Has reports whether tensor name exists.
func (b *Weights) Has(name string) bool {
	_, _, ok := b.src.Info(name)
	return ok
}

// Matrix loads module (a path such as "model.layers.0.mlp.gate") as a
// [rows, cols] matrix: MLX affine quantized if module.scales exists, else a
// dense float matrix.
func (b *Weights) Matrix(module string, rows, cols int) (mlxq.Matrix, error) {
	wname := module + ".weight"
	wtype, wshape, ok := b.src.Info(wname)
	if !ok {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s missing", wname)
	}
	if b.Has(module + ".scales") {
		return b.quantized(module, rows, cols, wtype, wshape)
	}
	if !sameShape(wshape, []int64{int64(rows), int64(cols)}) {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s: shape %s, want [%d, %d]", wname, ShapeString(wshape), rows, cols)
	}
	f, err := b.floatType(wname, wtype)
	if err != nil {
		return mlxq.Matrix{}, err
	}
	size := int64(rows) * int64(cols) * int64(f.Size())
	if b.sizing() {
		b.arena.reserve(size)
		return mlxq.Matrix{}, nil
	}
	data, err := b.keep(wname, size)
	if err != nil {
		return mlxq.Matrix{}, err
	}
	m, err := mlxq.NewDense(rows, cols, f, data)
	if err != nil {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s: %w", wname, err)
	}
	return m, nil
}

func (b *Weights) quantized(module string, rows, cols int, wtype string, wshape []int64) (mlxq.Matrix, error) {
	wname, sname, bname := module+".weight", module+".scales", module+".biases"
	stype, sshape, _ := b.src.Info(sname)
	btype, bshape, ok := b.src.Info(bname)
	if !ok {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s has scales but no %s: only MLX affine quantization (with biases) is supported", wname, bname)
	}
	p, err := quantParams(b.cfg, module, wname, wtype, stype, btype, wshape, sshape, bshape, rows, cols)
	if err != nil {
		return mlxq.Matrix{}, err
	}
	f, _ := mlxq.FloatFromDType(stype)
	sizes := [3]int64{wshape[0] * wshape[1] * 4, sshape[0] * sshape[1] * int64(f.Size()), bshape[0] * bshape[1] * int64(f.Size())}
	if b.sizing() {
		for _, n := range sizes {
			b.arena.reserve(n)
		}
		return mlxq.Matrix{}, nil
	}
	var bufs [3][]byte
	for i, n := range []string{wname, sname, bname} {
		if bufs[i], err = b.keep(n, sizes[i]); err != nil {
			return mlxq.Matrix{}, err
		}
	}
	m, err := mlxq.NewQuantized(rows, cols, p.Bits, p.GroupSize, f, bufs[0], bufs[1], bufs[2])
	if err != nil {
		return mlxq.Matrix{}, fmt.Errorf("tensor %s: %w", wname, err)
	}
	return m, nil
}

// quantParams resolves and cross-checks the affine parameters of one
// quantized module (weight U32 [rows, cols·bits/32], scales and biases
// [rows, cols/group] of one float type; shapes may carry leading dims, as
// for stacked experts, already stripped by the caller).
func quantParams(cfg *Config, module, wname, wtype, stype, btype string, wshape, sshape, bshape []int64, rows, cols int) (QuantParams, error) {
	p, ok := cfg.Quant.For(module)
	if !ok {
		return p, fmt.Errorf("tensor %s is quantized (%s.scales exists) but config.json declares no quantization for %s", wname, module, module)
	}
	if wtype != "U32" {
		return p, fmt.Errorf("tensor %s: quantized weight dtype %s, want U32", wname, wtype)
	}
	if _, err := mlxq.FloatFromDType(stype); err != nil {
		return p, fmt.Errorf("tensor %s.scales: dtype %s is not a float type", module, stype)
	}
	if btype != stype {
		return p, fmt.Errorf("tensor %s.biases: dtype %s differs from scales dtype %s", module, btype, stype)
	}
	if len(wshape) != 2 || len(sshape) != 2 || !sameShape(sshape, bshape) {
		return p, fmt.Errorf("tensor %s: quantized shapes weight %s scales %s biases %s, want 2-D with equal scales and biases",
			wname, ShapeString(wshape), ShapeString(sshape), ShapeString(bshape))
	}
	wcols, scols := wshape[1], sshape[1]
	if scols <= 0 || wcols <= 0 {
		return p, fmt.Errorf("tensor %s: empty quantized shape", wname)
	}
	// bits = 32·weight_cols / (scales_cols·group)
	if 32*wcols != int64(p.Bits)*scols*int64(p.GroupSize) {
		num := 32 * wcols
		den := scols * int64(p.GroupSize)
		implied := "not an integer"
		if num%den == 0 {
			implied = fmt.Sprint(num / den)
		}
		return p, fmt.Errorf("tensor %s: config says %d bits group %d, but weight %s with scales %s implies %s bits at group %d",
			wname, p.Bits, p.GroupSize, ShapeString(wshape), ShapeString(sshape), implied, p.GroupSize)
	}
	if wshape[0] != int64(rows) || sshape[0] != int64(rows) || scols*int64(p.GroupSize) != int64(cols) {
		return p, fmt.Errorf("tensor %s: quantized shape %s (scales %s) is [%d, %d] dequantized, want [%d, %d]",
			wname, ShapeString(wshape), ShapeString(sshape), wshape[0], scols*int64(p.GroupSize), rows, cols)
	}
	return p, nil
}
