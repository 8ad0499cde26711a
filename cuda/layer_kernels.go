package cuda

import (
	"fmt"
	"math"
	"strconv"

	"github.com/qpack-go/qpack/internal/gpukernels"

	"github.com/qpack-go/qpack/runtime/nn"
)

// Launchers of the whole-layer kernels (internal/gpukernels' bodies). Each
// works on device addresses, checks its extents (each count positive where
// the op needs one, every element index it forms below 2^31, the kernels'
// limits), builds the kernel's parameter block and queues the kernel on the
// backend's stream (b.launch); it waits for nothing. An extent error is
// returned before anything is queued. A count of zero queues nothing. The
// caller holds b.mu. Tensors are float32; index vectors int32.

// Sizes of the parameter structs (the QP_STATIC_ASSERTs of
// internal/gpukernels/*.qk; source_test.go checks them).
const (
	sizeNormRows   = 48
	sizeRoPE       = 48
	sizeAttn       = 112
	sizeAttnMerge  = 32
	sizeDNConv     = 48
	sizeDNNorm     = 32
	sizeDNRec      = 104
	sizeUnary      = 16
	sizeBinary     = 32
	sizeSigmoidMul = 32
	sizeAddGated   = 32
	sizeCombine    = 40
	sizeGather     = 40
	sizeRows       = 32
	sizeRoute      = 40
	sizeSelChunk   = 24
	sizeSelMerge   = 24
	sizeSelList    = 48
)

// Limits of the kernels (the QK_* constants of the bodies).
const (
	attnMaxDim  = 512  // QK_ATTN_MAXD: head and value dims of attention
	convMaxK    = 16   // QK_CONV_MAXK: the DeltaNet conv's kernel size
	dnMaxDim    = 256  // QK_DN_MAXD: DeltaNet key and value head dims
	routeMaxE   = 4096 // QK_ROUTE_MAXE: experts of route_topk
	routeMaxK   = 64   // QK_ROUTE_MAXK: experts chosen per token
	normUnit    = 2    // QK_NORM_UNIT
	actGELUTanh = 1    // QK_ACT_GELU_TANH
)

const indexLimit = int64(1) << 31

// span is the number of elements an op addresses: (rows-1)·stride + width,
// or 0 when rows or width is 0.
func span(rows, stride, width int) int64 {
	if rows <= 0 || width <= 0 {
		return 0
	}
	return int64(rows-1)*int64(stride) + int64(width)
}

// checkExt returns an error naming kernel unless every value is >= 0 and
// below 2^31.
func checkExt(kernel string, vals ...int64) error {
	for _, v := range vals {
		if v < 0 || v >= indexLimit {
			return fmt.Errorf("cuda: kernel %s: extent %d out of range [0, 2^31)", kernel, v)
		}
	}
	return nil
}

func b2u(v bool) int {
	if v {
		return 1
	}
	return 0
}

// launch1D queues kernel over ceil(count/256) groups of 256 threads.
func (b *Backend) launch1D(kernel string, count int, p params, size int) error {
	return b.launch(kernel, [3]int{ceilDiv(count, tgThreads), 1, 1}, tgThreads, p, size)
}

// deltaNetPtrs are the device addresses and shape of one Gated DeltaNet call
// (nn.DeltaNetArgs with its tensors on the device).
type deltaNetPtrs struct {
	T, Nk, Nv, Dk, Dv, K int
	Eps                  float32
	Window               devptr // [K-1][C] conv window, oldest first (updated)
	State                devptr // [Nv][Dk][Dv] recurrent state (updated)
	Scratch              devptr // T·C floats: the conv output (q|k|v per token)
	Y                    devptr // [T][Nv·Dv] output
	Mixed                devptr // [T][C]
	Z                    devptr // [T][Nv·Dv]
	B, A                 devptr // [T][Nv]
	Conv                 devptr // [C][K]
	NegA, DtBias         devptr // [Nv]
	Norm                 devptr // [Dv]
	// DeferOut: where the recurrence runs as deltanet_rec_cols, queue
	// deltanet_out not but leave its parameter block in Out (the Layer
	// defers it: layer_normfuse.go).
	DeferOut bool
	Out      params
	// InlineQKNorm: a chunk of one token whose recurrence runs as
	// deltanet_rec_cols normalises q and k there (DNRec.qscale) instead of
	// in a deltanet_qknorm launch.
	InlineQKNorm bool
}

