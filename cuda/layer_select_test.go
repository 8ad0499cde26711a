package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// chunkCounts is how many ids of c fall in each chunk of gpukernels.SelChunk.
func chunkCounts(c *nn.TopLogits, n int) []int {
	cnt := make([]int, gpukernels.SelectChunks(n))
	for _, id := range c.IDs {
		cnt[int(id)/gpukernels.SelChunk]++
	}
	return cnt
}

// checkSelection compares a selection with nn.SelectTopRef's: the same ids,
// logit bits and threshold when ok; when not, the reference must fail too
// or have a chunk with more candidates than its region holds.
func checkSelection(t *testing.T, what string, got *nn.TopLogits, ok bool, x []float32, k int) {
	t.Helper()
	var want nn.TopLogits
	wok := nn.SelectTopRef(&want, x, k, 0)
	if !ok {
		if len(got.IDs) != 0 {
			t.Fatalf("%s: declined but left %d ids", what, len(got.IDs))
		}
		if wok && slices.Max(chunkCounts(&want, len(x))) <= k+gpukernels.SelSlack {
			t.Fatalf("%s: declined, the reference lists %d ids (%v a chunk)", what, len(want.IDs), chunkCounts(&want, len(x)))
		}
		return
	}
	if !wok {
		t.Fatalf("%s: selected %d ids, the reference declines", what, len(got.IDs))
	}
	if !slices.Equal(got.IDs, want.IDs) || got.K != k || got.N != len(x) || got.Th != want.Th {
		t.Fatalf("%s: ids %v th %g k %d n %d, want %v th %g", what, got.IDs, got.Th, got.K, got.N, want.IDs, want.Th)
	}
	for j := range got.Logits {
		if math.Float32bits(got.Logits[j]) != math.Float32bits(want.Logits[j]) {
			t.Fatalf("%s: logit of id %d is %g, want %g", what, got.IDs[j], got.Logits[j], want.Logits[j])
		}
	}
}

