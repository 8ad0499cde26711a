package tinymodel

import (
	"encoding/binary"
	"fmt"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/safetensors"
)

// mlx-lm quantizes the router (mlp.gate) and mlp.shared_expert_gate at
// 8 bits, group 64, whatever the global setting.
const (
	overrideBits  = 8
	overrideGroup = 64
)

func bf16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], mlxq.F32ToBF16(x))
	}
	return b
}

// roundBF16 returns v rounded to bfloat16 values, as mlx-lm's conversion
// casts weights to bf16 before quantizing them.
func roundBF16(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = mlxq.BF16ToF32(mlxq.F32ToBF16(x))
	}
	return out
}

// quantizeModel converts the float model the way mlx-lm's convert does:
// every Linear/Embedding/SwitchLinear weight whose input dim is a multiple
// of its group size becomes {weight U32, scales BF16, biases BF16}; the
// router and shared_expert_gate use 8-bit group 64 and are returned as
// overrides (module paths); every other tensor is stored in BF16, except
// A_log of qwen3_5_moe, which mlx-lm keeps in F32.
func quantizeModel(s Spec, ws []floatTensor) ([]outTensor, []string, error) {
	var out []outTensor
	var overrides []string
	for i := range ws {
		w := &ws[i]
		bits, group := s.Bits, s.GroupSize
		if w.override {
			bits, group = overrideBits, overrideGroup
		}
		cols := w.shape[len(w.shape)-1]
		if w.kind != kindLinear || cols%group != 0 {
			dt, data := safetensors.BF16, bf16Bytes(w.vals)
			if w.kind == kindALog && s.Arch == ArchQwen35MoE {
				dt, data = safetensors.F32, f32Bytes(w.vals)
			}
			out = append(out, outTensor{safetensors.Spec{Name: w.name, DType: dt, Shape: shape64(w.shape)}, data})
			continue
		}
		// A 2-D [out, in] matrix or stacked experts [E, out, in]: quantize
		// each [out, in] slab and concatenate.
		rows := w.shape[len(w.shape)-2]
		slabs := 1
		if len(w.shape) == 3 {
			slabs = w.shape[0]
		}
		var wt, sc, bi []byte
		vals := roundBF16(w.vals)
		for e := range slabs {
			m, err := mlxq.Quantize(vals[e*rows*cols:(e+1)*rows*cols], rows, cols, bits, group, mlxq.BF16)
			if err != nil {
				return nil, nil, fmt.Errorf("tinymodel: quantizing %s: %w", w.name, err)
			}
			wt = append(wt, m.Weight...)
			sc = append(sc, m.Scales...)
			bi = append(bi, m.Biases...)
		}
		lead := shape64(w.shape[:len(w.shape)-1])
		mod := w.module()
		out = append(out,
			outTensor{safetensors.Spec{Name: mod + ".weight", DType: safetensors.U32, Shape: append(lead, int64(cols*bits/32))}, wt},
			outTensor{safetensors.Spec{Name: mod + ".scales", DType: safetensors.BF16, Shape: append(shape64(w.shape[:len(w.shape)-1]), int64(cols/group))}, sc},
			outTensor{safetensors.Spec{Name: mod + ".biases", DType: safetensors.BF16, Shape: append(shape64(w.shape[:len(w.shape)-1]), int64(cols/group))}, bi},
		)
		if w.override {
			overrides = append(overrides, mod)
		}
	}
	return out, overrides, nil
}