// kRMSNorm normalises s.Rows rows of s.Width floats as nn.NormSpec says
// (row r of x at r·XStride, of y at r·YStride; 0 means Width); y == x is
// allowed. w is ignored (may be 0) for nn.NormUnit.
func (b *Backend) kRMSNorm(y, x, w devptr, s nn.NormSpec) error {
	xs, ys := s.XStride, s.YStride
	if xs == 0 {
		xs = s.Width
	}
	if ys == 0 {
		ys = s.Width
	}
	if s.Rows == 0 {
		return nil
	}
	if s.Width < 1 || s.Kind < nn.NormWeight || s.Kind > nn.NormUnit {
		return fmt.Errorf("cuda: kernel rms_norm_rows: width %d, kind %d", s.Width, s.Kind)
	}
	if err := checkExt("rms_norm_rows", int64(s.Rows), int64(xs), int64(ys), span(s.Rows, xs, s.Width), span(s.Rows, ys, s.Width)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeNormRows)).ptr(x).ptr(w).ptr(y).
		u32(s.Rows).u32(s.Width).u32(xs).u32(ys).f32(s.Eps).u32(int(s.Kind))
	return b.launch("rms_norm_rows", [3]int{s.Rows, 1, 1}, tgThreads, p, sizeNormRows)
}

// kRoPE rotates s.Rows head vectors of x in place (row r at r·s.Stride,
// position s.Pos0 + r/s.PerPos): pair i < pairs by angle pos·invFreq[i]
// (invFreq: pairs floats on the device), dims (i, i+half), or (2i, 2i+1)
// when interleaved (half is then unused).
func (b *Backend) kRoPE(x, invFreq devptr, pairs, half int, interleaved bool, s nn.RoPESpec) error {
	if s.Rows == 0 || pairs == 0 {
		return nil
	}
	hd := 2 * pairs // dims a row's pairs reach
	if !interleaved {
		hd = half + pairs
		if half < pairs {
			return fmt.Errorf("cuda: kernel rope: half %d below the %d pairs", half, pairs)
		}
	}
	if s.PerPos < 1 || s.Stride < 1 || s.Pos0 < 0 || pairs < 0 {
		return fmt.Errorf("cuda: kernel rope: spec %+v, %d pairs", s, pairs)
	}
	lastPos := int64(s.Pos0) + int64((s.Rows-1)/s.PerPos)
	if err := checkExt("rope", int64(s.Rows), int64(s.Stride), int64(half), int64(s.Rows)*int64(pairs), span(s.Rows, s.Stride, hd), lastPos); err != nil {
		return err
	}
	if lastPos >= 1<<24 {
		return fmt.Errorf("cuda: kernel rope: position %d is not exact in float32", lastPos)
	}
	p := params(make([]byte, 0, sizeRoPE)).ptr(x).ptr(invFreq).
		u32(s.Rows).u32(pairs).u32(half).u32(s.Stride).u32(s.PerPos).u32(s.Pos0).u32(b2u(interleaved)).u32(0)
	return b.launch1D("rope", s.Rows*pairs, p, sizeRoPE)
}

