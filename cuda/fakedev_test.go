package cuda

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/qpack-go/qpack/internal/gpukernels"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// fakeDev is a device in Go memory, so the Backend's host logic (argument
// placement, staging, in-place use of Alloc memory, parameter blocks, grid
// sizes, launch splitting, CPU fallback, freeing) is tested without a GPU.
// Device memory gets addresses of its own (from 1<<50); host memory from
// hostAlloc is Go memory whose device address is its host address, as with
// unified addressing. Its "kernels" decode the parameter block the way the
// CUDA structs lay it out and compute with the CPU backend.
type fakeDev struct {
	t        testing.TB
	dev      map[devptr][]byte
	host     map[devptr][]byte
	next     devptr
	fail     error
	launches []string
	// prefetchRanges: MoE launches with ranges to prefetch (next set);
	// pfFirst the last one's first address, which the next gemv launch's
	// first matrix is to start at (pfHits counts those that do, pfMisses
	// those that do not).
	prefetchRanges, pfHits, pfMisses int
	pfFirst                          devptr
	// qknormed: a deltanet_qknorm ran since the last deltanet_conv.
	qknormed bool
	grids    [][3]uint32
	// gemmLaunchOnly: record gemm launches without computing them (for
	// tests that pass made-up addresses).
	gemmLaunchOnly bool

	// The layer device's needs: streams and events are synchronous here,
	// so they are only logged (calls, when log is set); failCall makes a
	// named method fail; limit caps device memory (0: none).
	log      bool
	calls    []string
	failCall map[string]error
	limit    int64
	inUse    int64
	sizes    map[devptr]int64
	events   int
	liveEv   map[event]bool
	freeMem  int64
	conv     []byte // the last deltanet_conv's parameters
	// noKernels: launches are checked and counted but compute nothing (the
	// host's own cost, BenchmarkLayerHostFake).
	noKernels bool
	dnOut     devptr // the y of a deltanet_rec_cols whose deltanet_out is due (0: none)
	// reuse: memAlloc hands a freed address of the same size out again
	// (as the driver does), so that queues of later passes can have the
	// shapes of earlier ones.
	reuse bool
	freed map[int64][]devptr
}

func newFake(t testing.TB) *fakeDev {
	return &fakeDev{t: t, dev: map[devptr][]byte{}, host: map[devptr][]byte{}, next: 1 << 50,
		failCall: map[string]error{}, sizes: map[devptr]int64{}, liveEv: map[event]bool{}, freeMem: 1 << 30}
}

// note logs a call and returns the failure set for it.
func (f *fakeDev) note(call string, args ...any) error {
	if f.log {
		f.calls = append(f.calls, fmt.Sprint(append([]any{call}, args...)...))
	}
	return f.failCall[call]
}

func (f *fakeDev) htodOn(s stream, dst devptr, src []byte) error {
	if err := f.note("htodOn", s); err != nil {
		return err
	}
	copy(f.at(dst, len(src)), src)
	return nil
}

func (f *fakeDev) memset(dst devptr, n int) error {
	if err := f.note("memset"); err != nil {
		return err
	}
	if n%4 != 0 {
		f.t.Fatalf("memset of %d bytes", n)
	}
	clear(f.at(dst, n))
	return nil
}

func (f *fakeDev) newEvent() (event, error) {
	if err := f.note("newEvent"); err != nil {
		return 0, err
	}
	f.events++
	e := event(f.events)
	f.liveEv[e] = true
	return e, nil
}

func (f *fakeDev) checkEvent(e event) {
	if !f.liveEv[e] {
		f.t.Fatalf("event %d is not live", e)
	}
}

func (f *fakeDev) record(e event, s stream) error {
	f.checkEvent(e)
	return f.note("record", e, s)
}

func (f *fakeDev) waitEvent(s stream, e event) error {
	f.checkEvent(e)
	return f.note("wait", s, e)
}

func (f *fakeDev) eventSync(e event) error {
	f.checkEvent(e)
	return f.note("eventSync", e)
}

func (f *fakeDev) freeEvent(e event) error {
	f.checkEvent(e)
	delete(f.liveEv, e)
	return nil
}

func (f *fakeDev) memInfo() (int64, int64, error) {
	return f.freeMem, 2 * f.freeMem, f.note("memInfo")
}

func (f *fakeDev) syncAll() error { return f.note("syncAll") }

func (f *fakeDev) name() string                                     { return "fake" }
func (f *fakeDev) computeCapability() (int, int)                    { return 9, 0 }
func (f *fakeDev) compile(src, name string) (string, string, error) { return "fake", "", nil }
func (f *fakeDev) function(name string) (uintptr, error) {
	for i, k := range kernelNames {
		if k == name {
			return uintptr(i + 1), nil
		}
	}
	return 0, fmt.Errorf("no kernel %s", name)
}

