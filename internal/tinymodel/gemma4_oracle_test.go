package tinymodel

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// An independent float64 Gemma 4 forward in Go, written from
// ../shared/reference/gemma4.md §1 over the committed MLX files, reproduces
// the transformers references (logits, every layer's hidden state, the
// logits of the greedy continuation past the sliding window): the
// references, the checkpoints and the documented semantics agree. It is a
// test oracle, not the runtime's implementation.
func TestGemma4OracleMatchesReferences(t *testing.T) {
	for _, v := range Gemma4Variants() {
		t.Run(v.Name, func(t *testing.T) {
			w := gemma4Weights(t, filepath.Join(committedDir, v.Name), v.Spec)
			r := openRefFile(t, filepath.Join(referenceDir, "gemma4_"+v.Name+".safetensors"))
			d := v.Spec.Dims
			const T = 12
			V, H := int64(d.VocabSize), int64(d.HiddenSize)
			ids := r.ints("input_ids", T)
			logits, hidden := gemma4Oracle(d, w, ids)
			check := func(what string, got []float64, want []float64, tol float64) {
				t.Helper()
				var worst float64
				for i := range want {
					worst = max(worst, math.Abs(got[i]-want[i]))
				}
				if worst > tol {
					t.Errorf("%s: max |oracle - transformers| %.3g > %.3g", what, worst, tol)
				}
			}
			check("logits", logits, r.floats("logits", T, V), 1e-4)
			for l := range d.NumHiddenLayers {
				check(fmt.Sprintf("hidden.%d", l), hidden[l], r.floats(fmt.Sprintf("hidden.%d", l), T, H), 1e-4)
			}
			// The greedy continuation (made by transformers' incremental
			// decode past the window): a full forward over the prompt and
			// the continuation gives its logits.
			const N = 8
			cont := r.ints("continuation", N)
			all, _ := gemma4Oracle(d, w, append(append([]int64{}, ids...), cont[:N-1]...))
			check("continuation_logits", all[(T-1)*V:], r.floats("continuation_logits", N, V), 1e-4)
		})
	}
}

// gemma4Weights reads every text tensor as float64, dequantizing MLX affine
// modules with the test's own unpacker (router.proj at 8 bits group 64).
func gemma4Weights(t *testing.T, dir string, s Gemma4Spec) map[string][]float64 {
	t.Helper()
	k := openCkpt(t, dir)
	out := map[string][]float64{}
	for _, name := range k.c.Names() {
		if !strings.HasPrefix(name, "language_model.") || strings.HasSuffix(name, ".scales") || strings.HasSuffix(name, ".biases") {
			continue
		}
		module := strings.TrimSuffix(name, ".weight")
		if _, _, q := k.c.Lookup(module + ".scales"); !q {
			_, out[name] = k.floats(name)
			continue
		}
		bits, group := s.Bits, s.GroupSize
		if strings.HasSuffix(module, ".router.proj") {
			bits, group = 8, 64
		}
		wt, wb := k.tensor(name)
		_, sv := k.floats(module + ".scales")
		_, bv := k.floats(module + ".biases")
		rows := 1
		for _, d := range wt.Shape[:len(wt.Shape)-1] {
			rows *= int(d)
		}
		cols := int(wt.Shape[len(wt.Shape)-1]) * 32 / bits
		out[name] = dequant(wb, sv, bv, rows, cols, bits, group)
	}
	return out
}

func rmsNorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * r
		if w != nil {
			out[i] *= w[i]
		}
	}
	return out
}

// matVec is W [rows, len(x)] times x.
func matVec(w, x []float64, rows int) []float64 {
	n := len(x)
	out := make([]float64, rows)
	for r := range rows {
		var s float64
		for i, v := range x {
			s += w[r*n+i] * v
		}
		out[r] = s
	}
	return out
}