// kAttention writes o [T][Heads·VDim] for a chunk of T queries q [T][Heads·
// QStride] at positions pos..pos+T-1: each attends (causally; only the last
// window positions when window > 0) to keys and values of positions < pos
// in the cache kc, vc (rows of kWidth, vWidth floats; position j at row j,
// or j % window when window > 0) and of positions ≥ pos in the chunk's k
// [T][kWidth], v [T][vWidth]. It only reads the cache.
//
// Limits: head dim and value dim at most 512; Heads a multiple of KVHeads;
// every row holds its heads (KVHeads·HeadDim ≤ kWidth, KVHeads·VDim ≤
// vWidth, HeadDim ≤ QStride).
//
// nsplit > 1 splits each (token, head)'s keys into that many runs (part:
// scratch of attnPartFloats floats) combined by attention_merge into o.
func (b *Backend) kAttention(o, q, k, v, kc, vc, part devptr, pos, T, window, kWidth, vWidth, nsplit int, d nn.AttnDims) error {
	if T == 0 {
		return nil
	}
	vd := d.VDim
	if vd == 0 {
		vd = d.HeadDim
	}
	if T < 0 || pos < 0 || window < 0 || d.Heads < 1 || d.KVHeads < 1 || d.Heads%d.KVHeads != 0 ||
		d.HeadDim < 1 || d.HeadDim > attnMaxDim || vd < 1 || vd > attnMaxDim || d.QStride < d.HeadDim ||
		d.KVHeads*d.HeadDim > kWidth || d.KVHeads*vd > vWidth {
		return fmt.Errorf("cuda: kernel attention: dims %+v, T %d, pos %d, window %d, widths %d, %d", d, T, pos, window, kWidth, vWidth)
	}
	cacheRows := pos // rows of the cache the kernel may read
	if window > 0 {
		cacheRows = min(pos, window)
	}
	if err := checkExt("attention", int64(pos)+int64(T), int64(T)*int64(d.Heads), int64(T)*int64(d.Heads)*int64(d.QStride),
		int64(T)*int64(d.Heads)*int64(vd), int64(T)*int64(kWidth), int64(T)*int64(vWidth),
		int64(cacheRows)*int64(kWidth), int64(cacheRows)*int64(vWidth)); err != nil {
		return err
	}
	keys := 0
	if nsplit > 1 {
		keys = ceilDiv(gpukernels.AttnKeys(pos, T, window), nsplit)
		if err := checkExt("attention", int64(T)*int64(d.Heads)*int64(nsplit), attnPartFloats(T, d.Heads, vd, nsplit)); err != nil {
			return err
		}
	} else {
		nsplit, part = 1, 0
	}
	p := params(make([]byte, 0, sizeAttn)).ptr(o).ptr(q).ptr(k).ptr(v).ptr(kc).ptr(vc).ptr(part).
		u32(T).u32(d.Heads).u32(d.KVHeads).u32(d.HeadDim).u32(vd).u32(d.QStride).u32(kWidth).u32(vWidth).
		u32(pos).u32(window).f32(d.Scale).u32(nsplit).u32(keys).u32(0)
	if nsplit == 1 && !b.attnTileOff && gpukernels.AttnTiled(T, d.HeadDim, vd) {
		return b.launch("attention_tile", [3]int{gpukernels.AttnTileGroups(T, d.Heads, d.KVHeads), 1, 1}, tgThreads, p, sizeAttn)
	}
	kernel, groups := "attention", T*d.Heads*nsplit
	if b.attnGQA(T, d, vd) {
		kernel, groups = "attention_gqa", T*d.KVHeads*nsplit
	}
	if err := b.launch(kernel, [3]int{groups, 1, 1}, tgThreads, p, sizeAttn); err != nil || nsplit == 1 {
		return err
	}
	p = params(make([]byte, 0, sizeAttnMerge)).ptr(o).ptr(part).u32(T * d.Heads).u32(vd).u32(nsplit).u32(0)
	return b.launch("attention_merge", [3]int{T * d.Heads, 1, 1}, tgThreads, p, sizeAttnMerge)
}

// attnPartFloats is the scratch of a split attention: each run's
// unnormalised output, maximum and sum.
func attnPartFloats(T, heads, vd, nsplit int) int64 {
	return int64(T) * int64(heads) * int64(nsplit) * int64(vd+2)
}

// attnBusyGroups is the number of groups below which a chunk's attention is
// split (gpukernels.AttnSplits): the H200 has 132 multiprocessors.
const attnBusyGroups = 128

// attnSplits is the number of runs kAttention cuts each (token, head)'s keys
// into for a chunk of T tokens of heads heads whose last token sees
// maxKeys keys, on the per-(token, head) kernel.
func attnSplits(T, heads, maxKeys int) int {
	return gpukernels.AttnSplits(T, heads, maxKeys, attnBusyGroups)
}

// attnSplitsFor is attnSplits for the kernel kAttention picks for a chunk
// of T tokens of dims d (value dim vd).
func (b *Backend) attnSplitsFor(T int, d nn.AttnDims, vd, maxKeys int) int {
	if b.attnGQA(T, d, vd) {
		// Two groups a multiprocessor: on the H100, at 4,096 and 16,384
		// positions 256 groups (runs of 32 and 128 keys) were faster
		// than 128 (BenchmarkDecodeKernels, seventeenth session).
		return gpukernels.AttnGQASplits(T, d.KVHeads, maxKeys, 2*attnBusyGroups)
	}
	return attnSplits(T, d.Heads, maxKeys)
}

