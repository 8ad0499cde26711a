package tinymodel

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/safetensors"
)

// The Gemma 4 references were computed from the committed checkpoints whose
// hashes gemma4_reference.py recorded in gemma4_tiny.sha256. If a copy
// changes, rerun testdata/reference/gemma4_reference.py on the device
// machine and commit its outputs with the new gemma4_tiny.sha256.
func TestGemma4ReferencesMatchCommittedCheckpoints(t *testing.T) {
	f, err := os.Open(filepath.Join(referenceDir, "gemma4_tiny.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("gemma4_tiny.sha256: bad line %q", sc.Text())
		}
		listed[name] = true
		b, err := os.ReadFile(filepath.Join(committedDir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		h := sha256.Sum256(b)
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("testdata/tiny/%s changed since the references were made: rerun gemma4_reference.py", name)
		}
	}
	for _, v := range Gemma4Variants() {
		for _, n := range listFiles(t, filepath.Join(committedDir, v.Name)) {
			if !listed[v.Name+"/"+n] {
				t.Errorf("testdata/tiny/%s/%s not covered by gemma4_tiny.sha256", v.Name, n)
			}
		}
	}
}

// refFile is a reference safetensors file read for checks.
type refFile struct {
	t    *testing.T
	h    *safetensors.Header
	data []byte
}

func (r refFile) get(name string, dt safetensors.DType, shape ...int64) []byte {
	r.t.Helper()
	tn, ok := r.h.Tensor(name)
	if !ok {
		r.t.Fatalf("no tensor %s", name)
	}
	if tn.DType != dt || !sameShape(tn.Shape, shape...) {
		r.t.Fatalf("%s: %s %v, want %s %v", name, tn.DType, tn.Shape, dt, shape)
	}
	return r.data[tn.Offset : tn.Offset+tn.Size]
}

func (r refFile) ints(name string, n int64) []int64 {
	r.t.Helper()
	b := r.get(name, safetensors.I64, n)
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

func (r refFile) floats(name string, shape ...int64) []float64 {
	r.t.Helper()
	b := r.get(name, safetensors.F32, shape...)
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		if math.IsNaN(out[i]) || math.IsInf(out[i], 0) {
			r.t.Fatalf("%s[%d] not finite", name, i)
		}
	}
	return out
}

func argmax(row []float64) int64 {
	best := 0
	for j, x := range row {
		if x > row[best] {
			best = j
		}
	}
	return int64(best)
}

// Each Gemma 4 reference has the tensors gemma4_reference.py documents,
// consistent with each other: greedy = argmax(logits), the incremental
// decode equal to the full forward, every continuation token the argmax
// of the logits that chose it, and the first of those the last prompt row.
func TestGemma4ReferenceFiles(t *testing.T) {
	for _, v := range Gemma4Variants() {
		t.Run(v.Name, func(t *testing.T) {
			path := filepath.Join(referenceDir, "gemma4_"+v.Name+".safetensors")
			h, err := safetensors.ReadFileHeader(path)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			r := refFile{t, h, data}
			d := v.Spec.Dims
			const T, N = 12, 8
			V, H := int64(d.VocabSize), int64(d.HiddenSize)
			if want := 6 + d.NumHiddenLayers; len(h.Tensors) != want {
				t.Errorf("%d tensors, want %d", len(h.Tensors), want)
			}
			ids := r.ints("input_ids", T)
			if !slices.Equal(ids, []int64{357, 117, 198, 44, 256, 310, 72, 355, 358, 383, 0, 261}) {
				t.Errorf("input_ids %v", ids)
			}
			logits, dec := r.floats("logits", T, V), r.floats("decode_logits", T, V)
			greedy := r.ints("greedy", T)
			for i := range int64(T) {
				row := logits[i*V : (i+1)*V]
				if g := argmax(row); g != greedy[i] {
					t.Errorf("greedy[%d] = %d, argmax %d", i, greedy[i], g)
				}
				for j, x := range row {
					if dx := math.Abs(x - dec[i*V+int64(j)]); dx > 1e-5 {
						t.Fatalf("decode_logits[%d][%d] differs from logits by %g", i, j, dx)
					}
					if math.Abs(x) >= d.FinalLogitSoftcap {
						t.Fatalf("logits[%d][%d] = %g beyond the softcap", i, j, x)
					}
				}
			}
			cont, cl := r.ints("continuation", N), r.floats("continuation_logits", N, V)
			if !slices.Equal(cl[:V], dec[(T-1)*V:]) {
				t.Error("continuation_logits[0] is not the last decode row")
			}
			for k := range int64(N) {
				if g := argmax(cl[k*V : (k+1)*V]); g != cont[k] {
					t.Errorf("continuation[%d] = %d, argmax %d", k, cont[k], g)
				}
			}
			for l := range d.NumHiddenLayers {
				hs := r.floats(fmt.Sprintf("hidden.%d", l), T, H)
				if _, std := meanStd(hs); std < 0.1 {
					t.Errorf("hidden.%d std %.3g: activations vanish", l, std)
				}
			}
		})
	}
}
