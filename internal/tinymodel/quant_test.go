package tinymodel

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/safetensors"
)

// dequant unpacks an MLX affine tensor independently of runtime/mlxq: each
// row of the U32 weight is an LSB-first bit stream of `bits`-bit codes;
// w = s*q + b per group of `group` codes.
func dequant(w []byte, s, b []float64, rows, cols, bits, group int) []float64 {
	out := make([]float64, rows*cols)
	rowBytes := cols * bits / 8
	for r := range rows {
		row := w[r*rowBytes : (r+1)*rowBytes]
		for i := range cols {
			var q uint
			for k := range bits {
				bit := i*bits + k
				q |= uint(row[bit/8]>>(bit%8)&1) << k
			}
			g := r*(cols/group) + i/group
			out[r*cols+i] = s[g]*float64(q) + b[g]
		}
	}
	return out
}

func TestDequantHelper(t *testing.T) {
	// Two 3-bit rows of 32 codes 0..7 repeating, written by hand as a bit
	// stream: codes c_i at bits [3i, 3i+3).
	cols, bits := 32, 3
	w := make([]byte, 2*cols*bits/8)
	for r := range 2 {
		for i := range cols {
			c := (i + r) % 8
			for k := range bits {
				if c>>k&1 == 1 {
					bit := r*cols*bits + i*bits + k
					w[bit/8] |= 1 << (bit % 8)
				}
			}
		}
	}
	got := dequant(w, []float64{2, 3}, []float64{-1, 1}, 2, cols, bits, 32)
	for r := range 2 {
		for i := range cols {
			want := []float64{2, 3}[r]*float64((i+r)%8) + []float64{-1, 1}[r]
			if got[r*cols+i] != want {
				t.Fatalf("row %d col %d: %v, want %v", r, i, got[r*cols+i], want)
			}
		}
	}
}

func bf16Round(x float64) float64 {
	b := math.Float32bits(float32(x))
	b += 0x7fff + (b>>16)&1
	return float64(math.Float32frombits(b &^ 0xffff))
}