// attnGQA reports whether kAttention runs attention_gqa (a group per
// token, KV head and run, scoring the KV head's query heads together) for
// a chunk of T tokens: chunks too short for attention_tile (decode), dims
// it takes, unless QPACK_CUDA_ATTN_GQA=0.
func (b *Backend) attnGQA(T int, d nn.AttnDims, vd int) bool {
	return !b.attnGQAOff && gpukernels.AttnGQA(T, d.Heads, d.KVHeads, d.HeadDim, vd)
}

// attnGQAEnv set to 0 keeps decode on the per-(token, head) attention.
const attnGQAEnv = "QPACK_CUDA_ATTN_GQA"

// kDeltaNet runs the Gated DeltaNet conv, q/k norms and recurrence over a
// chunk (nn.DeltaNetArgs documents the arithmetic), updating the window and
// state; a.Scratch receives the conv output.
// It queues deltanet_conv, deltanet_qknorm and deltanet_rec (deltanet_rec_reg
// for head dims up to 128: the state in registers).
//
// Limits: 1 ≤ K ≤ 16; Dk, Dv ≤ 256; Nv a multiple of Nk.
func (b *Backend) kDeltaNet(a *deltaNetPtrs) error {
	if a.T == 0 {
		return nil
	}
	if a.T < 0 || a.Nk < 1 || a.Nv < 1 || a.Nv%a.Nk != 0 || a.Dk < 1 || a.Dk > dnMaxDim || a.Dv < 1 || a.Dv > dnMaxDim ||
		a.K < 1 || a.K > convMaxK {
		return fmt.Errorf("cuda: kernel deltanet: T %d, Nk %d, Nv %d, Dk %d, Dv %d, K %d", a.T, a.Nk, a.Nv, a.Dk, a.Dv, a.K)
	}
	C := 2*a.Nk*a.Dk + a.Nv*a.Dv
	if err := checkExt("deltanet", int64(C), int64(a.T)*int64(C), int64(C)*int64(a.K), int64(a.K-1)*int64(C),
		int64(a.Nv)*int64(a.Dk)*int64(a.Dv), int64(a.T)*int64(a.Nv)*int64(a.Dv), int64(a.T)*2*int64(a.Nk)); err != nil {
		return err
	}
	pc := params(make([]byte, 0, sizeDNConv)).ptr(a.Window).ptr(a.Mixed).ptr(a.Conv).ptr(a.Scratch).
		u32(a.T).u32(C).u32(a.K).u32(0)
	// A group per 32 channels (gpukernels/40_deltanet.qk).
	if err := b.launch("deltanet_conv", [3]int{ceilDiv(C, simdWidth), 1, 1}, tgThreads, pc, sizeDNConv); err != nil {
		return err
	}
	qScale := float32(1 / math.Sqrt(float64(a.Dk)))         // as nn.DeltaNetHost
	cols := a.Dk <= 128 && a.Dv <= 128 && b.dnCols.use(a.T) // QK_DNR_MAXD: deltanet_rec_cols
	var inline float32
	if cols && a.InlineQKNorm && a.T == 1 {
		inline = qScale
	} else {
		pn := params(make([]byte, 0, sizeDNNorm)).ptr(a.Scratch).u32(a.T).u32(C).u32(a.Nk).u32(a.Dk).f32(qScale).u32(0)
		if err := b.launch("deltanet_qknorm", [3]int{a.T * 2 * a.Nk, 1, 1}, tgThreads, pn, sizeDNNorm); err != nil {
			return err
		}
	}
	p := params(make([]byte, 0, sizeDNRec)).ptr(a.State).ptr(a.Y).ptr(a.Scratch).ptr(a.Z).ptr(a.B).ptr(a.A).
		ptr(a.NegA).ptr(a.DtBias).ptr(a.Norm).
		u32(a.T).u32(C).u32(a.Nk).u32(a.Nv).u32(a.Dk).u32(a.Dv).f32(a.Eps).f32(inline)
	// Heads up to 128 x 128 (the real models') keep the state in registers
	// over the chunk (deltanet_rec_reg, same parameters and bits):
	// deltanet_rec reads it twice and writes it once per token, 6.3 µs a
	// token on the H200 in a 4,096-token prefill.
	kernel := "deltanet_rec"
	if a.Dk <= 128 && a.Dv <= 128 { // QK_DNR_MAXD
		kernel = "deltanet_rec_reg"
		// The recurrence over a quarter of a head's columns per group
		// (four times the groups), its norm and gate after it: the same
		// bits.
		if cols {
			if err := b.launch("deltanet_rec_cols", [3]int{a.Nv * ceilDiv(a.Dv, simdWidth), 1, 1}, tgThreads, p, sizeDNRec); err != nil {
				return err
			}
			if a.DeferOut {
				a.Out = p
				return nil
			}
			return b.launch("deltanet_out", [3]int{a.T * a.Nv, 1, 1}, tgThreads, p, sizeDNRec)
		}
	}
	return b.launch(kernel, [3]int{a.Nv, 1, 1}, tgThreads, p, sizeDNRec)
}

