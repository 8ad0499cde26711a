package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

func TestSelectOneFor(t *testing.T) {
	for s, want := range map[string]bool{"": false, "one": true, " one\n": true, "three": false, "1": false, "ONE": false} {
		if got := selectOneFor(s); got != want {
			t.Errorf("selectOneFor(%q) = %v, want %v", s, got, want)
		}
	}
}

// selectTopCase is a vector to select the top k of.
type selectTopCase struct {
	what string
	x    []float32
	k    int
}

// selectTopCases are the vectors the one-launch selection's tests run: the
// conformance suite's kinds at several shapes, and a chunk of ties below
// the top (a padded vocabulary's rows: the chunk's own k-th largest has
// thousands of ties, the threshold is above it, and the selection must not
// decline).
func selectTopCases(r *rand.Rand) (cases []selectTopCase) {
	add := func(what string, x []float32, k int) { cases = append(cases, selectTopCase{what, x, k}) }
	for _, c := range []struct{ n, k int }{{1, 1}, {5, 3}, {300, 64}, {4095, 1}, {4096, 64}, {4097, 20}, {12289, 64}, {40000, 200}, {65536, 256}} {
		for kind := range devicetest.SelectKinds {
			add(fmt.Sprintf("n=%d k=%d kind %d", c.n, c.k, kind), devicetest.SelectLogits(r, c.n, kind), c.k)
		}
	}
	add("n=248320 k=64 kind 0 (the largest vocabulary)", devicetest.SelectLogits(r, 248320, 0), 64)
	pad := devicetest.SelectLogits(r, 3*gpukernels.SelChunk+100, 0)
	for i := gpukernels.SelChunk; i < 3*gpukernels.SelChunk; i++ {
		pad[i] = -30 // two chunks of one value, below every value of the others
	}
	add("two chunks of ties below the top", pad, 64)
	neg := slices.Clone(pad)
	for i := range neg[:gpukernels.SelChunk] {
		neg[i] = float32(math.Copysign(0, -1))
	}
	neg[5], neg[4000] = 0, 1
	add("a chunk of -0 with one +0 and one 1", neg, 3)
	return cases
}

// select_top on the CPU emulator (testdata/emu/normset.cpp: the kernel's
// own source, 256 threads a group, the groups in turn, so that the last is
// the one that finds the threshold), through parseSelectTop, against
// nn.SelectTopRef; the group counter back to zero.
func TestSelectTopEmulated(t *testing.T) {
	bin := buildNormSetEmu(t)
	r := rand.New(rand.NewPCG(11, 12))
	for i, c := range selectTopCases(r) {
		n, k := len(c.x), c.k
		G, limit := gpukernels.SelectChunks(n), k+gpukernels.SelSlack
		if !gpukernels.SelectFits(n, k) {
			t.Fatalf("%s: does not fit the kernel", c.what)
		}
		img := &moeImage{}
		// Every other case's x one float past a 16-byte boundary: the
		// kernel's scalar loads.
		xo := img.put(f32b(append([]float32{0}, c.x...))) + 4*uint64(i%2)
		if i%2 == 0 {
			img.mem = img.mem[:len(img.mem)-4]
			copy(img.mem[xo:], f32b(c.x))
		}
		words := selectTopWords(G, limit)
		junk := make([]byte, 4*words) // what a region past its count holds is not read
		for i := range junk {
			junk[i] = 0xa5
		}
		outo := img.put(junk)
		doneo := img.put(make([]byte, 4))
		th, cnt, above, ids, vals := selectTopLayout(devptr(outo), G, limit)
		block := params(make([]byte, 0, sizeSelTop)).ptr(devptr(xo)).ptr(th).ptr(cnt).ptr(above).ptr(ids).ptr(vals).ptr(devptr(doneo)).
			u32(n).u32(k).u32(limit).u32(0)
		after := normSetImage(t, bin, "select_top", G, block, []int{0, 8, 16, 24, 32, 40, 48}, img)
		if d := binary.LittleEndian.Uint32(after.mem[doneo:]); d != 0 {
			t.Fatalf("%s: the group counter is %d after the launch", c.what, d)
		}
		if !slices.Equal(after.mem[xo:xo+uint64(4*n)], img.mem[xo:xo+uint64(4*n)]) {
			t.Fatalf("%s: x changed", c.what)
		}
		var got nn.TopLogits
		ok, err := parseSelectTop(&got, wordsOf(after.mem[outo:outo+uint64(4*words)]), n, k, G, limit)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		checkSelection(t, c.what, &got, ok, c.x, k)
		if c.what == "two chunks of ties below the top" && !ok {
			t.Fatalf("%s: declined", c.what)
		}
	}
}