// The select kernels (the bodies on the CPU, through their launcher and
// parseSelection) against nn.SelectTopRef: spread values, ties, NaN, ±Inf
// and ±0, the top crowded into one chunk, too few values that count.
func TestSelectTopKernelsCPU(t *testing.T) {
	b, d := cpuBackend(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct{ n, k int }{{1, 1}, {5, 3}, {300, 64}, {4095, 1}, {4096, 64}, {4097, 20}, {12289, 64}, {40000, 1}, {40000, 200}} {
		for kind := range devicetest.SelectKinds {
			x := devicetest.SelectLogits(r, c.n, kind)
			what := fmt.Sprintf("n=%d k=%d kind %d", c.n, c.k, kind)
			if !gpukernels.SelectFits(c.n, c.k) {
				t.Fatalf("%s: the case does not fit the kernels", what)
			}
			G, limit := gpukernels.SelectChunks(c.n), c.k+gpukernels.SelSlack
			part := d.put(make([]float32, G*c.k))
			size := 1 + G + 2*G*limit
			out := d.put(make([]float32, size))
			if err := b.kSelectTop(out, d.put(x), part, c.n, c.k, limit); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			var got nn.TopLogits
			ok, err := parseSelection(&got, wordsOf(d.at(out, 4*size)), c.n, c.k, G, limit)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if !ok {
				got.Reset()
			}
			checkSelection(t, what, &got, ok, x, c.k)
		}
	}
	// Shapes past the kernels' limits are refused before anything is queued.
	for _, c := range []struct{ n, k, limit int }{{0, 1, 33}, {10, 0, 32}, {4096*64 + 1, 64, 96}, {100, 5, 0}} {
		if err := b.kSelectTop(0, 0, 0, c.n, c.k, c.limit); err == nil {
			t.Errorf("n %d k %d limit %d: accepted", c.n, c.k, c.limit)
		}
	}
}

// wordsOf reads little-endian 32-bit words (the device's download).
func wordsOf(b []byte) []int32 {
	w := make([]int32, len(b)/4)
	for i := range w {
		w[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return w
}

// selectionBuf lays out a selection's results as the kernels write them.
func selectionBuf(th float32, counts []int, ids [][]int32, vals [][]float32, limit int) []byte {
	G := len(counts)
	buf := make([]byte, 4*(1+G+2*G*limit))
	put := func(i int, v uint32) { binary.LittleEndian.PutUint32(buf[4*i:], v) }
	put(0, math.Float32bits(th))
	for g := range G {
		put(1+g, uint32(int32(counts[g])))
		for j := range ids[g] {
			put(1+G+g*limit+j, uint32(ids[g][j]))
			put(1+G+G*limit+g*limit+j, math.Float32bits(vals[g][j]))
		}
	}
	return buf
}

// parseSelection takes what correct kernels write and rejects, naming the
// kernel, what they cannot: a NaN threshold, ids out of order, outside
// their chunk or the vector, values below the threshold or NaN, a negative
// count, fewer than k candidates, k or more above the threshold.
func TestParseSelection(t *testing.T) {
	const n, k, limit = 5000, 3, 4
	good := func() (float32, []int, [][]int32, [][]float32) {
		return 2, []int{2, 1}, [][]int32{{10, 20}, {4100}}, [][]float32{{2, 5}, {7}}
	}
	th, cnt, ids, vals := good()
	var c nn.TopLogits
	ok, err := parseSelection(&c, wordsOf(selectionBuf(th, cnt, ids, vals, limit)), n, k, 2, limit)
	if err != nil || !ok || !slices.Equal(c.IDs, []int32{10, 20, 4100}) || !slices.Equal(c.Logits, []float32{2, 5, 7}) || c.Th != 2 || c.K != k || c.N != n {
		t.Fatalf("a good selection: %v %v %+v", ok, err, c)
	}
	// -Inf threshold or a chunk past its region: declined, no error.
	for name, buf := range map[string][]byte{
		"-Inf threshold":       selectionBuf(float32(math.Inf(-1)), cnt, ids, vals, limit),
		"ties past the region": selectionBuf(th, []int{5, 1}, ids, vals, limit),
	} {
		c.Reset()
		if ok, err := parseSelection(&c, wordsOf(buf), n, k, 2, limit); ok || err != nil {
			t.Errorf("%s: %v %v, want declined", name, ok, err)
		}
	}
	for name, mutate := range map[string]func(th *float32, cnt []int, ids [][]int32, vals [][]float32){
		"NaN threshold":       func(th *float32, _ []int, _ [][]int32, _ [][]float32) { *th = float32(math.NaN()) },
		"ids out of order":    func(_ *float32, _ []int, ids [][]int32, _ [][]float32) { ids[0][0], ids[0][1] = 20, 10 },
		"id repeated":         func(_ *float32, _ []int, ids [][]int32, _ [][]float32) { ids[0][1] = 10 },
		"id in another chunk": func(_ *float32, _ []int, ids [][]int32, _ [][]float32) { ids[1][0] = 4000 },
		"id past n":           func(_ *float32, _ []int, ids [][]int32, _ [][]float32) { ids[1][0] = n },
		"negative id":         func(_ *float32, _ []int, ids [][]int32, _ [][]float32) { ids[0][0] = -1 },
		"value below th":      func(_ *float32, _ []int, _ [][]int32, vals [][]float32) { vals[0][0] = 1.5 },
		"NaN value":           func(_ *float32, _ []int, _ [][]int32, vals [][]float32) { vals[1][0] = float32(math.NaN()) },
		"negative count":      func(_ *float32, cnt []int, _ [][]int32, _ [][]float32) { cnt[1] = -1 },
		"too few":             func(_ *float32, cnt []int, _ [][]int32, _ [][]float32) { cnt[1] = 0 },
		"too many above":      func(th *float32, _ []int, _ [][]int32, _ [][]float32) { *th = 1 },
	} {
		th, cnt, ids, vals := good()
		mutate(&th, cnt, ids, vals)
		c.Reset()
		if ok, err := parseSelection(&c, wordsOf(selectionBuf(th, cnt, ids, vals, limit)), n, k, 2, limit); err == nil {
			t.Errorf("%s: accepted (%v, %v)", name, ok, c.IDs)
		}
	}
}

// FuzzParseSelection: any bytes give a declined or valid selection or an
// error; never a panic, and an accepted one keeps parseSelection's promises.
func FuzzParseSelection(f *testing.F) {
	th, cnt, ids, vals := float32(2), []int{2, 1}, [][]int32{{10, 20}, {4100}}, [][]float32{{2, 5}, {7}}
	f.Add(selectionBuf(th, cnt, ids, vals, 4), uint16(5000), uint8(3))
	f.Add(selectionBuf(float32(math.Inf(-1)), cnt, ids, vals, 4), uint16(5000), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, n16 uint16, k8 uint8) {
		n, k, limit := int(n16)+1, int(k8)%8+1, 4
		G := gpukernels.SelectChunks(n)
		size := 4 * (1 + G + 2*G*limit)
		buf := make([]byte, size)
		copy(buf, data)
		var c nn.TopLogits
		ok, err := parseSelection(&c, wordsOf(buf), n, k, G, limit)
		if err != nil || !ok {
			return
		}
		if len(c.IDs) < k || len(c.IDs) != len(c.Logits) || c.N != n || c.K != k {
			t.Fatalf("accepted %d ids, %d logits, n %d k %d", len(c.IDs), len(c.Logits), c.N, c.K)
		}
		for j, id := range c.IDs {
			if id < 0 || int(id) >= n || j > 0 && id <= c.IDs[j-1] || !(c.Logits[j] >= c.Th) {
				t.Fatalf("accepted id %d logit %g th %g", id, c.Logits[j], c.Th)
			}
		}
	})
}

// The Layer's policy (SelectsTop): from 32,768 logits by default, any count
// with QPACK_CUDA_SELECT_MIN=0, never past the kernels' limits; and a decode
// step's Forward over the Layer (the fake device's kernels) selects exactly
// the top of the CPU backend's logits when it may, and reads the logits when
// the policy says no.
func TestLayerSelectsTopFake(t *testing.T) {
	for s, want := range map[string]int{"": selectMinDefault, "0": 0, "100000": 100000, "-1": selectMinDefault, "x": selectMinDefault} {
		if got := selectMinFor(s); got != want {
			t.Errorf("selectMinFor(%q) = %d, want %d", s, got, want)
		}
	}
	b, f := fakeBackend(t)
	l := b.Layer()
	for _, c := range []struct {
		min, n, k int
		want      bool
	}{{selectMinDefault, 32767, 64, false}, {selectMinDefault, 32768, 64, true}, {selectMinDefault, 248320, 64, true},
		{selectMinDefault, 300000, 64, false}, {0, 100, 1, true}, {0, 100, 0, false}} {
		b.selectMin = c.min
		if got := l.SelectsTop(c.n, c.k); got != c.want {
			t.Errorf("min %d: SelectsTop(%d, %d) = %v", c.min, c.n, c.k, got)
		}
	}
	name := tinyModels(t)[0]
	ref, m := loadBoth(t, name, b)
	V := m.Config.Vocab
	// Selected with the results downloaded, and written into the mapped
	// staging memory (QPACK_CUDA_SELECT_MAPPED=1: no download at all).
	var downloads [3]int
	for i, min := range []int{0, 0, V + 1} {
		b.selectMin, b.selectMapped = min, i == 1
		f.log, f.calls = true, nil
		rs, st := ref.NewState(), m.NewState()
		prompt := []int{3, 1, 4, 1, 5}
		want, err := ref.Forward(rs, prompt, nil)
		if err != nil {
			t.Fatal(err)
		}
		req := &runtime.TopRequest{K: 5}
		got, err := m.Forward(st, prompt, &runtime.ForwardOptions{Top: req})
		if err != nil {
			t.Fatal(err)
		}
		var c nn.TopLogits
		if !nn.SelectTopRef(&c, want, 5, 0) {
			t.Fatal("the reference declines")
		}
		if min > 0 {
			if got == nil || req.C.N != 0 || maxDiff(got, want) != 0 {
				t.Fatalf("%s, select from %d logits: a vocabulary of %d must read the logits (got %d, C.N %d)", name, min, V, len(got), req.C.N)
			}
			continue
		}
		if got != nil || !slices.Equal(req.C.IDs, c.IDs) || !slices.Equal(req.C.Logits, c.Logits) || req.C.N != V {
			t.Fatalf("%s: selected %v %v (N %d, logits %d), the CPU's top is %v %v", name, req.C.IDs, req.C.Logits, req.C.N, len(got), c.IDs, c.Logits)
		}
		for _, call := range f.calls {
			if call == "dtoh" {
				downloads[i]++
			}
		}
	}
	b.selectMapped = false
	if downloads[0] != downloads[1]+1 {
		t.Errorf("%s: %d downloads with the selection's results in device memory, %d with them mapped: want one less", name, downloads[0], downloads[1])
	}
}

// The selection's results written into the mapped staging memory and read
// in place (QPACK_CUDA_SELECT_MAPPED=1): the conformance suite's SelectTop
// cases, on the fake device and on the GPU.
func TestSelectMappedFake(t *testing.T) {
	b, _ := fakeBackend(t)
	b.selectMapped = true
	devicetest.SelectOps(t, b.LayerDevice())
}

func TestSelectMappedGPU(t *testing.T) {
	b := openOrSkip(t)
	b.selectMapped = true
	devicetest.SelectOps(t, b.LayerDevice())
}