// dnColsEnv picks where kDeltaNet splits a head's columns over groups
// (deltanet_rec_cols): 0 never (deltanet_rec_reg, a group per head), N
// for chunks of at most N tokens, else (unset, "all") for every chunk.
// Both walk a chunk's tokens in order; the split runs four times the
// groups, each a quarter of the work a token. Measured on the H100
// (BENCHMARKS.md, eleventh session; 35B dims, 8 layers): decode 5-12%
// faster, prefill of 4,096 tokens 1.11x in one chunk and 1.12x in chunks
// of 1,024.
const dnColsEnv = "QPACK_CUDA_DN_COLS"

// dnColsPolicy is dnColsEnv's value: -1 never, 0 always, else the
// longest chunk.
type dnColsPolicy int

func dnColsFor(v string) dnColsPolicy {
	if v == "0" {
		return -1
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return dnColsPolicy(n)
	}
	return 0
}

func (d dnColsPolicy) use(T int) bool { return d == 0 || (d > 0 && T <= int(d)) }

// kGather writes dst[r·n+i] = src[r·srcStride+ix[i]] for rows r (ix: n
// int32 on the device).
// Every ix[i] must lie in [0, srcStride) (Device.Indices checks it; the
// kernel does not).
func (b *Backend) kGather(dst, src, ix devptr, n, rows, srcStride int) error {
	if n == 0 || rows == 0 {
		return nil
	}
	if n < 0 || rows < 0 || srcStride < 1 {
		return fmt.Errorf("cuda: kernel gather: n %d, rows %d, stride %d", n, rows, srcStride)
	}
	if err := checkExt("gather", int64(n)*int64(rows), int64(rows)*int64(srcStride)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeGather)).ptr(dst).ptr(src).ptr(ix).u32(n).u32(rows).u32(srcStride).u32(0)
	return b.launch1D("gather", n*rows, p, sizeGather)
}

// kGatherRows copies row rows[i] of src into row i of dst for i < n (rows:
// n int32 on the device, each below srcRows; rows of width floats).
func (b *Backend) kGatherRows(dst, src, rows devptr, n, srcRows, width int) error {
	return b.rowsCopy("gather_rows", dst, src, rows, n, srcRows, width)
}

// rowsCopy launches gather_rows or scatter_rows; far is the row count of
// the side the indices address.
func (b *Backend) rowsCopy(kernel string, dst, src, rows devptr, n, far, width int) error {
	if n == 0 || width == 0 {
		return nil
	}
	if n < 0 || width < 0 || far < 1 {
		return fmt.Errorf("cuda: kernel %s: n %d, width %d, rows %d", kernel, n, width, far)
	}
	if err := checkExt(kernel, int64(n)*int64(width), int64(far)*int64(width)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeRows)).ptr(dst).ptr(src).ptr(rows).u32(n).u32(width)
	return b.launch1D(kernel, n*width, p, sizeRows)
}

// kScatterRows copies row i of src into row rows[i] of dst for i < n (rows:
// n distinct int32 on the device, each below dstRows).
func (b *Backend) kScatterRows(dst, src, rows devptr, n, dstRows, width int) error {
	return b.rowsCopy("scatter_rows", dst, src, rows, n, dstRows, width)
}

