package cuda

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// BenchmarkDecodeKernels measures single kernels at the shapes of one
// decode step (the 35B's dims: hidden 2048), each launched reps times as
// one CUDA graph, so the host's launch cost is out of the figure and what
// is left is the GPU's time per kernel, the gap between two included; the
// weights rotate over copies larger together than the L2, as a step's
// layers do. Each case runs with dependent launches off and on. The
// baseline, measured in the same run: the device's copy bandwidth, and a
// 256-float scale (the floor of a kernel node).
func BenchmarkDecodeKernels(bb *testing.B) {
	b := openOrSkip(bb)
	if r, ok := b.dev.(*recorder); ok { // the graphs below are captured by hand
		if err := r.flush(); err != nil {
			bb.Fatal(err)
		}
		b.dev = r.d
		defer func() { b.dev = r }()
	}
	gr, ok := b.dev.(grapher)
	sw, ok2 := b.dev.(pdlSwitch)
	if !ok || !ok2 {
		bb.Skip("no graphs or no dependent-launch switch on this device")
	}
	defer sw.setDependentLaunch(sw.setDependentLaunch(true))
	copyGBs := copyBandwidth(bb, b)
	r := rand.New(rand.NewPCG(3, 4))
	const reps = 96

	type kcase struct {
		name  string
		bytes int               // bytes one launch reads and writes
		run   func(i int) error // launch number i
		split int               // a matvec's or a MoE gate/up's gemvSplit (0: neither)
	}
	matCase := func(rows, cols, bits, group int) kcase {
		w := mlxq.Matrix{Rows: rows, Cols: cols, Bits: bits, GroupSize: group, Type: mlxq.BF16}
		kernel, _ := gemvKernel(w)
		nsb := rows * (cols / group) * 2
		bytes := rows*w.RowBytes() + 2*nsb + 4*cols + 4*rows
		copies := min(64, max(1, (256<<20)/bytes))
		scales := benchScales(r, nsb)
		var ws, ss []devptr
		for range copies {
			ws = append(ws, upload(bb, b, randBytes(r, rows*w.RowBytes())))
			ss = append(ss, upload(bb, b, scales))
		}
		xp, yp := upload(bb, b, benchInput(r, cols)), upload(bb, b, make([]byte, 4*rows))
		return kcase{fmt.Sprintf("%s [%d, %d] q%d g%d", kernel, rows, cols, bits, group), bytes, func(i int) error {
			c := i % copies
			return b.gemv(kernel, ws[c], ss[c], ss[c], xp, yp, w, 1)
		}, gemvSplitFor(rows, cols, bits, 1)}
	}
	// moeCase: the routed block of a decode step (k experts of [I][H]
	// gate and up, [H][I] down, one table of k experts a copy) or, k = 1
	// with gated, a sigmoid-gated shared expert; with slot, k routed
	// experts and a shared one as the token's slot k (MoEParams.shared:
	// the table's expert k); gateup launches over the slots, down over the
	// token.
	moeCase := func(H, I, k int, down, gated, slot bool) kcase {
		g := mlxq.Matrix{Rows: I, Cols: H, Bits: 4, GroupSize: 32, Type: mlxq.BF16}
		d := mlxq.Matrix{Rows: H, Cols: I, Bits: 4, GroupSize: 32, Type: mlxq.BF16}
		ks, err := moeKernels(g, g, d)
		if err != nil {
			bb.Fatal(err)
		}
		slots := k
		if slot {
			slots++
		}
		m, kernel, n := g, ks[0], slots
		if down {
			m, kernel, n = d, ks[1], 1
		}
		split := 0 // gate/up splits its rows' chunks as gemvSplit says
		if !down {
			_, split = moeGrid(kernel, m, n, moeSplitFor)
		}
		nsb := m.Rows * (m.Cols / m.GroupSize) * 2
		bytes := slots*(m.Rows*m.RowBytes()+2*nsb) + 4*n*m.Cols + 4*slots*m.Rows
		copies := min(64, max(1, (256<<20)/bytes))
		scales := benchScales(r, nsb)
		var tables []devptr
		for range copies {
			table := make([]byte, 8*9*slots)
			for e := range slots {
				for _, j := range []int{0, 3, 6} {
					if (j == 6) != down {
						continue // only the matrices the kernel reads
					}
					put := func(i int, p devptr) { binary.LittleEndian.PutUint64(table[8*(9*e+j+i):], p) }
					put(0, upload(bb, b, randBytes(r, m.Rows*m.RowBytes())))
					put(1, upload(bb, b, scales))
					put(2, upload(bb, b, scales))
				}
			}
			tables = append(tables, upload(bb, b, table))
		}
		sel := make([]int32, k)
		wts := make([]float32, k)
		for i := range k {
			sel[i], wts[i] = int32(i), 1/float32(k)
		}
		p := moeParams{sel: upload(bb, b, i32b(sel)), wts: upload(bb, b, f32b(wts)), x: upload(bb, b, benchInput(r, slots*max(H, I))),
			y: upload(bb, b, make([]byte, 4*slots*max(H, I))), fault: upload(bb, b, make([]byte, 4)), m: m, k: k, E: k}
		if (gated || slot) && down {
			p.gate = upload(bb, b, make([]byte, 4))
		}
		what := fmt.Sprintf("%d routed experts", k)
		switch {
		case gated:
			what = "the shared expert"
		case slot:
			what += " and the shared one as slot k"
		}
		return kcase{fmt.Sprintf("%s [%d, %d] %s", kernel, m.Rows, m.Cols, what), bytes, func(i int) error {
			q := p
			q.table = tables[i%copies]
			if slot {
				q.shared = q.table + devptr(8*9*k)
			}
			return b.kMoE(kernel, q, n)
		}, split}
	}
	// dnCase: a DeltaNet mixer's kernels for one token (deltanet_conv,
	// deltanet_qknorm, then deltanet_rec_reg, or with cols
	// deltanet_rec_cols and deltanet_out) at the 35B's shapes (16 key and 32
	// value heads of 128, kernel 4), the state rotating over copies past
	// the L2 as a decode step finds it (the layer ran a step ago).
	dnCase := func(cols bool) kcase {
		const nk, nv, d, K = 16, 32, 128, 4
		C := 2*nk*d + nv*d
		state := 4 * nv * d * d
		bytes := 2*state + 4*(C*K+(K-1)*C) + 4*(3*C+2*nv*d)
		copies := min(64, max(1, (256<<20)/bytes))
		small := func(n int, scale float32) devptr { return upload(bb, b, benchInputScaled(r, n, scale)) }
		type dnCopy struct{ state, window devptr }
		cs := make([]dnCopy, copies)
		for i := range cs {
			cs[i] = dnCopy{small(nv*d*d, 0.05), small((K-1)*C, 1)}
		}
		a := deltaNetPtrs{T: 1, Nk: nk, Nv: nv, Dk: d, Dv: d, K: K, Eps: 1e-6, Scratch: small(C, 1), Y: small(nv*d, 1),
			Mixed: small(C, 1), Z: small(nv*d, 1), B: small(nv, 1), A: small(nv, 1), Conv: small(C*K, 0.5),
			NegA: small(nv, 1), DtBias: small(nv, 1), Norm: small(d, 1)}
		name, policy := "deltanet (3 kernels, rec_reg)", dnColsPolicy(-1)
		if cols {
			name, policy = "deltanet (4 kernels, rec_cols)", 0
		}
		return kcase{fmt.Sprintf("%s [%d x %d x %d] T=1", name, nv, d, d), bytes, func(i int) error {
			q := a
			q.State, q.Window = cs[i%copies].state, cs[i%copies].window
			was := b.dnCols
			b.dnCols = policy
			defer func() { b.dnCols = was }()
			return b.kDeltaNet(&q)
		}, 0}
	}
	// attnCase: a decode token's attention at the 35B's full-attention
	// dims (16 query heads of 256 with their gates interleaved, 2 KV
	// heads) over pos cached positions, split as a decode step splits it
	// (attention, then attention_merge), the cache rotating over copies
	// past the L2 as a step finds it; nsplit > 0 splits it into that many
	// runs instead (the split's choice, AttnSplits, is the host's: these
	// cases are what it would weigh). hot keeps one copy, in the L2 after
	// the first launch: what is left is the kernels' own time, without
	// the memory's latency and bandwidth.
	// gqa runs attention_gqa (a group per KV head and run) instead of the
	// per-(token, head) kernel.
	attnCase := func(pos, nsplit int, hot, gqa bool) kcase {
		d := nn.AttnDims{Heads: 16, KVHeads: 2, HeadDim: 256, QStride: 512, Scale: 1 / 16.0}
		kw := d.KVHeads * d.HeadDim
		b.attnGQAOff = !gqa
		defer func() { b.attnGQAOff = false }()
		if nsplit == 0 {
			nsplit = b.attnSplitsFor(1, d, d.HeadDim, gpukernels.AttnKeys(pos, 1, 0))
		}
		kernel := "attention"
		if gqa {
			kernel = "attention_gqa"
		}
		bytes := 4 * (2*(pos+1)*kw + d.Heads*d.QStride + d.Heads*d.HeadDim)
		copies := min(64, max(1, (256<<20)/bytes))
		where := ""
		if hot {
			copies, where = 1, ", in the L2"
		}
		type kvCopy struct{ k, v devptr }
		cs := make([]kvCopy, copies)
		for i := range cs {
			cs[i] = kvCopy{upload(bb, b, benchInput(r, pos*kw)), upload(bb, b, benchInput(r, pos*kw))}
		}
		q := upload(bb, b, benchInput(r, d.Heads*d.QStride))
		k, v := upload(bb, b, benchInput(r, kw)), upload(bb, b, benchInput(r, kw))
		o := upload(bb, b, make([]byte, 4*d.Heads*d.HeadDim))
		part := upload(bb, b, make([]byte, 4*max(1, int(attnPartFloats(1, d.Heads, d.HeadDim, nsplit)))))
		return kcase{fmt.Sprintf("%s [16 x 256, 2 kv] over %d positions, %d runs%s", kernel, pos, nsplit, where), bytes, func(i int) error {
			c := cs[i%copies]
			was := b.attnGQAOff
			b.attnGQAOff = !gqa
			defer func() { b.attnGQAOff = was }()
			return b.kAttention(o, q, k, v, c.k, c.v, part, pos, 1, 0, kw, kw, nsplit, d)
		}, 0}
	}
	// mergeCase: attention_merge alone, as attnCase's step ends: 16
	// heads' nsplit runs of 256 dims (its share of attnCase's time).
	mergeCase := func(nsplit int) kcase {
		const heads, vd = 16, 256
		o := upload(bb, b, make([]byte, 4*heads*vd))
		part := upload(bb, b, benchInput(r, int(attnPartFloats(1, heads, vd, nsplit))))
		return kcase{fmt.Sprintf("attention_merge [16 x 256] of %d runs", nsplit), 4 * int(attnPartFloats(1, heads, vd, nsplit)+heads*vd), func(int) error {
			p := params(make([]byte, 0, sizeAttnMerge)).ptr(o).ptr(part).u32(heads).u32(vd).u32(nsplit).u32(0)
			return b.launch("attention_merge", [3]int{heads, 1, 1}, tgThreads, p, sizeAttnMerge)
		}, 0}
	}
	// topkCase: route_topk over a decode token's router logits.
	topkCase := func(E, k int) kcase {
		logits := upload(bb, b, benchInput(r, E))
		sel, wts := upload(bb, b, make([]byte, 4*k)), upload(bb, b, make([]byte, 4*k))
		return kcase{fmt.Sprintf("route_topk [1, %d] k %d", E, k), 4 * (E + 2*k), func(int) error {
			return b.kRouteTopK(sel, wts, logits, 1, E, k, true)
		}, 0}
	}
	// selectCase: the top of a decode step's logits (select_chunk,
	// select_merge, select_list), k 64 as the bench's sampler.
	selectCase := func(n, k int) kcase {
		logits := upload(bb, b, benchInput(r, n))
		G, limit := gpukernels.SelectChunks(n), k+gpukernels.SelSlack
		part := upload(bb, b, make([]byte, 4*G*k))
		out := upload(bb, b, make([]byte, 4*(1+G+2*G*limit)))
		return kcase{fmt.Sprintf("select [%d] k %d (3 kernels)", n, k), 4 * n, func(int) error {
			return b.kSelectTop(out, logits, part, n, k, limit)
		}, 0}
	}
	// selectOneCase: the same selection in one launch (select_top).
	selectOneCase := func(n, k int) kcase {
		logits := upload(bb, b, benchInput(r, n))
		G, limit := gpukernels.SelectChunks(n), k+gpukernels.SelSlack
		out := upload(bb, b, make([]byte, 4*selectTopWords(G, limit)))
		done := upload(bb, b, make([]byte, 4))
		return kcase{fmt.Sprintf("select_top [%d] k %d (1 kernel)", n, k), 4 * n, func(int) error {
			return b.kSelectTopOne(out, logits, done, n, k, limit)
		}, 0}
	}
	const hidden = 2048
	x := upload(bb, b, make([]byte, 4*hidden))
	res := upload(bb, b, make([]byte, 4*hidden))
	y := upload(bb, b, make([]byte, 4*hidden))
	nw := upload(bb, b, make([]byte, 4*hidden))
	cases := []kcase{
		{"scale [256]", 2 * 4 * 256, func(int) error { return b.kScale(x, 1, 256) }, 0},
		{"add_rms_norm_rows [1, 2048]", 5 * 4 * hidden, func(int) error {
			return b.kAddRMSNorm(x, res, y, nw, nn.NormSpec{Rows: 1, Width: hidden, Eps: 1e-6, Kind: nn.NormWeight})
		}, 0},
		matCase(12352, hidden, 4, 32), // the DeltaNet's input projections
		matCase(9216, hidden, 4, 32),  // attention q (gated), k, v
		matCase(hidden, 4096, 4, 32),  // the DeltaNet's output projection
		matCase(1024, hidden, 4, 32),  // one expert's gate and up
		matCase(hidden, 512, 4, 32),   // one expert's down
		matCase(256, hidden, 8, 64),   // a router
		matCase(32768, hidden, 4, 32), // lm_head of the benchmark's vocabulary
		moeCase(hidden, 512, 8, false, false, false),
		moeCase(hidden, 512, 8, true, false, false),
		moeCase(hidden, 512, 1, false, true, false),
		moeCase(hidden, 512, 1, true, true, false),
		moeCase(hidden, 512, 8, false, false, true),
		moeCase(hidden, 512, 8, true, false, true),
		dnCase(false),
		dnCase(true),
		topkCase(256, 8),
		// The per-(token, head) kernel: 100 positions are below
		// gpukernels.AttnSplitMinKeys (not split).
		attnCase(100, 0, false, false),
		attnCase(1024, 0, false, false),
		attnCase(1024, 0, true, false),
		attnCase(1024, 16, false, false),
		attnCase(4096, 0, false, false),
		attnCase(4096, 16, false, false),
		attnCase(16384, 0, false, false),
		// attention_gqa: its own split (AttnGQASplits), and others.
		attnCase(100, 0, false, true),
		attnCase(100, 1, false, true),
		attnCase(1024, 0, false, true),
		attnCase(1024, 0, true, true),
		attnCase(1024, 8, false, true),
		attnCase(1024, 16, false, true),
		attnCase(1024, 64, false, true),
		attnCase(4096, 0, false, true),
		attnCase(4096, 0, true, true),
		attnCase(4096, 32, false, true),
		attnCase(4096, 128, false, true),
		attnCase(16384, 0, false, true),
		attnCase(16384, 128, false, true),
		mergeCase(16),
		mergeCase(32),
		mergeCase(64),
		selectCase(32768, 64),
		selectCase(248320, 64),
		selectOneCase(32768, 64),
		selectOneCase(248320, 64),
	}
	// QPACK_BENCH_CASES, a regular expression, keeps the cases whose name
	// it matches (a profiler's run of one kernel:
	// bench/gpu/scripts/session29-ncu-moe.sh).
	if expr := os.Getenv("QPACK_BENCH_CASES"); expr != "" {
		re, err := regexp.Compile(expr)
		if err != nil {
			bb.Fatalf("QPACK_BENCH_CASES: %v", err)
		}
		cases = slices.DeleteFunc(cases, func(c kcase) bool { return !re.MatchString(c.name) })
		if len(cases) == 0 {
			bb.Fatalf("QPACK_BENCH_CASES=%q matches no case", expr)
		}
	}
	time := func(c kcase, pdl bool, split int) float64 {
		sw.setDependentLaunch(pdl)
		b.splitOverride = split
		defer func() { b.splitOverride = 0 }()
		ms, err := graphTime(b, gr, reps, c.run)
		if err != nil {
			bb.Fatalf("%s: %v", c.name, err)
		}
		return 1e3 * ms / reps
	}
	for _, c := range cases {
		us, off := time(c, true, 0), time(c, false, 0)
		gbs := float64(c.bytes) / (us * 1e3)
		line := fmt.Sprintf("%-34s %9d B: %7.2f us a kernel (dependent launches off: %7.2f), %6.0f GB/s = %.2fx the copy bandwidth",
			c.name, c.bytes, us, off, gbs, gbs/copyGBs)
		if k, _, _ := strings.Cut(c.name, " "); b.fn[k] != 0 {
			line += " (" + kernelResources(b, k) + ")"
		}
		if c.split > 0 {
			// The other splits, for the choice's sake (a MoE gate/up's
			// slots past one wave of groups, a product's few rows).
			line += fmt.Sprintf("; split %d", c.split)
			for _, s := range []int{1, 2, 4} {
				if s != c.split {
					line += fmt.Sprintf(" (split %d: %.2f us)", s, time(c, true, s))
				}
			}
		}
		bb.Log(line)
	}
}

// graphTime captures n launches of run into a graph, launches it once to
// warm up and then three times, and returns the fastest launch's GPU time
// in milliseconds.
func graphTime(b *Backend, gr grapher, n int, run func(i int) error) (float64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := gr.beginCapture(); err != nil {
		return 0, err
	}
	for i := range n {
		if err := run(i); err != nil {
			gr.endCapture()
			return 0, err
		}
	}
	g, err := gr.endCapture()
	if err != nil {
		return 0, err
	}
	defer gr.destroyGraph(g)
	exec, err := gr.instantiate(g)
	if err != nil {
		return 0, err
	}
	defer gr.destroyExec(exec)
	best := -1.0
	for i := range 4 {
		ms, err := b.dev.timed(func() error { return gr.graphLaunch(exec) })
		if err != nil {
			return 0, err
		}
		if i > 0 && (best < 0 || float64(ms) < best) {
			best = float64(ms)
		}
	}
	return best, nil
}
