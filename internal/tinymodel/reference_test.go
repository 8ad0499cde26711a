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

const referenceDir = "../../testdata/reference"

// The references were computed from the committed checkpoints whose hashes
// make_reference's run recorded in tiny.sha256. If the copies change, the
// references are stale: rerun testdata/reference/make_reference.py on the
// device machine and commit its outputs together with a new tiny.sha256.
func TestReferencesMatchCommittedCheckpoints(t *testing.T) {
	f, err := os.Open(filepath.Join(referenceDir, "tiny.sha256"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("tiny.sha256: bad line %q", sc.Text())
		}
		listed[name] = true
		b, err := os.ReadFile(filepath.Join(committedDir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		h := sha256.Sum256(b)
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("testdata/tiny/%s changed since the references were made: rerun make_reference.py", name)
		}
	}
	for _, v := range Variants() {
		for _, n := range listFiles(t, filepath.Join(committedDir, v.Name)) {
			if !listed[v.Name+"/"+n] {
				t.Errorf("testdata/tiny/%s/%s not covered by the references' tiny.sha256", v.Name, n)
			}
		}
	}
}

// Each reference file has exactly the tensors of notes/TINY.md, finite,
// with greedy = argmax(logits) and the same input ids everywhere.
func TestReferenceFiles(t *testing.T) {
	var ids0 []int64
	for _, v := range Variants() {
		t.Run(v.Name, func(t *testing.T) {
			path := filepath.Join(referenceDir, v.Name+".safetensors")
			h, err := safetensors.ReadFileHeader(path)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]int64{"input_ids": {12}, "logits": {12, 384}, "greedy": {12}}
			for l := range 8 {
				want[fmt.Sprintf("hidden.%d", l)] = []int64{12, 64}
			}
			if len(h.Tensors) != len(want) {
				t.Errorf("%d tensors, want %d", len(h.Tensors), len(want))
			}
			get := func(name string) (safetensors.Tensor, []byte) {
				tn, ok := h.Tensor(name)
				if !ok {
					t.Fatalf("no tensor %s", name)
				}
				if !sameShape(tn.Shape, want[name]...) {
					t.Fatalf("%s: shape %v, want %v", name, tn.Shape, want[name])
				}
				return tn, data[tn.Offset : tn.Offset+tn.Size]
			}
			ints := func(name string) []int64 {
				tn, b := get(name)
				if tn.DType != safetensors.I64 {
					t.Fatalf("%s: dtype %s", name, tn.DType)
				}
				out := make([]int64, len(b)/8)
				for i := range out {
					out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
				}
				return out
			}
			floats := func(name string) []float32 {
				tn, b := get(name)
				if tn.DType != safetensors.F32 {
					t.Fatalf("%s: dtype %s", name, tn.DType)
				}
				out := make([]float32, len(b)/4)
				for i := range out {
					out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
					if math.IsNaN(float64(out[i])) || math.IsInf(float64(out[i]), 0) {
						t.Fatalf("%s[%d] not finite", name, i)
					}
				}
				return out
			}
			ids := ints("input_ids")
			for _, id := range ids {
				if id < 0 || id >= 384 {
					t.Errorf("input id %d outside the vocabulary", id)
				}
			}
			if ids0 == nil {
				ids0 = ids
			} else if !slices.Equal(ids, ids0) {
				t.Errorf("input_ids %v differ from %v", ids, ids0)
			}
			logits, greedy := floats("logits"), ints("greedy")
			for tok := range 12 {
				row := logits[tok*384 : (tok+1)*384]
				best := 0
				for j, x := range row {
					if x > row[best] {
						best = j
					}
				}
				if greedy[tok] != int64(best) {
					t.Errorf("greedy[%d] = %d, argmax %d", tok, greedy[tok], best)
				}
			}
			for l := range 8 {
				hs := floats(fmt.Sprintf("hidden.%d", l))
				_, std := meanStd(f64(hs))
				if std < 0.1 {
					t.Errorf("hidden.%d std %.3g: activations vanish", l, std)
				}
			}
		})
	}
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