// kScatterRows2 is kScatterRows of src0 into dst0 (rows of width0) and of
// src1 into dst1 (rows of width1) over the same rows, in one launch
// (scatter_rows2).
func (b *Backend) kScatterRows2(dst0, src0, dst1, src1, rows devptr, n, dstRows, width0, width1 int) error {
	if n == 0 || width0+width1 == 0 {
		return nil
	}
	if n < 0 || width0 < 0 || width1 < 0 || dstRows < 1 {
		return fmt.Errorf("cuda: kernel scatter_rows2: n %d, widths %d and %d, rows %d", n, width0, width1, dstRows)
	}
	if err := checkExt("scatter_rows2", int64(n)*int64(width0+width1), int64(dstRows)*int64(max(width0, width1))); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeRows2)).ptr(dst0).ptr(src0).ptr(dst1).ptr(src1).ptr(rows).
		u32(n).u32(width0).u32(width1).u32(0)
	return b.launch1D("scatter_rows2", n*(width0+width1), p, sizeRows2)
}

// sizeRows2 is the size of Rows2Params (internal/gpukernels/60_gather.qk).
const sizeRows2 = 56

// kGLU writes act(gate)·up into y (n floats; y may be gate or up).
func (b *Backend) kGLU(act nn.Activation, y, gate, up devptr, n int) error {
	if act != nn.SiLUGate && act != nn.GELUTanhGate {
		return fmt.Errorf("cuda: kernel glu: activation %d", act)
	}
	a := 0
	if act == nn.GELUTanhGate {
		a = actGELUTanh
	}
	return b.binary("glu", y, gate, up, n, a)
}

func (b *Backend) binary(kernel string, y, a, c devptr, n, act int) error {
	if n == 0 {
		return nil
	}
	if err := checkExt(kernel, int64(n)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeBinary)).ptr(y).ptr(a).ptr(c).u32(n).u32(act)
	return b.launch1D(kernel, n, p, sizeBinary)
}

// kSigmoidMul does o[r·oStride+i] *= sigmoid(g[r·gStride+i]) for i < width,
// r < rows.
func (b *Backend) kSigmoidMul(o, g devptr, rows, width, oStride, gStride int) error {
	if rows == 0 || width == 0 {
		return nil
	}
	if rows < 0 || width < 0 || oStride < 0 || gStride < 0 {
		return fmt.Errorf("cuda: kernel sigmoid_mul: rows %d, width %d, strides %d, %d", rows, width, oStride, gStride)
	}
	if err := checkExt("sigmoid_mul", int64(rows)*int64(width), span(rows, oStride, width), span(rows, gStride, width)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeSigmoidMul)).ptr(o).ptr(g).u32(rows).u32(width).u32(oStride).u32(gStride)
	return b.launch1D("sigmoid_mul", rows*width, p, sizeSigmoidMul)
}

// kAdd does x[:n] += y[:n].
func (b *Backend) kAdd(x, y devptr, n int) error { return b.binary("add", x, y, 0, n, 0) }

// kAddGated does out[r] += sigmoid(g[r])·x[r] for rows r < rows of width.
func (b *Backend) kAddGated(out, x, g devptr, rows, width int) error {
	if rows == 0 || width == 0 {
		return nil
	}
	if rows < 0 || width < 0 {
		return fmt.Errorf("cuda: kernel add_gated: rows %d, width %d", rows, width)
	}
	if err := checkExt("add_gated", int64(rows)*int64(width)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeAddGated)).ptr(out).ptr(x).ptr(g).u32(rows).u32(width)
	return b.launch1D("add_gated", rows*width, p, sizeAddGated)
}

// kScale does x[:n] *= a.
func (b *Backend) kScale(x devptr, a float32, n int) error { return b.unary("scale", x, a, n) }

func (b *Backend) unary(kernel string, x devptr, c float32, n int) error {
	if n == 0 {
		return nil
	}
	if err := checkExt(kernel, int64(n)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeUnary)).ptr(x).u32(n).f32(c)
	return b.launch1D(kernel, n, p, sizeUnary)
}