func geluTanh(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// ropeNeoX rotates pairs (d, d+D/2) of each head by pos·inv[d].
func ropeNeoX(x []float64, heads, dim int, pos float64, inv []float64) {
	h := dim / 2
	for hh := range heads {
		v := x[hh*dim : (hh+1)*dim]
		for d := range h {
			s, c := math.Sincos(pos * inv[d])
			a, b := v[d], v[d+h]
			v[d], v[d+h] = a*c-b*s, b*c+a*s
		}
	}
}

func gemma4Oracle(d Gemma4Dims, w map[string][]float64, ids []int64) (logits []float64, hidden [][]float64) {
	const body = "language_model.model."
	H, T, eps := d.HiddenSize, len(ids), d.RMSNormEps
	E := w[body+"embed_tokens.weight"]
	xs := make([][]float64, T)
	for t, id := range ids {
		xs[t] = make([]float64, H)
		for i := range H {
			xs[t][i] = E[int(id)*H+i] * math.Sqrt(float64(H))
		}
	}
	for l := range d.NumHiddenLayers {
		p := fmt.Sprintf("%slayers.%d.", body, l)
		W := func(n string) []float64 { return w[p+n] }
		hd, kv, kEqV := d.attn(l)
		nh := d.NumAttentionHeads
		theta, pairs := d.SlidingRopeTheta, hd/2
		if d.isFull(l) {
			theta, pairs = d.FullRopeTheta, int(d.FullPartialRotary*float64(hd)/2)
		}
		inv := make([]float64, hd/2)
		for i := range pairs {
			inv[i] = math.Pow(theta, -2*float64(i)/float64(hd))
		}
		q, k, vv := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for t := range T {
			hn := rmsNorm(xs[t], W("input_layernorm.weight"), eps)
			qt := matVec(W("self_attn.q_proj.weight"), hn, nh*hd)
			kraw := matVec(W("self_attn.k_proj.weight"), hn, kv*hd)
			vt := kraw
			if !kEqV {
				vt = matVec(W("self_attn.v_proj.weight"), hn, kv*hd)
			}
			q[t], k[t], vv[t] = make([]float64, nh*hd), make([]float64, kv*hd), make([]float64, kv*hd)
			for hh := range nh {
				copy(q[t][hh*hd:], rmsNorm(qt[hh*hd:(hh+1)*hd], W("self_attn.q_norm.weight"), eps))
			}
			for hh := range kv {
				copy(k[t][hh*hd:], rmsNorm(kraw[hh*hd:(hh+1)*hd], W("self_attn.k_norm.weight"), eps))
				copy(vv[t][hh*hd:], rmsNorm(vt[hh*hd:(hh+1)*hd], nil, eps))
			}
			ropeNeoX(q[t], nh, hd, float64(t), inv)
			ropeNeoX(k[t], kv, hd, float64(t), inv)
		}
		next := make([][]float64, T)
		for t := range T {
			att := make([]float64, nh*hd)
			lo := 0
			if !d.isFull(l) {
				lo = max(0, t-d.SlidingWindow+1)
			}
			for hh := range nh {
				g := hh / (nh / kv)
				sc := make([]float64, t+1-lo)
				top := math.Inf(-1)
				for j := lo; j <= t; j++ {
					var s float64
					for i := range hd {
						s += q[t][hh*hd+i] * k[j][g*hd+i] // scale 1.0
					}
					sc[j-lo] = s
					top = max(top, s)
				}
				var z float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - top)
					z += sc[j]
				}
				for j := lo; j <= t; j++ {
					for i := range hd {
						att[hh*hd+i] += sc[j-lo] / z * vv[j][g*hd+i]
					}
				}
			}
			a := rmsNorm(matVec(W("self_attn.o_proj.weight"), att, H), W("post_attention_layernorm.weight"), eps)
			x := make([]float64, H)
			for i := range x {
				x[i] = xs[t][i] + a[i]
			}
			// Dense GeGLU MLP.
			m := rmsNorm(x, W("pre_feedforward_layernorm.weight"), eps)
			I := d.IntermediateSize
			gt, up := matVec(W("mlp.gate_proj.weight"), m, I), matVec(W("mlp.up_proj.weight"), m, I)
			for i := range I {
				gt[i] = geluTanh(gt[i]) * up[i]
			}
			h1 := rmsNorm(matVec(W("mlp.down_proj.weight"), gt, H), W("post_feedforward_layernorm_1.weight"), eps)
			// Router on the post-attention residual.
			xr := rmsNorm(x, nil, eps)
			for i := range xr {
				xr[i] *= W("router.scale")[i] / math.Sqrt(float64(H))
			}
			sc := matVec(W("router.proj.weight"), xr, d.NumExperts)
			top := math.Inf(-1)
			for _, s := range sc {
				top = max(top, s)
			}
			probs := make([]float64, len(sc))
			var z float64
			for e, s := range sc {
				probs[e] = math.Exp(s - top)
				z += probs[e]
			}
			chosen := make([]int, 0, d.TopKExperts)
			var sum float64
			for range d.TopKExperts {
				best := -1
				for e := range probs {
					taken := false
					for _, c := range chosen {
						taken = taken || c == e
					}
					if !taken && (best < 0 || probs[e] > probs[best]) {
						best = e
					}
				}
				chosen = append(chosen, best)
				sum += probs[best] / z
			}
			xe := rmsNorm(x, W("pre_feedforward_layernorm_2.weight"), eps)
			h2 := make([]float64, H)
			Mi := d.MoeIntermediateSize
			for _, e := range chosen {
				we := probs[e] / z / sum * W("router.per_expert_scale")[e]
				eg := matVec(W("experts.switch_glu.gate_proj.weight")[e*Mi*H:(e+1)*Mi*H], xe, Mi)
				eu := matVec(W("experts.switch_glu.up_proj.weight")[e*Mi*H:(e+1)*Mi*H], xe, Mi)
				for i := range Mi {
					eg[i] = geluTanh(eg[i]) * eu[i]
				}
				ed := matVec(W("experts.switch_glu.down_proj.weight")[e*H*Mi:(e+1)*H*Mi], eg, H)
				for i := range H {
					h2[i] += we * ed[i]
				}
			}
			h2 = rmsNorm(h2, W("post_feedforward_layernorm_2.weight"), eps)
			sumh := make([]float64, H)
			for i := range H {
				sumh[i] = h1[i] + h2[i]
			}
			f := rmsNorm(sumh, W("post_feedforward_layernorm.weight"), eps)
			ls := W("layer_scalar")[0]
			next[t] = make([]float64, H)
			for i := range H {
				next[t][i] = (x[i] + f[i]) * ls
			}
		}
		xs = next
		flat := make([]float64, 0, T*H)
		for _, x := range xs {
			flat = append(flat, x...)
		}
		hidden = append(hidden, flat)
	}
	for _, x := range xs {
		n := rmsNorm(x, w[body+"norm.weight"], eps)
		row := matVec(E, n, d.VocabSize)
		for i := range row {
			row[i] = math.Tanh(row[i]/d.FinalLogitSoftcap) * d.FinalLogitSoftcap
		}
		logits = append(logits, row...)
	}
	return logits, hidden
}