func (f *fakeDev) memAlloc(n int) (devptr, error) {
	if err := f.note("memAlloc", n); err != nil {
		return 0, err
	}
	if f.limit > 0 && f.inUse+int64(n) > f.limit {
		return 0, &Error{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	}
	f.inUse += int64(n)
	if ps := f.freed[int64(n)]; f.reuse && len(ps) > 0 {
		p := ps[len(ps)-1]
		f.freed[int64(n)] = ps[:len(ps)-1]
		f.sizes[p] = int64(n)
		f.dev[p] = make([]byte, n)
		return p, nil
	}
	f.sizes[f.next] = int64(n)
	p := f.next
	f.dev[p] = make([]byte, n)
	f.next += devptr(n+4095) &^ 4095
	return p, nil
}

func (f *fakeDev) memFree(p devptr) error {
	if _, ok := f.dev[p]; !ok {
		return fmt.Errorf("memFree of %#x", p)
	}
	f.inUse -= f.sizes[p]
	if f.reuse {
		if f.freed == nil {
			f.freed = map[int64][]devptr{}
		}
		f.freed[f.sizes[p]] = append(f.freed[f.sizes[p]], p)
	}
	delete(f.sizes, p)
	delete(f.dev, p)
	return nil
}

func (f *fakeDev) hostAlloc(n int) ([]byte, devptr, error) {
	raw := make([]byte, n+4096)
	off := int((4096 - uintptr(unsafe.Pointer(&raw[0]))%4096) % 4096)
	b := raw[off : off+n : off+n]
	p := devptr(uintptr(unsafe.Pointer(&b[0])))
	f.host[p] = b
	return b, p, nil
}

func (f *fakeDev) hostFree(b []byte) error {
	p := devptr(uintptr(unsafe.Pointer(&b[0])))
	if _, ok := f.host[p]; !ok {
		return fmt.Errorf("hostFree of %#x", p)
	}
	delete(f.host, p)
	return nil
}

// at returns the n bytes at device address p, failing the test if they are
// not inside one allocation.
func (f *fakeDev) at(p devptr, n int) []byte {
	for _, m := range []map[devptr][]byte{f.dev, f.host} {
		for base, b := range m {
			if p >= base && p+devptr(n) <= base+devptr(len(b)) {
				return b[p-base : p-base+devptr(n)]
			}
		}
	}
	f.t.Fatalf("device address %#x (+%d) is in no allocation", p, n)
	return nil
}

func (f *fakeDev) htod(dst devptr, src []byte) error {
	if err := f.note("htod"); err != nil {
		return err
	}
	copy(f.at(dst, len(src)), src)
	return nil
}
func (f *fakeDev) dtoh(dst []byte, src devptr) error {
	if err := f.note("dtoh"); err != nil {
		return err
	}
	copy(dst, f.at(src, len(dst)))
	return nil
}
func (f *fakeDev) dtod(dst, src devptr, n int) error {
	if err := f.note("dtod"); err != nil {
		return err
	}
	copy(f.at(dst, n), f.at(src, n))
	return nil
}
func (f *fakeDev) sync() error                            { return f.note("sync") }
func (f *fakeDev) timed(fn func() error) (float32, error) { return 0, fn() }
func (f *fakeDev) close() error {
	if len(f.dev)+len(f.host) != 0 {
		return fmt.Errorf("closed with %d device and %d host allocations live", len(f.dev), len(f.host))
	}
	if len(f.liveEv) != 0 {
		return fmt.Errorf("closed with %d events live", len(f.liveEv))
	}
	return nil
}

func f32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func (f *fakeDev) launch(fn uintptr, grid, block [3]uint32, p []byte) error {
	if f.fail != nil {
		return f.fail
	}
	k := kernelNames[fn-1]
	if f.noKernels {
		return nil
	}
	f.launches = append(f.launches, k)
	f.grids = append(f.grids, grid)
	if block != [3]uint32{tgThreads, 1, 1} {
		f.t.Fatalf("%s: block %v", k, block)
	}
	u64 := func(i int) devptr { return binary.LittleEndian.Uint64(p[8*i:]) }
	u32 := func(off int) int { return int(binary.LittleEndian.Uint32(p[off:])) }
	if f.pfFirst != 0 && strings.HasPrefix(k, "gemv_") {
		// Every gemv block starts with its (first) matrix's packed weights.
		if u64(0) == f.pfFirst {
			f.pfHits++
		} else {
			f.pfMisses++
		}
		f.pfFirst = 0
	}
	switch k {
	case "gemv_q4", "gemv_q8", "gemv_qn", "gemv_dense":
		rows, cols, group, st, bits := u32(40), u32(44), u32(48), mlxq.Float(u32(52)), u32(56)
		per := rowsPerTG
		if k == "gemv_q4" || k == "gemv_q8" {
			per = rowsPerTG / f.split(k, u32(60)) * qRows
		}
		if int(grid[0])*per < rows || (int(grid[0])-1)*per >= rows {
			f.t.Fatalf("%s: grid %v for %d rows", k, grid, rows)
		}
		n := int(grid[1])
		var m mlxq.Matrix
		var err error
		if bits == 0 {
			m, err = mlxq.NewDense(rows, cols, st, f.at(u64(0), rows*cols*st.Size()))
		} else {
			sb := rows * (cols / group) * st.Size()
			m, err = mlxq.NewQuantized(rows, cols, bits, group, st, f.at(u64(0), rows*cols*bits/8), f.at(u64(1), sb), f.at(u64(2), sb))
		}
		if err != nil {
			f.t.Fatal(err)
		}
		runtime.CPU{}.MatMul(m, f32s(f.at(u64(4), 4*n*rows)), f32s(f.at(u64(3), 4*n*cols)), n)
	case "gemv_q4_set", "gemv_q8_set":
		f.gemvSetOnCPU(k, grid, p)
	case "gemv_q4_set_norm", "gemv_q8_set_norm", "gemv_q4_set_gnorm", "gemv_q8_set_gnorm", "gemv_q4_set_sigmul", "gemv_q8_set_sigmul":
		f.gemvSetNormOnCPU(k, grid, p)
	case "rms_norm":
		rows, dim := u32(24), u32(28)
		eps := math.Float32frombits(uint32(u32(32)))
		runtime.CPU{}.RMSNorm(f32s(f.at(u64(2), 4*rows*dim)), f32s(f.at(u64(0), 4*rows*dim)), f32s(f.at(u64(1), 4*dim)), eps)
	case "swiglu":
		n := u32(24)
		runtime.CPU{}.SwiGLU(f32s(f.at(u64(2), 4*n)), f32s(f.at(u64(0), 4*n)), f32s(f.at(u64(1), 4*n)))
	default:
		if strings.HasPrefix(k, "moe_") {
			f.moeKernel(k, grid, p)
			break
		}
		if strings.HasPrefix(k, "gemm_group_") {
			f.gemmGroupOnCPU(k, grid, p)
			break
		}
		if strings.HasPrefix(k, "gemm_") {
			if !f.gemmLaunchOnly {
				f.gemmOnCPU(k, decodeGemm(p))
			}
			break
		}
		f.layerKernel(k, grid, p)
	}
	return nil
}

// split checks a matvec's split field (simdgroups sharing a row quad):
// a power of two from 1 to QP_SIMDS.
func (f *fakeDev) split(k string, v int) int {
	if v < 1 || v > rowsPerTG || v&(v-1) != 0 {
		f.t.Fatalf("%s: split %d", k, v)
	}
	return v
}

// gemvSetNormOnCPU computes a fused launch (QGemvSetNorm): its norm as
// add_rms_norm_rows (the fake's arithmetic for it), then its products as
// gemv_*_set of the norm, after checking the counter word is zero and the
// launch one vector.
func (f *fakeDev) gemvSetNormOnCPU(k string, grid [3]uint32, p []byte) {
	if len(p) != sizeQGemvSetNorm || grid[1] != 1 {
		f.t.Fatalf("%s: %d-byte block, grid %v", k, len(p), grid)
	}
	u64 := func(off int) devptr { return binary.LittleEndian.Uint64(p[off:]) }
	x, r, w, y, done := u64(128), u64(192), u64(200), u64(208), u64(216)
	cols := int(binary.LittleEndian.Uint32(p[172:]))
	if c := binary.LittleEndian.Uint32(f.at(done, 4)); c != 0 {
		f.t.Fatalf("%s: the group counter holds %d before the launch", k, c)
	}
	kind := binary.LittleEndian.Uint32(p[228:])
	if strings.HasSuffix(k, "_sigmul") {
		// The attention's output gate, as sigmoid_mul (the fake's).
		dv, gs := int(binary.LittleEndian.Uint32(p[256:])), int(binary.LittleEndian.Uint32(p[260:]))
		if kind != normSigMul || x != y || dv < 1 || cols%dv != 0 {
			f.t.Fatalf("%s: kind %d, x %#x, y %#x, rows of %d", k, kind, x, y, dv)
		}
		f.layerKernel("sigmoid_mul", [3]uint32{uint32(ceilDiv(cols, tgThreads)), 1, 1},
			params(nil).ptr(x).ptr(r).u32(cols/dv).u32(dv).u32(dv).u32(gs))
	} else if gated := strings.HasSuffix(k, "_gnorm"); gated {
		// The fake's deltanet_rec_cols computed y whole, its gated norm
		// too (see deltanet_out): this launch must follow it, over its y.
		// Where the recurrence ran elsewhere (cpurun's), y is its output
		// before the norm: the norm is the host's (nn.DeltaNetHost's).
		if kind != normGated || x != y || f.dnOut != y && f.dnOut != 0 {
			f.t.Fatalf("%s: kind %d, x %#x, y %#x: not the deltanet_out of the recurrence before (y %#x)", k, kind, x, y, f.dnOut)
		}
		if f.dnOut == 0 {
			dv := int(binary.LittleEndian.Uint32(p[256:]))
			eps := math.Float32frombits(binary.LittleEndian.Uint32(p[224:]))
			o, z, nw := f32s(f.at(y, 4*cols)), f32s(f.at(r, 4*cols)), f32s(f.at(w, 4*dv))
			for h := 0; h < cols; h += dv {
				nn.RMSNorm(o[h:h+dv], o[h:h+dv], nw, eps)
				for j := range dv {
					o[h+j] *= nn.SiLU(z[h+j])
				}
			}
		}
		f.dnOut = 0
	} else {
		norm := params(nil).ptr(x).ptr(r).ptr(w).ptr(y).u32(1).u32(cols).u32(cols)
		norm = append(norm, p[224:232]...) // eps, kind
		norm = norm.u32(0)
		f.layerKernel("add_rms_norm_rows", [3]uint32{1, 1, 1}, norm)
	}
	set := append([]byte(nil), p[:sizeQGemvSet]...)
	binary.LittleEndian.PutUint64(set[128:], y)
	f.gemvSetOnCPU(k[:strings.Index(k, "_set")+len("_set")], grid, set)
	// The router's choice from product 0's logits, as route_topk.
	if rk := binary.LittleEndian.Uint32(p[248:]); rk != 0 {
		E := binary.LittleEndian.Uint32(p[136:]) // rows[0]
		route := params(nil).ptr(u64(96)).ptr(u64(232)).ptr(u64(240)).u32(1).u32(int(E)).u32(int(rk))
		route = append(route, p[252:256]...) // rnorm
		f.layerKernel("route_topk", [3]uint32{1, 1, 1}, route)
	}
}

// gemvSetOnCPU computes a gemv_*_set launch's products with the CPU
// backend, from the parameter block as QGemvSet lays it out, after checking
// that the grid covers every product's row blocks and the blocks start where
// the products need them.
func (f *fakeDev) gemvSetOnCPU(k string, grid [3]uint32, p []byte) {
	u64 := func(i int) devptr { return binary.LittleEndian.Uint64(p[8*i:]) }
	u32 := func(off int) int { return int(binary.LittleEndian.Uint32(p[off:])) }
	const set = gemvSetMax
	count, cols, group, st := u32(168), u32(172), u32(176), mlxq.Float(u32(180))
	bits := 4
	if k == "gemv_q8_set" {
		bits = 8
	}
	if count < 1 || count > set {
		f.t.Fatalf("%s: %d products", k, count)
	}
	per, blocks := rowsPerTG/f.split(k, u32(184))*qRows, 0
	n := int(grid[1])
	for i := range count {
		rows, first := u32(136+4*i), u32(152+4*i)
		if first != blocks {
			f.t.Fatalf("%s: product %d starts at block %d, want %d", k, i, first, blocks)
		}
		blocks += ceilDiv(rows, per)
		sb := rows * (cols / group) * st.Size()
		m, err := mlxq.NewQuantized(rows, cols, bits, group, st, f.at(u64(i), rows*cols*bits/8), f.at(u64(set+i), sb), f.at(u64(2*set+i), sb))
		if err != nil {
			f.t.Fatal(err)
		}
		runtime.CPU{}.MatMul(m, f32s(f.at(u64(3*set+i), 4*n*rows)), f32s(f.at(u64(4*set), 4*n*cols)), n)
	}
	if int(grid[0]) != blocks {
		f.t.Fatalf("%s: grid %v for %d row blocks", k, grid, blocks)
	}
}

// gemmOnCPU computes a gemm kernel's launch with the CPU backend, from the
// parameter block alone (as the fake's gemv), so the host logic above a
// batched product is checked bit for bit.
func (f *fakeDev) gemmOnCPU(kernel string, p gemmParams) {
	var m mlxq.Matrix
	var err error
	st := mlxq.Float(p.stype)
	if p.bits == 0 {
		m, err = mlxq.NewDense(p.rows, p.cols, st, f.at(p.w, p.rows*p.cols*st.Size()))
	} else {
		sb := p.rows * (p.cols / p.group) * st.Size()
		m, err = mlxq.NewQuantized(p.rows, p.cols, p.bits, p.group, st, f.at(p.w, p.rows*p.cols*p.bits/8), f.at(p.s, sb), f.at(p.b, sb))
	}
	if err != nil {
		f.t.Fatalf("%s: %v", kernel, err)
	}
	x := make([]float32, p.n*p.cols)
	if kernel == "gemm_base" {
		mlxq.DecodeFloats(x, f.at(p.x, 2*len(x)), mlxq.BF16)
	} else {
		copy(x, f32s(f.at(p.x, 4*len(x))))
	}
	y := make([]float32, p.n*p.rows)
	runtime.CPU{}.MatMul(m, y, x, p.n)
	for v := range p.n {
		copy(f32s(f.at(p.y+uint64(4*v*p.ldy), 4*p.rows)), y[v*p.rows:(v+1)*p.rows])
	}
}

// gemmGroupOnCPU computes a gemm_group_* launch with the CPU backend, tile
// by tile, from the parameter block and the tiles in device memory (as
// QGemmGroup and QGemmTile lay them out), after checking the grid and
// each tile's positions.
func (f *fakeDev) gemmGroupOnCPU(k string, grid [3]uint32, p []byte) {
	u64 := func(b []byte, i int) devptr { return binary.LittleEndian.Uint64(b[8*i:]) }
	u32 := func(b []byte, off int) int { return int(binary.LittleEndian.Uint32(b[off:])) }
	if len(p) != sizeQGemmGroup {
		f.t.Fatalf("%s: %d parameter bytes", k, len(p))
	}
	tiles, xp, xrow, yrow := u64(p, 0), u64(p, 1), u64(p, 2), u64(p, 3)
	rows, cols, group, st, ldy := u32(p, 32), u32(p, 36), u32(p, 40), mlxq.Float(u32(p, 44)), u32(p, 48)
	bits := 4
	if k == "gemm_group_q8" {
		bits = 8
	}
	if int(grid[1]) != ceilDiv(rows, gemmBN) || grid[2] != 1 || grid[0] < 1 {
		f.t.Fatalf("%s: grid %v for %d rows", k, grid, rows)
	}
	row := func(ix devptr, v int) int {
		if ix == 0 {
			return v
		}
		return int(int32(binary.LittleEndian.Uint32(f.at(ix+uint64(4*v), 4))))
	}
	for t := range int(grid[0]) {
		tb := f.at(tiles+uint64(t*sizeQGemmTile), sizeQGemmTile)
		m0, m1 := u32(tb, 32), u32(tb, 36)
		if m1 <= m0 || m1-m0 > gemmBM {
			f.t.Fatalf("%s: tile %d holds positions %d..%d", k, t, m0, m1)
		}
		sb := rows * (cols / group) * st.Size()
		m, err := mlxq.NewQuantized(rows, cols, bits, group, st, f.at(u64(tb, 0), rows*cols*bits/8), f.at(u64(tb, 1), sb), f.at(u64(tb, 2), sb))
		if err != nil {
			f.t.Fatalf("%s: tile %d: %v", k, t, err)
		}
		n := m1 - m0
		x, y := make([]float32, n*cols), make([]float32, n*rows)
		for v := range n {
			copy(x[v*cols:(v+1)*cols], f32s(f.at(xp+uint64(4*row(xrow, m0+v)*cols), 4*cols)))
		}
		runtime.CPU{}.MatMul(m, y, x, n)
		for v := range n {
			copy(f32s(f.at(u64(tb, 3)+uint64(4*row(yrow, m0+v)*ldy), 4*rows)), y[v*rows:(v+1)*rows])
		}
	}
}

// layerKernelPtrs is the number of device addresses each whole-layer
// kernel's parameter block starts with.
var layerKernelPtrs = map[string]int{"rms_norm_rows": 3, "rope": 2, "rms_norm_rope": 3, "attention": 7, "attention_tile": 7, "attention_gqa": 7, "attention_merge": 2, "deltanet_conv": 4, "deltanet_qknorm": 1,
	"deltanet_rec": 9, "deltanet_rec_reg": 9, "deltanet_rec_cols": 9, "deltanet_out": 9, "add_rms_norm_rows": 4, "scale": 1, "softcap": 1, "glu": 3, "add": 3, "sigmoid_mul": 2, "add_gated": 3,
	"combine": 3, "gather": 3, "gather_rows": 3, "scatter_rows": 3, "scatter_rows2": 5, "route_topk": 3,
	"select_chunk": 2, "select_merge": 2, "select_list": 5, "select_top": 7}

// layerKernel emulates a whole-layer kernel: it decodes the parameter block
// as layer_kernels.go lays it out (device addresses, then 32-bit fields)
// and computes with nn.HostDevice's arithmetic (attention: nn.AttendRows), so
// the Layer's kernel path is checked for the addresses and extents it
// passes, bit for bit against the CPU. (The kernels' own arithmetic is the
// GPU tests' and internal/gpukernels' concern.)
func (f *fakeDev) layerKernel(k string, grid [3]uint32, p []byte) {
	nptr := layerKernelPtrs[k]
	if nptr == 0 {
		f.t.Fatalf("the fake has no kernel %s", k)
	}
	ptr := func(i int) devptr { return binary.LittleEndian.Uint64(p[8*i:]) }
	u := func(j int) int { return int(binary.LittleEndian.Uint32(p[8*nptr+4*j:])) }
	fl := func(j int) float32 { return math.Float32frombits(uint32(u(j))) }
	// view is n floats at device address a (nil for none).
	view := func(a devptr, n int) []float32 {
		if n <= 0 {
			return nil
		}
		return f32s(f.at(a, 4*n))
	}
	T := func(a devptr, n int) nn.Tensor { return nn.HostTensor(view(a, n)) }
	span := func(rows, stride, width int) int {
		if rows == 0 || width == 0 {
			return 0
		}
		return (rows-1)*stride + width
	}
	if f.dnOut != 0 && k != "deltanet_out" {
		f.t.Fatalf("%s launched after a deltanet_rec_cols without its deltanet_out", k)
	}
	var h nn.HostDevice
	switch k {
	case "rms_norm_rows":
		rows, width, xs, ys, eps, kind := u(0), u(1), u(2), u(3), fl(4), nn.NormKind(u(5))
		var w nn.Tensor
		if kind != nn.NormUnit {
			w = T(ptr(1), width)
		}
		h.RMSNorm(T(ptr(2), span(rows, ys, width)), T(ptr(0), span(rows, xs, width)), w,
			nn.NormSpec{Rows: rows, Width: width, XStride: xs, YStride: ys, Eps: eps, Kind: kind})
	case "add_rms_norm_rows":
		rows, width, ys, eps, kind := u(0), u(1), u(2), fl(3), nn.NormKind(u(4))
		var w nn.Tensor
		if kind != nn.NormUnit {
			w = T(ptr(2), width)
		}
		h.Add(T(ptr(0), rows*width), T(ptr(1), rows*width), rows*width)
		h.RMSNorm(T(ptr(3), span(rows, ys, width)), T(ptr(0), rows*width), w,
			nn.NormSpec{Rows: rows, Width: width, YStride: ys, Eps: eps, Kind: kind})
	case "rms_norm_rope":
		rows, width, stride, eps, kind := u(0), u(1), u(2), fl(3), nn.NormKind(u(4))
		pairs, half, perPos, pos0, inter := u(5), u(6), u(7), u(8), u(9) != 0
		var w nn.Tensor
		if kind != nn.NormUnit {
			w = T(ptr(1), width)
		}
		x := T(ptr(0), span(rows, stride, width))
		h.RMSNorm(x, x, w, nn.NormSpec{Rows: rows, Width: width, XStride: stride, YStride: stride, Eps: eps, Kind: kind})
		r := &nn.RoPE{Half: half, InvFreq: view(ptr(2), pairs), Interleaved: inter}
		hd := 2 * half // HostDevice's row extent
		if inter {
			hd = 2 * pairs
		}
		if hd > width {
			f.t.Fatalf("rms_norm_rope: pairs reach %d of rows of %d", hd, width)
		}
		h.RoPE(x, r, nn.RoPESpec{Rows: rows, PerPos: perPos, Stride: stride, Pos0: pos0})
	case "rope":
		rows, pairs, half, stride, perPos, pos0, inter := u(0), u(1), u(2), u(3), u(4), u(5), u(6) != 0
		r := &nn.RoPE{Half: half, InvFreq: view(ptr(1), pairs), Interleaved: inter}
		hd := 2 * half // HostDevice's row extent
		if inter {
			hd = 2 * pairs
		}
		h.RoPE(T(ptr(0), span(rows, stride, hd)), r, nn.RoPESpec{Rows: rows, PerPos: perPos, Stride: stride, Pos0: pos0})
	case "attention", "attention_tile", "attention_gqa":
		nt, heads, kvh, hd, vd, qs, kw, vw, pos, win, scale := u(0), u(1), u(2), u(3), u(4), u(5), u(6), u(7), u(8), u(9), fl(10)
		ns, keys := max(u(11), 1), u(12)
		if k == "attention_tile" {
			if ns != 1 || int(grid[0]) != gpukernels.AttnTileGroups(nt, heads, kvh) || !gpukernels.AttnTiled(nt, hd, vd) {
				f.t.Fatalf("attention_tile grid %v for %d tokens of %d heads (%d KV), dims %d, %d, %d runs", grid, nt, heads, kvh, hd, vd, ns)
			}
		} else if k == "attention_gqa" {
			if int(grid[0]) != nt*kvh*ns || !gpukernels.AttnGQA(nt, heads, kvh, hd, vd) {
				f.t.Fatalf("attention_gqa grid %v for %d tokens of %d heads (%d KV), dims %d, %d, %d runs", grid, nt, heads, kvh, hd, vd, ns)
			}
		} else if int(grid[0]) != nt*heads*ns {
			f.t.Fatalf("attention grid %v for %d tokens of %d heads in %d runs", grid, nt, heads, ns)
		}
		if ns > 1 && keys*ns < gpukernels.AttnKeys(pos, nt, win) {
			f.t.Fatalf("attention: %d runs of %d keys for %d positions", ns, keys, pos+nt)
		}
		// Split or not, the fake writes the whole result to o
		// (attention_merge is then a no-op): the runs' arithmetic is
		// the real kernels' concern (cpurun, the GPU tests).
		rows := pos
		if win > 0 {
			rows = min(pos, win)
		}
		d := nn.AttnDims{Heads: heads, KVHeads: kvh, HeadDim: hd, QStride: qs, VDim: vd, Scale: scale}
		nn.AttendRows(view(ptr(0), nt*heads*vd), view(ptr(1), nt*heads*qs), view(ptr(2), nt*kw), view(ptr(3), nt*vw),
			view(ptr(4), rows*kw), view(ptr(5), rows*vw), pos, nt, win, kw, vw, d)
	case "attention_merge":
		if int(grid[0]) != u(0) || u(2) < 2 {
			f.t.Fatalf("attention_merge grid %v for %d rows of %d runs", grid, u(0), u(2))
		}
	case "deltanet_conv":
		f.conv = append([]byte(nil), p...) // run with deltanet_rec
		f.qknormed = false
	case "deltanet_qknorm":
		f.qknormed = true
	case "deltanet_out":
		// deltanet_rec_cols computed y whole (the host's arithmetic);
		// this must be its norm, over the same tensors, right after it.
		if f.dnOut != ptr(1) || int(grid[0]) != u(0)*u(3) {
			f.t.Fatalf("deltanet_out (grid %v) does not follow its deltanet_rec_cols", grid)
		}
		f.dnOut = 0
	case "deltanet_rec", "deltanet_rec_reg", "deltanet_rec_cols":
		if k == "deltanet_rec_cols" {
			if int(grid[0]) != u(3)*((u(5)+31)/32) || grid[1] != 1 {
				f.t.Fatalf("deltanet_rec_cols grid %v for %d heads of %d columns", grid, u(3), u(5))
			}
			f.dnOut = ptr(1)
		}
		cp := func(i int) devptr { return binary.LittleEndian.Uint64(f.conv[8*i:]) }
		cu := func(j int) int { return int(binary.LittleEndian.Uint32(f.conv[32+4*j:])) }
		nt, C, nk, nv, dk, dv, eps := u(0), u(1), u(2), u(3), u(4), u(5), fl(6)
		// q and k normalised by deltanet_qknorm, or by deltanet_rec_cols
		// itself over one token (its qscale: dk^-1/2).
		if qs := fl(7); qs == 0 && !f.qknormed || qs != 0 && (f.qknormed || k != "deltanet_rec_cols" || nt != 1 || qs != float32(1/math.Sqrt(float64(dk)))) {
			f.t.Fatalf("%s: qscale %g over %d tokens after deltanet_qknorm %v", k, qs, nt, f.qknormed)
		}
		K := cu(2)
		if cu(0) != nt || cu(1) != C || cp(3) != ptr(2) {
			f.t.Fatalf("deltanet_rec does not follow its deltanet_conv")
		}
		a := &nn.DeltaNetArgs{T: nt, Nk: nk, Nv: nv, Dk: dk, Dv: dv, K: K, Eps: eps,
			Y: T(ptr(1), nt*nv*dv), Mixed: T(cp(1), nt*C), Z: T(ptr(3), nt*nv*dv), B: T(ptr(4), nt*nv), A: T(ptr(5), nt*nv),
			Conv: T(cp(2), C*K), NegA: T(ptr(6), nv), DtBias: T(ptr(7), nv), Norm: T(ptr(8), dv)}
		nn.DeltaNetHost(view(cp(0), (K-1)*C), view(ptr(0), nv*dk*dv), a)
	case "scale":
		h.Scale(T(ptr(0), u(0)), fl(1), u(0))
	case "softcap":
		h.Softcap(T(ptr(0), u(0)), fl(1), u(0))
	case "glu":
		act := nn.SiLUGate
		if u(1) == actGELUTanh {
			act = nn.GELUTanhGate
		}
		n := u(0)
		h.GLU(act, T(ptr(0), n), T(ptr(1), n), T(ptr(2), n), n)
	case "add":
		h.Add(T(ptr(0), u(0)), T(ptr(1), u(0)), u(0))
	case "sigmoid_mul":
		rows, width, os, gs := u(0), u(1), u(2), u(3)
		h.SigmoidMul(T(ptr(0), span(rows, os, width)), T(ptr(1), span(rows, gs, width)), rows, width, os, gs)
	case "add_gated":
		rows, width := u(0), u(1)
		h.AddGated(T(ptr(0), rows*width), T(ptr(1), rows*width), T(ptr(2), rows), rows, width)
	case "combine":
		nt, kk, width := u(0), u(1), u(2)
		h.Combine(T(ptr(0), nt*width), T(ptr(1), nt*kk*width), view(ptr(2), nt*kk), nt, kk, width)
	case "gather":
		n, rows, stride := u(0), u(1), u(2)
		ix := make([]int32, n)
		copy(ix, unsafe.Slice((*int32)(unsafe.Pointer(&f.at(ptr(2), 4*n)[0])), n))
		top := int32(0)
		for _, j := range ix {
			top = max(top, j)
		}
		h.Gather(T(ptr(0), rows*n), T(ptr(1), span(rows, stride, int(top)+1)), nn.Index{Host: ix}, rows, stride)
	case "gather_rows", "scatter_rows":
		n, width := u(0), u(1)
		ix := unsafe.Slice((*int32)(unsafe.Pointer(&f.at(ptr(2), 4*n)[0])), n)
		rows := make([]int, n)
		far := 0
		for i, r := range ix {
			rows[i] = int(r)
			far = max(far, int(r)+1)
		}
		if k == "gather_rows" {
			h.GatherRows(T(ptr(0), n*width), T(ptr(1), far*width), rows, width)
		} else {
			h.ScatterRows(T(ptr(0), far*width), T(ptr(1), n*width), rows, width)
		}
	case "scatter_rows2":
		n := u(0)
		ix := unsafe.Slice((*int32)(unsafe.Pointer(&f.at(ptr(4), 4*n)[0])), n)
		rows := make([]int, n)
		far := 0
		for i, r := range ix {
			rows[i] = int(r)
			far = max(far, int(r)+1)
		}
		for j, width := range []int{u(1), u(2)} {
			h.ScatterRows(T(ptr(2*j), far*width), T(ptr(2*j+1), n*width), rows, width)
		}
	case "route_topk":
		nt, E, kk, norm := u(0), u(1), u(2), u(3) != 0
		r := nn.NewRouting(nt, kk)
		nn.RouteSoftmaxTopK(r, append([]float32(nil), view(ptr(0), nt*E)...), nt, E, norm)
		sel := unsafe.Slice((*int32)(unsafe.Pointer(&f.at(ptr(1), 4*nt*kk)[0])), nt*kk)
		for i, e := range r.Sel {
			sel[i] = int32(e)
			for _, v := range view(ptr(0), nt*E)[i/kk*E : (i/kk+1)*E] {
				if v != v { // the kernel's contract: a NaN token gets -1
					sel[i] = -1
				}
			}
		}
		copy(view(ptr(2), nt*kk), r.Wts)
	case "select_chunk", "select_merge", "select_list", "select_top":
		f.selectKernel(k, int(grid[0]), ptr, u, view)
	}
}

// selectKernel emulates the select kernels from their contract
// (80_select.qk), in plain Go: each chunk's k largest (NaN and -Inf as
// -Inf), the k-th largest of those, each chunk's ids at least it.
func (f *fakeDev) selectKernel(k string, G int, ptr func(int) devptr, u func(int) int, view func(devptr, int) []float32) {
	desc := func(v []float32) []float32 {
		for i, x := range v {
			if !(x > float32(math.Inf(-1))) {
				v[i] = float32(math.Inf(-1))
			}
		}
		slices.SortFunc(v, func(a, b float32) int { return cmp.Compare(b, a) })
		return v
	}
	switch k {
	case "select_chunk":
		n, kk := u(0), u(1)
		x, part := view(ptr(0), n), view(ptr(1), G*kk)
		for g := range G {
			top := desc(append([]float32(nil), x[g*gpukernels.SelChunk:min(n, (g+1)*gpukernels.SelChunk)]...))
			for r := range kk {
				part[g*kk+r] = float32(math.Inf(-1))
				if r < len(top) {
					part[g*kk+r] = top[r]
				}
			}
		}
	case "select_merge":
		m, kk := u(0), u(1)
		top := desc(append([]float32(nil), view(ptr(0), m)...))
		view(ptr(1), 1)[0] = top[kk-1]
	case "select_top":
		// Each chunk's k-th largest key T_g, its ids above T_g then at T_g
		// (as far as limit), the counts, and the k-th largest of the
		// chunks' first k listed values (27_select.cu).
		n, kk, limit := u(0), u(1), u(2)
		x := view(ptr(0), n)
		i32 := func(p devptr, m int) []int32 { return unsafe.Slice((*int32)(unsafe.Pointer(&f.at(p, 4*m)[0])), m) }
		cnt, above, ids, vals := i32(ptr(2), G), i32(ptr(3), G), i32(ptr(4), G*limit), view(ptr(5), G*limit)
		var part []float32
		for g := range G {
			chunk := x[g*gpukernels.SelChunk : min(n, (g+1)*gpukernels.SelChunk)]
			keys := make([]uint32, gpukernels.SelChunk) // 0 past n
			for i, v := range chunk {
				keys[i] = selKey(v)
			}
			sorted := slices.Clone(keys)
			slices.Sort(sorted)
			T := sorted[len(sorted)-kk]
			a, e := 0, 0
			for i, key := range keys[:len(chunk)] {
				if key > T {
					ids[g*limit+a], vals[g*limit+a] = int32(g*gpukernels.SelChunk+i), chunk[i]
					a++
				}
			}
			for i, key := range keys[:len(chunk)] {
				if key == T && T != 0 {
					if a+e < limit {
						ids[g*limit+a+e], vals[g*limit+a+e] = int32(g*gpukernels.SelChunk+i), chunk[i]
					}
					e++
				}
			}
			cnt[g], above[g] = int32(a+e), int32(a)
			for r := range kk {
				v := float32(math.Inf(-1))
				if r < min(a+e, limit) {
					v = vals[g*limit+r]
				}
				part = append(part, v)
			}
		}
		th := desc(part)[kk-1]
		if th == 0 {
			th = 0 // -0 as +0, as the kernel's keys take it
		}
		view(ptr(1), 1)[0] = th
	case "select_list":
		n, limit := u(0), u(1)
		x, th := view(ptr(0), n), view(ptr(1), 1)[0]
		cnt := unsafe.Slice((*int32)(unsafe.Pointer(&f.at(ptr(2), 4*G)[0])), G)
		ids := unsafe.Slice((*int32)(unsafe.Pointer(&f.at(ptr(3), 4*G*limit)[0])), G*limit)
		vals := view(ptr(4), G*limit)
		for g := range G {
			m := 0
			for i := g * gpukernels.SelChunk; i < min(n, (g+1)*gpukernels.SelChunk); i++ {
				if x[i] >= th {
					if m < limit {
						ids[g*limit+m], vals[g*limit+m] = int32(i), x[i]
					}
					m++
				}
			}
			cnt[g] = int32(m)
		}
	}
}

func fakeBackend(t testing.TB) (*Backend, *fakeDev) {
	f := newFake(t)
	// Its Close is registered first, so it runs after the Frees of
	// inAlloc's cleanups; the fake's close fails if anything is still
	// allocated.
	return testBackend(t, f), f
}

// testBackend returns a Backend over d, closed by a cleanup registered
// now: it runs after the cleanups registered later (models loaded on it,
// weights allocated from it free their memory on an open backend first),
// and a Close that fails (a fake finds memory or events left) fails the test.
func testBackend(t testing.TB, d device) *Backend {
	t.Helper()
	b, err := newBackend(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
}

func TestFakeDeviceHostLogic(t *testing.T) {
	b, f := fakeBackend(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, c := range matCases() {
		m := makeMatrix(t, r, c)
		for _, n := range []int{1, 2} {
			x := randVec(r, n*c.cols, 1)
			want := make([]float32, n*c.rows)
			runtime.CPU{}.MatMul(m, want, x, n)
			got := make([]float32, n*c.rows)
			b.MatMul(m, got, x, n)
			sameBits(t, fmt.Sprintf("%v staged", c), got, want)

			zc := inAlloc(t, b, m)
			before := b.Stats()
			b.MatMul(zc, got, x, n)
			sameBits(t, fmt.Sprintf("%v in place", c), got, want)
			if d := b.Stats().ZeroCopyBytes - before.ZeroCopyBytes; d != m.Bytes() {
				t.Errorf("%v: %d bytes used in place, want all %d", c, d, m.Bytes())
			}
		}
	}
	// A 4-bit weight in Alloc memory off its 16-byte alignment is staged;
	// the scales and biases are still used in place.
	m := makeMatrix(t, r, matCase{16, 256, 4, 64, mlxq.BF16})
	buf, err := b.Alloc(len(m.Weight) + 1024)
	if err != nil {
		t.Fatal(err)
	}
	mis := m
	mis.Weight = buf[2 : 2+len(m.Weight)]
	copy(mis.Weight, m.Weight)
	mis.Scales = buf[512+len(m.Weight):][:len(m.Scales)]
	copy(mis.Scales, m.Scales)
	mis.Biases = m.Biases
	x := randVec(r, 256, 1)
	want, got := make([]float32, 16), make([]float32, 16)
	runtime.CPU{}.MatMul(m, want, x, 1)
	before := b.Stats()
	b.MatMul(mis, got, x, 1)
	sameBits(t, "misaligned", got, want)
	if d := b.Stats().ZeroCopyBytes - before.ZeroCopyBytes; d != int64(len(m.Scales)) {
		t.Errorf("misaligned weight: %d bytes in place, want only the %d of the scales", d, len(m.Scales))
	}
	if err := b.Free(buf); err != nil {
		t.Fatal(err)
	}

	// RMSNorm (also in place) and SwiGLU.
	xs, w := randVec(r, 3*100, 2), randVec(r, 100, 1)
	nwant := make([]float32, 300)
	runtime.CPU{}.RMSNorm(nwant, xs, w, 1e-5)
	b.RMSNorm(xs, xs, w, 1e-5)
	sameBits(t, "rms_norm in place", xs, nwant)
	g, u := randVec(r, 1000, 10), randVec(r, 1000, 1)
	swant, sgot := make([]float32, 1000), make([]float32, 1000)
	runtime.CPU{}.SwiGLU(swant, g, u)
	b.SwiGLU(sgot, g, u)
	sameBits(t, "swiglu", sgot, swant)

	// More vectors than one launch's grid takes: two launches (of the
	// generic gemv: 6 bits, which the batched kernels do not take).
	f.launches, f.grids = nil, nil
	mv := makeMatrix(t, r, matCase{3, 32, 6, 32, mlxq.F32})
	n := maxGridY + 5
	xv := randVec(r, n*32, 1)
	vgot := make([]float32, 3*n)
	b.MatMul(mv, vgot, xv, n)
	// Not bit for bit: the CPU groups vectors by four, so its round-off
	// depends on n (which two launches change).
	checkMatMul(t, "many vectors", mv, xv, vgot, n)
	if len(f.launches) != 2 || f.grids[0][1] != maxGridY || f.grids[1][1] != 5 {
		t.Errorf("launches %v grids %v", f.launches, f.grids)
	}
	if s := b.Stats(); s.Fallbacks != 0 || b.Err() != nil {
		t.Fatalf("fallbacks: %+v %v", s, b.Err())
	}
}

// A device error makes the call compute on the CPU: right results, the
// error kept, the fallback counted.
func TestFakeDeviceFallback(t *testing.T) {
	b, f := fakeBackend(t)
	f.fail = &Error{Call: "cuLaunchKernel", Code: 700, Name: "CUDA_ERROR_ILLEGAL_ADDRESS"}
	r := rand.New(rand.NewPCG(13, 14))
	m := makeMatrix(t, r, matCase{20, 128, 4, 32, mlxq.F16})
	x := randVec(r, 128, 1)
	want, got := make([]float32, 20), make([]float32, 20)
	runtime.CPU{}.MatMul(m, want, x, 1)
	b.MatMul(m, got, x, 1)
	sameBits(t, "fallback", got, want)
	g, u := randVec(r, 10, 3), randVec(r, 10, 3)
	sw, sg := make([]float32, 10), make([]float32, 10)
	runtime.CPU{}.SwiGLU(sw, g, u)
	b.SwiGLU(sg, g, u)
	sameBits(t, "fallback swiglu", sg, sw)
	var e *Error
	if !errors.As(b.Err(), &e) || e.Call != "cuLaunchKernel" {
		t.Fatalf("Err() = %v", b.Err())
	}
	if s := b.Stats(); s.Fallbacks != 2 {
		t.Fatalf("fallbacks %d, want 2", s.Fallbacks)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Alloc(10); err == nil {
		t.Fatal("Alloc after Close succeeded")
	}
}

// A Matrix whose slices do not match its shape is a caller's bug: MatMul
// panics naming it rather than reading out of bounds on the device.
func TestMatMulRejectsBadMatrix(t *testing.T) {
	b, f := fakeBackend(t)
	r := rand.New(rand.NewPCG(15, 16))
	m := makeMatrix(t, r, matCase{8, 64, 4, 32, mlxq.BF16})
	m.Scales = m.Scales[:len(m.Scales)-2]
	defer func() {
		if p := recover(); p == nil {
			t.Fatal("MatMul of a short-scaled matrix did not panic")
		} else if len(f.launches) != 0 {
			t.Fatalf("launched %v before rejecting it", f.launches)
		}
	}()
	b.MatMul(m, make([]float32, 8), make([]float32, 64), 1)
}