// kSoftcap replaces x[:n] by cap·tanh(x/cap) (cap > 0).
func (b *Backend) kSoftcap(x devptr, cap float32, n int) error {
	if !(cap > 0) || math.IsInf(float64(cap), 0) {
		return fmt.Errorf("cuda: kernel softcap: cap %g", cap)
	}
	return b.unary("softcap", x, cap, n)
}

// kCombine writes out[t] = Σ_j wts[t·k+j]·res[t·k+j] for T rows of width,
// j in order (wts: T·k floats on the device).
func (b *Backend) kCombine(out, res, wts devptr, T, k, width int) error {
	if T == 0 || width == 0 {
		return nil
	}
	if T < 0 || width < 0 || k < 0 {
		return fmt.Errorf("cuda: kernel combine: T %d, k %d, width %d", T, k, width)
	}
	if err := checkExt("combine", int64(T)*int64(width), int64(T)*int64(k), int64(T)*int64(k)*int64(width)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeCombine)).ptr(out).ptr(res).ptr(wts).u32(T).u32(k).u32(width).u32(0)
	return b.launch1D("combine", T*width, p, sizeCombine)
}

// kRouteTopK computes, per token t < T, the softmax of logits [T][E] and its
// top k (descending; ties to the lower index, as nn.TopK), into sel [T][k]
// int32 and wts [T][k] floats, renormalised to sum to one when norm. The
// logits are only read. A token whose logits hold a NaN gets sel entries
// of -1: the caller must check every sel in [0, E) and report an error
// otherwise. Limits: E ≤ 4096, 1 ≤ k ≤ min(E, 64).
func (b *Backend) kRouteTopK(sel, wts, logits devptr, T, E, k int, norm bool) error {
	if T == 0 {
		return nil
	}
	if T < 0 || E < 1 || E > routeMaxE || k < 1 || k > min(E, routeMaxK) {
		return fmt.Errorf("cuda: kernel route_topk: T %d, E %d, k %d", T, E, k)
	}
	if err := checkExt("route_topk", int64(T)*int64(E)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeRoute)).ptr(logits).ptr(sel).ptr(wts).u32(T).u32(E).u32(k).u32(b2u(norm))
	return b.launch("route_topk", [3]int{T, 1, 1}, tgThreads, p, sizeRoute)
}

// kSelectTop queues the top-k selection of x[:n] (internal/gpukernels/
// 80_select.qk): select_chunk writes each chunk's k largest into part
// (G·k floats, G = ceil(n/4096)), select_merge the k-th largest of them to
// out[0], select_list each chunk's candidates (ids at least it, ascending,
// the first limit) to the regions after it, laid out as selectLayout says.
func (b *Backend) kSelectTop(out, x, part devptr, n, k, limit int) error {
	if !gpukernels.SelectFits(n, k) || limit < 1 || int64(gpukernels.SelectChunks(n))*int64(limit) >= indexLimit {
		return fmt.Errorf("cuda: kernels select_*: n %d, k %d, limit %d", n, k, limit)
	}
	G := gpukernels.SelectChunks(n)
	cnt, ids, vals := selectLayout(out, G, limit)
	p := params(make([]byte, 0, sizeSelChunk)).ptr(x).ptr(part).u32(n).u32(k)
	if err := b.launch("select_chunk", [3]int{G, 1, 1}, tgThreads, p, sizeSelChunk); err != nil {
		return err
	}
	p = params(make([]byte, 0, sizeSelMerge)).ptr(part).ptr(out).u32(G * k).u32(k)
	if err := b.launch("select_merge", [3]int{1, 1, 1}, tgThreads, p, sizeSelMerge); err != nil {
		return err
	}
	p = params(make([]byte, 0, sizeSelList)).ptr(x).ptr(out).ptr(cnt).ptr(ids).ptr(vals).u32(n).u32(limit)
	return b.launch("select_list", [3]int{G, 1, 1}, tgThreads, p, sizeSelList)
}

// selectLayout places the selection's results after the threshold at out
// (one float): G counts, then G regions of limit ids, then of limit values
// (int32 and float32), so one download brings them all.
func selectLayout(out devptr, G, limit int) (cnt, ids, vals devptr) {
	cnt = out + 4
	ids = cnt + 4*uint64(G)
	vals = ids + 4*uint64(G*limit)
	return cnt, ids, vals
}