// Every quantized variant dequantizes to its float variant within the
// quantization error, uses 8-bit g64 for exactly the router and
// shared_expert_gate, declares that in config.json, and stores the other
// tensors as bf16 copies of the float values (A_log F32 for qwen3_5_moe).
func TestQuantizedVariants(t *testing.T) {
	root := generatedVariants(t)
	for _, v := range Variants() {
		if v.Spec.Bits == 0 {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			floatName := strings.SplitN(v.Name, "-", 2)[0] + "-f32"
			fk := openCkpt(t, filepath.Join(root, floatName))
			qk := openCkpt(t, filepath.Join(root, v.Name))
			body, _ := prefixes(v.Spec.Arch)

			var cfg map[string]json.RawMessage
			readJSON(t, filepath.Join(root, v.Name, "config.json"), &cfg)
			if string(cfg["quantization"]) != string(cfg["quantization_config"]) {
				t.Errorf("quantization and quantization_config differ")
			}
			var q map[string]any
			if err := json.Unmarshal(cfg["quantization"], &q); err != nil {
				t.Fatal(err)
			}
			if q["bits"] != float64(v.Spec.Bits) || q["group_size"] != float64(v.Spec.GroupSize) || q["mode"] != "affine" {
				t.Errorf("global quantization %v", q)
			}
			wantOverrides := map[string]bool{}
			for l := range 8 {
				wantOverrides[fmt.Sprintf("%slayers.%d.mlp.gate", body, l)] = true
				wantOverrides[fmt.Sprintf("%slayers.%d.mlp.shared_expert_gate", body, l)] = true
			}
			if len(q) != 3+len(wantOverrides) {
				t.Errorf("quantization has %d keys, want %d", len(q), 3+len(wantOverrides))
			}
			for m := range wantOverrides {
				o, ok := q[m].(map[string]any)
				if !ok || len(o) != 2 || o["bits"] != 8.0 || o["group_size"] != 64.0 {
					t.Errorf("override %s = %v", m, q[m])
				}
			}

			quantized := 0
			for _, name := range fk.c.Names() {
				ft, fv := fk.floats(name)
				module := strings.TrimSuffix(name, ".weight")
				if _, _, isQ := qk.c.Lookup(module + ".scales"); !isQ {
					// Float tensor: bf16 copy (A_log F32 in qwen3_5_moe).
					qt, qv := qk.floats(name)
					wantDT := safetensors.BF16
					if v.Spec.Arch == ArchQwen35MoE && strings.HasSuffix(name, "A_log") {
						wantDT = safetensors.F32
					}
					if qt.DType != wantDT || !sameShape(qt.Shape, ft.Shape...) {
						t.Errorf("%s: %s %v, want %s %v", name, qt.DType, qt.Shape, wantDT, ft.Shape)
						continue
					}
					for i := range fv {
						want := fv[i]
						if wantDT == safetensors.BF16 {
							want = bf16Round(fv[i])
						}
						if qv[i] != want {
							t.Errorf("%s[%d] = %v, want %v", name, i, qv[i], want)
							break
						}
					}
					if strings.Contains(name, "norm") || strings.Contains(name, "conv1d") || strings.HasSuffix(name, "A_log") || strings.HasSuffix(name, "dt_bias") {
						continue
					}
					t.Errorf("%s is not quantized", name)
					continue
				}
				quantized++
				bits, group := v.Spec.Bits, v.Spec.GroupSize
				if wantOverrides[module] {
					bits, group = 8, 64
				}
				wt, wb := qk.tensor(module + ".weight")
				st, sv := qk.floats(module + ".scales")
				bt, bv := qk.floats(module + ".biases")
				n := len(ft.Shape)
				lead := ft.Shape[:n-1]
				rows, cols := 1, int(ft.Shape[n-1])
				for _, d := range lead {
					rows *= int(d)
				}
				if wt.DType != safetensors.U32 || st.DType != safetensors.BF16 || bt.DType != safetensors.BF16 ||
					!sameShape(wt.Shape, append(append([]int64{}, lead...), int64(cols*bits/32))...) ||
					!sameShape(st.Shape, append(append([]int64{}, lead...), int64(cols/group))...) ||
					!sameShape(bt.Shape, st.Shape...) {
					t.Errorf("%s: weight %s %v scales %s %v biases %s %v (bits %d group %d)", module,
						wt.DType, wt.Shape, st.DType, st.Shape, bt.DType, bt.Shape, bits, group)
					continue
				}
				deq := dequant(wb, sv, bv, rows, cols, bits, group)
				nb := float64(int(1)<<bits - 1)
				var worst, maxAbs float64
				for i := range fv {
					g := i / group
					// MLX makes the larger-magnitude end of a group exact and
					// snaps the scale so 0 is representable; the far end may
					// then be clamped up to one step away. Plus bf16 rounding
					// of the input weight and of the stored scale and bias.
					tol := math.Abs(sv[g])*(1.01+nb/256) + (math.Abs(bv[g])+math.Abs(fv[i]))/256 + 1e-7
					e := math.Abs(deq[i] - fv[i])
					if e > tol {
						t.Errorf("%s[%d]: dequantized %v, float %v (scale %v bias %v)", module, i, deq[i], fv[i], sv[g], bv[g])
						break
					}
					worst = max(worst, e)
					maxAbs = max(maxAbs, math.Abs(fv[i]))
				}
				// At most about one step (range/nb, range <= 2 max|w|) plus
				// the bf16 roundings: the error shrinks with the bits.
				if limit := (2.05/nb + 0.008) * maxAbs; worst > limit {
					t.Errorf("%s: worst error %.3g, above %.3g (max |w| %.3g)", module, worst, limit, maxAbs)
				}
			}
			if quantized == 0 {
				t.Fatal("no quantized tensors")
			}
		})
	}
}
