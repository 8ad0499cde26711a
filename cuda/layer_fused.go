package cuda

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// The fused ops of nn/fused.go on the Layer: at decode a layer's products
// and norms are a few microseconds of launch each for less than one of
// work (bench/gpu's kernel profile), so fewer launches is what a decode
// step gains from.

var (
	_ nn.ResidualNormer = (*Layer)(nil)
	_ nn.SharedMatMuler = (*Layer)(nil)
)

// sizeAddNormRows is the size of AddNormRows (internal/gpukernels/10_norm.qk).
const sizeAddNormRows = 56

// gemvSetMax is QP_GSET: products per gemv_*_set launch.
const gemvSetMax = 4

// AddRMSNorm implements nn.ResidualNormer with add_rms_norm_rows: the add
// and the norm in one launch, their bits those of Add then RMSNorm.
func (l *Layer) AddRMSNorm(x, r, y, w nn.Tensor, s nn.NormSpec) {
	if s.XStride != 0 && s.XStride != s.Width {
		panic(fmt.Sprintf("cuda: AddRMSNorm: x stride %d, want its rows contiguous (width %d)", s.XStride, s.Width))
	}
	if l.deferNorm(x, r, y, w, s) {
		return // queued by the next op: fused into its products, or alone (layer_normfuse.go)
	}
	if !l.addRMSNorm(x, r, y, w, s) {
		l.Add(x, r, s.Rows*s.Width)
		l.RMSNorm(y, x, w, s)
	}
}

// addRMSNorm queues the fused kernel and reports whether the op is done
// (queued, or skipped after an earlier error); false: the kernels are off
// or refused the shape, and the plain ops run.
func (l *Layer) addRMSNorm(x, r, y, w nn.Tensor, s nn.NormSpec) bool {
	ok := l.lock()
	defer l.unlock()
	if !ok {
		return true // the error is kept; the ops would be skipped
	}
	if !l.kernels {
		return false
	}
	n := s.Rows * s.Width
	ys := s.YStride
	if ys == 0 {
		ys = s.Width
	}
	xp, rp, yp := addr(x, n), addr(r, n), addr(y, int(span(s.Rows, ys, s.Width)))
	var wp devptr
	if s.Kind != nn.NormUnit {
		wp = addr(w, s.Width)
	}
	return l.kernel("AddRMSNorm", l.b.kAddRMSNorm(xp, rp, yp, wp, s))
}

// kAddRMSNorm queues add_rms_norm_rows: x += r over s.Rows contiguous rows
// of s.Width, then y (rows at s.YStride, 0: Width) = the norm of the sum.
func (b *Backend) kAddRMSNorm(x, r, y, w devptr, s nn.NormSpec) error {
	ys := s.YStride
	if ys == 0 {
		ys = s.Width
	}
	if s.Rows == 0 {
		return nil
	}
	if s.Width < 1 || ys < s.Width || s.Kind < nn.NormWeight || s.Kind > nn.NormUnit {
		return fmt.Errorf("cuda: kernel add_rms_norm_rows: width %d, y stride %d, kind %d", s.Width, ys, s.Kind)
	}
	if err := checkExt("add_rms_norm_rows", int64(s.Rows), int64(ys), int64(s.Rows)*int64(s.Width), span(s.Rows, ys, s.Width)); err != nil {
		return err
	}
	p := params(make([]byte, 0, sizeAddNormRows)).ptr(x).ptr(r).ptr(w).ptr(y).
		u32(s.Rows).u32(s.Width).u32(ys).f32(s.Eps).u32(int(s.Kind)).u32(0)
	return b.launch("add_rms_norm_rows", [3]int{s.Rows, 1, 1}, tgThreads, p, sizeAddNormRows)
}

// MatMuls implements nn.SharedMatMuler: products of the same width and
// 4- or 8-bit format that the gemv kernels would compute (not a batched
// gemm) go up to four to a gemv_*_set launch; the others are MatMul's.
func (l *Layer) MatMuls(x nn.Tensor, n int, ps []nn.Product) {
	if n <= 0 || len(ps) == 0 {
		return
	}
	if l.pfWant != nil {
		l.learnNext(ps[0].W)
	}
	rest := ps
	if n <= maxGridY {
		var restBuf [matMulBatch]nn.Product
		rest = l.matMulSets(x, n, ps, restBuf[:0])
	}
	for _, p := range rest {
		l.MatMul(p.W, p.Y, x, n)
	}
}

// setKey is what products must share to go into one gemv_*_set launch.
type setKey struct {
	kernel             string
	cols, group, stype int
}

// setKernel is the gemv_*_set kernel of a gemv kernel (gemv_q4 or
// gemv_q8), a constant: a decode step asks for it for every product.
func setKernel(gemv string) string {
	switch gemv {
	case "gemv_q4":
		return "gemv_q4_set"
	case "gemv_q8":
		return "gemv_q8_set"
	}
	return gemv + "_set"
}