// selectTopBuf lays out select_top's results: th, then per chunk its
// count, its count above its k-th largest, its region's ids and values.
func selectTopBuf(th float32, cnt, above []int, ids [][]int32, vals [][]float32, limit int) []byte {
	G := len(cnt)
	buf := make([]byte, 4*selectTopWords(G, limit))
	put := func(i int, v uint32) { binary.LittleEndian.PutUint32(buf[4*i:], v) }
	put(0, math.Float32bits(th))
	for g := range G {
		put(1+g, uint32(int32(cnt[g])))
		put(1+G+g, uint32(int32(above[g])))
		for j := range ids[g] {
			put(1+2*G+g*limit+j, uint32(ids[g][j]))
			put(1+2*G+G*limit+g*limit+j, math.Float32bits(vals[g][j]))
		}
	}
	return buf
}

// parseSelectTop takes what a correct select_top writes (merging a
// region's run above its chunk's k-th largest with the run at it, and
// dropping what is below the threshold) and rejects, with an error, what
// it cannot write.
func TestParseSelectTop(t *testing.T) {
	const n, k, limit = 5000, 3, 4
	// Ties taken: chunk 0 lists 30 above its k-th largest 2, then 2 at ids
	// 10 and 20; chunk 1's k-th largest 1 (three ties) is below th = 2.
	var c nn.TopLogits
	buf := selectTopBuf(2, []int{3, 3}, []int{1, 0}, [][]int32{{30, 10, 20}, {4100, 4200, 4300}}, [][]float32{{30, 2, 2}, {1, 1, 1}}, limit)
	ok, err := parseSelectTop(&c, wordsOf(buf), n, k, 2, limit)
	if err != nil || !ok || !slices.Equal(c.IDs, []int32{10, 20, 30}) || !slices.Equal(c.Logits, []float32{2, 2, 30}) || c.Th != 2 || c.K != k || c.N != n {
		t.Fatalf("ties at the threshold: %v %v %+v", ok, err, c)
	}
	// Ties dropped: chunk 0 lists 9 and 30 above its k-th largest 2 (at
	// ids 10 and 20, however many: its count may pass the region), chunk 1
	// 7 above its 1; th = 7.
	good := func() (float32, []int, []int, [][]int32, [][]float32) {
		return 7, []int{4, 3}, []int{2, 1}, [][]int32{{15, 30, 10, 20}, {4100, 4200, 4300}}, [][]float32{{9, 30, 2, 2}, {7, 1, 1}}
	}
	for _, cnt0 := range []int{4, 4000} {
		th, cnt, above, ids, vals := good()
		cnt[0] = cnt0
		c.Reset()
		ok, err = parseSelectTop(&c, wordsOf(selectTopBuf(th, cnt, above, ids, vals, limit)), n, k, 2, limit)
		if err != nil || !ok || !slices.Equal(c.IDs, []int32{15, 30, 4100}) || !slices.Equal(c.Logits, []float32{9, 30, 7}) || c.Th != 7 {
			t.Fatalf("ties below the threshold, count %d: %v %v %+v", cnt0, ok, err, c)
		}
	}
	// -Inf threshold or ties at it past the region: declined, no error.
	_, cnt, above, ids, vals := good()
	for name, buf := range map[string][]byte{
		"-Inf threshold":       selectTopBuf(float32(math.Inf(-1)), cnt, above, ids, vals, limit),
		"ties past the region": selectTopBuf(2, []int{3, 5}, []int{1, 0}, [][]int32{{30, 10, 20}, {4100, 4200, 4300, 4400}}, [][]float32{{30, 2, 2}, {2, 2, 2, 2}}, limit),
	} {
		c.Reset()
		if ok, err := parseSelectTop(&c, wordsOf(buf), n, k, 2, limit); ok || err != nil || len(c.IDs) != 0 {
			t.Errorf("%s: %v %v %v, want declined", name, ok, err, c.IDs)
		}
	}
	buf = selectTopBuf(2, []int{3, 3}, []int{1, 0}, [][]int32{{30, 10, 30}, {4100, 4200, 4300}}, [][]float32{{30, 2, 2}, {1, 1, 1}}, limit)
	if ok, err := parseSelectTop(&c, wordsOf(buf), n, k, 2, limit); err == nil {
		t.Errorf("an id in both runs: accepted (%v, %v)", ok, c.IDs)
	}
	type parts struct {
		th         *float32
		cnt, above []int
		ids        [][]int32
		vals       [][]float32
	}
	for name, mutate := range map[string]func(p parts){
		"NaN threshold":             func(p parts) { *p.th = float32(math.NaN()) },
		"threshold below a chunk's": func(p parts) { *p.th = 1.5 },
		"above run out of order":    func(p parts) { p.ids[0][0], p.ids[0][1] = 30, 15 },
		"tie run out of order":      func(p parts) { p.ids[0][2], p.ids[0][3] = 20, 10 },
		"id in another chunk":       func(p parts) { p.ids[1][0] = 4000 },
		"id past n":                 func(p parts) { p.ids[1][2] = n },
		"negative id":               func(p parts) { p.ids[0][0] = -1 },
		"above run not above":       func(p parts) { p.vals[0][1] = 2 },
		"tie run not equal":         func(p parts) { p.vals[0][3] = 2.5 },
		"NaN value":                 func(p parts) { p.vals[1][0] = float32(math.NaN()) },
		"NaN tie":                   func(p parts) { p.vals[0][2], p.vals[0][3] = float32(math.NaN()), float32(math.NaN()) },
		"negative count":            func(p parts) { p.cnt[1] = -1 },
		"count below above":         func(p parts) { p.cnt[0] = 1 },
		"k above":                   func(p parts) { p.above[0] = 3 },
		"negative above":            func(p parts) { p.above[1] = -1 },
		"count past a chunk":        func(p parts) { p.cnt[0] = gpukernels.SelChunk + 1 },
		"too few":                   func(p parts) { *p.th = 9 },
		"too many above":            func(p parts) { *p.th = 2.5 },
	} {
		th, cnt, above, ids, vals := good()
		mutate(parts{&th, cnt, above, ids, vals})
		c.Reset()
		if ok, err := parseSelectTop(&c, wordsOf(selectTopBuf(th, cnt, above, ids, vals, limit)), n, k, 2, limit); err == nil {
			t.Errorf("%s: accepted (%v, %v)", name, ok, c.IDs)
		}
	}
	if _, err := parseSelectTop(&c, make([]int32, 5), n, k, 2, limit); err == nil {
		t.Error("too few words: accepted")
	}
}

// FuzzParseSelectTop: any bytes give a declined or valid selection or an
// error, never a panic; an accepted one keeps parseSelectTop's promises.
func FuzzParseSelectTop(f *testing.F) {
	f.Add(selectTopBuf(7, []int{4, 3}, []int{2, 1}, [][]int32{{15, 30, 10, 20}, {4100, 4200, 4300}}, [][]float32{{9, 30, 2, 2}, {7, 1, 1}}, 4), uint16(4999), uint8(2))
	f.Add(selectTopBuf(2, []int{3, 3}, []int{1, 0}, [][]int32{{30, 10, 20}, {4100, 4200, 4300}}, [][]float32{{30, 2, 2}, {1, 1, 1}}, 4), uint16(4999), uint8(2))
	f.Add(selectTopBuf(float32(math.Inf(-1)), []int{1, 0}, []int{1, 0}, [][]int32{{3}, nil}, [][]float32{{1}, nil}, 4), uint16(5000), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, n16 uint16, k8 uint8) {
		n, k, limit := int(n16)+1, int(k8)%4+1, 4
		G := gpukernels.SelectChunks(n)
		buf := make([]byte, 4*selectTopWords(G, limit))
		copy(buf, data)
		var c nn.TopLogits
		ok, err := parseSelectTop(&c, wordsOf(buf), n, k, G, limit)
		if err != nil || !ok {
			if len(c.IDs) != 0 {
				t.Fatalf("declined with %d ids left", len(c.IDs))
			}
			return
		}
		if len(c.IDs) < k || len(c.IDs) != len(c.Logits) || c.N != n || c.K != k {
			t.Fatalf("accepted %d ids, %d logits, n %d k %d", len(c.IDs), len(c.Logits), c.N, c.K)
		}
		above := 0
		for j, id := range c.IDs {
			if id < 0 || int(id) >= n || j > 0 && id <= c.IDs[j-1] || !(c.Logits[j] >= c.Th) {
				t.Fatalf("accepted id %d logit %g th %g", id, c.Logits[j], c.Th)
			}
			if c.Logits[j] > c.Th {
				above++
			}
		}
		if above >= k {
			t.Fatalf("accepted %d above the %d-th largest", above, k)
		}
	})
}