// matMulBatch is how many products matMulSets groups without allocating
// (a graph asks for a handful at a time).
const matMulBatch = 8

// matMulSets queues the products of ps that share a launch with another
// and appends the rest to rest, for MatMul. (A graph asks for a handful of
// products at a time: the grouping is a scan, not a map.)
func (l *Layer) matMulSets(x nn.Tensor, n int, ps []nn.Product, rest []nn.Product) []nn.Product {
	var keysBuf [matMulBatch]setKey
	var doneBuf [matMulBatch]bool
	var membersBuf [matMulBatch]int
	keys := keysBuf[:0] // "" kernel: not for a set
	for _, p := range ps {
		var k setKey
		d, ok := p.W.Dev.(*devMat)
		m := p.W.W
		if ok && (d.kernel == "gemv_q4" || d.kernel == "gemv_q8") && !useGemm(m, n) {
			k = setKey{setKernel(d.kernel), m.Cols, m.GroupSize, int(m.Type)}
		}
		keys = append(keys, k)
	}
	ok := l.lockKeep() // a pending norm may fuse into the first launch (launchSet)
	defer l.unlock()
	if !ok {
		return rest // the error is kept; MatMul would skip them too
	}
	done := doneBuf[:0]
	for range ps {
		done = append(done, false)
	}
	for i, k := range keys {
		if done[i] {
			continue
		}
		// ps[i] and the later products of its key, at most gemvSetMax
		// to a launch; a lone one (or x not 16-byte aligned: MatMul
		// copies it first) goes to MatMul.
		var set gemvSet
		members := membersBuf[:0]
		for j := i; j < len(ps); j++ {
			if done[j] || keys[j] != k {
				continue
			}
			done[j] = true
			members = append(members, j)
		}
		var xp devptr
		if k.kernel != "" {
			xp = addr(x, n*k.cols)
		}
		if k.kernel == "" || len(members) == 1 || xp%16 != 0 {
			for _, j := range members {
				rest = append(rest, ps[j])
			}
			continue
		}
		for c := 0; c < len(members); c += gemvSetMax {
			part := members[c:min(c+gemvSetMax, len(members))]
			if len(part) == 1 {
				rest = append(rest, ps[part[0]])
				continue
			}
			set.reset()
			for _, j := range part {
				p := ps[j]
				set.add(p.W.Dev.(*devMat), addr(p.Y, n*p.W.W.Rows), p.W.W)
			}
			if err := l.launchSet(k, set, xp, n); err != nil {
				l.fail("MatMuls", err)
				return rest[:0]
			}
		}
	}
	return rest
}

// gemvSet is one gemv_*_set launch's products: QGemvSet's arrays, the
// entries past n zero.
type gemvSet struct {
	w, s, b, y [gemvSetMax]devptr
	rows       [gemvSetMax]int
	n          int
}

func (s *gemvSet) reset() { *s = gemvSet{} }

func (s *gemvSet) add(d *devMat, y devptr, m mlxq.Matrix) {
	i := s.n
	s.w[i], s.s[i], s.b[i], s.y[i], s.rows[i] = d.w, d.s, d.b, y, m.Rows
	s.n++
}

// gemvSet queues one gemv_*_set launch of up to gemvSetMax products of x
// (n vectors, n ≤ maxGridY).
func (b *Backend) gemvSet(k setKey, s gemvSet, xp devptr, n int) error {
	p, blocks, err := b.gemvSetBlock(make(params, 0, sizeQGemvSet), k, s, xp, n)
	if err != nil {
		return err
	}
	return b.launch(k.kernel, [3]int{blocks, n, 1}, tgThreads, p, sizeQGemvSet)
}

// gemvSetBlock is a gemv_*_set launch's parameter block (QGemvSet) and
// the row blocks of its grid, appended to dst (empty).
func (b *Backend) gemvSetBlock(dst params, k setKey, s gemvSet, xp devptr, n int) (params, int, error) {
	if s.n < 1 || s.n > gemvSetMax || n < 1 || n > maxGridY {
		return nil, 0, fmt.Errorf("cuda: kernel %s: %d products of %d vectors", k.kernel, s.n, n)
	}
	total := 0
	for _, r := range s.rows {
		total += r
	}
	bits := 4
	if k.kernel == "gemv_q8_set" {
		bits = 8
	}
	split := b.gemvSplit(total, k.cols, bits, n)
	per := rowsPerTG / split * qRows // rows per group of threads
	p := dst[:0]
	for _, a := range [][gemvSetMax]devptr{s.w, s.s, s.b, s.y} {
		for _, v := range a {
			p = p.ptr(v)
		}
	}
	p = p.ptr(xp)
	for _, r := range s.rows {
		p = p.u32(r)
	}
	blocks := 0 // first row block of each product (the unused ones: the total)
	for _, r := range s.rows {
		p = p.u32(blocks)
		blocks += ceilDiv(r, per)
	}
	p = p.u32(s.n).u32(k.cols).u32(k.group).u32(k.stype).u32(split).u32(0)
	return p, blocks, nil
}