// The Layer with the selection in one launch (QPACK_CUDA_SELECT=one): the
// conformance suite's SelectTop cases on the fake device (which emulates
// select_top from its contract) and on the GPU, the results downloaded and
// in the mapped staging memory; on the GPU, the cases above too (larger
// vectors, many chunks) against the three launches.
func TestSelectOneFake(t *testing.T) {
	for _, mapped := range []bool{false, true} {
		b, _ := fakeBackend(t)
		b.selectOne, b.selectMapped = true, mapped
		devicetest.SelectOps(t, b.LayerDevice())
	}
}

func TestSelectOneGPU(t *testing.T) {
	b := openOrSkip(t)
	for _, mapped := range []bool{false, true} {
		b.selectOne, b.selectMapped = true, mapped
		devicetest.SelectOps(t, b.LayerDevice())
	}
	b.selectMapped = false
	l := b.Layer()
	r := rand.New(rand.NewPCG(13, 14))
	cases := selectTopCases(r)
	for _, n := range []int{32768} {
		cases = append(cases, selectTopCase{fmt.Sprintf("n=%d k=64", n), devicetest.SelectLogits(r, n, 0), 64})
	}
	for _, c := range cases {
		x, err := l.Alloc(len(c.x))
		if err != nil {
			t.Fatal(err)
		}
		l.Write(x, c.x)
		var sel [2]nn.TopLogits
		var oks [2]bool
		for i, one := range []bool{false, true} {
			b.selectOne = one
			ok, err := l.SelectTop(&sel[i], x, len(c.x), c.k)
			if err != nil {
				t.Fatalf("%s (one launch %v): %v", c.what, one, err)
			}
			oks[i] = ok
			checkSelection(t, fmt.Sprintf("%s (one launch %v)", c.what, one), &sel[i], ok, c.x, c.k)
		}
		if oks[0] && !oks[1] {
			t.Fatalf("%s: the one launch declined where the three selected", c.what)
		}
		if err := l.EndPass(); err != nil {
			t.Fatal(err)
		}
		l.Free(x)
	}
}
