package mlxq

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// Parallelism thresholds, in weight bytes touched (times the number of input
// vectors). Below parMinBytes a product runs on the calling goroutine; above
// it, rows are handed out in chunks of at least parChunkBytes.
const (
	parMinBytes   = 96 << 10
	parChunkBytes = 32 << 10
)

// useAsm selects the assembly kernels where the CPU has them; tests switch it
// off to check the portable kernels too.
var useAsm = asmAvailable

// MatVec computes y = W x: y[r] = sum_i W[r,i]*x[i], on the packed data.
// len(y) must be Rows and len(x) Cols; y must not overlap x. It is safe to
// call concurrently on the same Matrix.
func (m Matrix) MatVec(y, x []float32) {
	if len(y) != m.Rows || len(x) != m.Cols {
		panic(fmt.Sprintf("mlxq: MatVec: len(y)=%d len(x)=%d for a [%d, %d] matrix", len(y), len(x), m.Rows, m.Cols))
	}
	m.MatMul(y, x, 1)
}

// MatMul computes Y[v] = W X[v] for n input vectors: X is n*Cols values
// (row-major, one vector per row), Y is n*Rows; Y must not overlap X. Each
// weight row is read once for all n vectors.
func (m Matrix) MatMul(Y, X []float32, n int) {
	if n < 1 || len(X) != n*m.Cols || len(Y) != n*m.Rows {
		panic(fmt.Sprintf("mlxq: MatMul: len(Y)=%d len(X)=%d n=%d for a [%d, %d] matrix", len(Y), len(X), n, m.Rows, m.Cols))
	}
	k := m.kernel()
	p := getPlan()
	defer putPlan(p)
	p.prepare(m, k, X, n)
	rb := m.RowBytes()
	parallelRows(m.Rows, rb*n+2*m.Groups()*n, func(r0, r1 int) {
		var sb []float32
		if k == kQ4Go || k == kQ8Go || k == kQGo {
			sb = make([]float32, 2*m.Groups())
		}
		m.rows(k, p, Y, r0, r1, sb)
	})
}

// kernelKind names the per-row dot product implementation.
type kernelKind int

const (
	kQAsm     kernelKind = iota // 4 or 8 bits, assembly
	kQ4Go                       // 4 bits, portable
	kQ8Go                       // 8 bits, portable
	kQGo                        // 2, 3, 5, 6 bits, portable
	kQAnyAsm                    // 2, 3, 5, 6 bits, assembly
	kDenseAsm                   // F32, F16, BF16, assembly
	kDenseGo                    // F32, F16, BF16, portable
)

func (m Matrix) kernel() kernelKind {
	switch m.Bits {
	case 0:
		if useAsm {
			return kDenseAsm
		}
		return kDenseGo
	case 4:
		if useAsm {
			return kQAsm
		}
		return kQ4Go
	case 8:
		if useAsm {
			return kQAsm
		}
		return kQ8Go
	}
	if useAsm && asmAnyBits {
		return kQAnyAsm
	}
	return kQGo
}

// plan holds the per-call preprocessed inputs.
type plan struct {
	n    int
	x    []float32 // n*Cols, in the layout the kernel wants (buf or the caller's X)
	buf  []float32 // owned storage for a re-ordered x
	xsum []float32 // n*Groups: sum of x over each group
}

var planPool = sync.Pool{New: func() any { return new(plan) }}

func getPlan() *plan  { return planPool.Get().(*plan) }
func putPlan(p *plan) { p.x = nil; planPool.Put(p) }

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func (p *plan) prepare(m Matrix, k kernelKind, X []float32, n int) {
	p.n = n
	p.x = X
	if m.Bits == 0 {
		return
	}
	ng := m.Groups()
	g := m.GroupSize
	p.xsum = grow(p.xsum, n*ng)
	if k == kQAsm && m.Bits == 4 {
		p.buf = grow(p.buf, len(X))
		p.x = p.buf
	}
	// Per group: sum x (float32, eight independent accumulators) and, for the
	// 4-bit assembly kernel, copy x re-arranged as that kernel wants it (see
	// permuteQ4 in the kernels_GOARCH.go files).
	perm := k == kQAsm && m.Bits == 4
	for gi := 0; gi < n*ng; gi++ {
		xg := X[gi*g : (gi+1)*g]
		p.xsum[gi] = groupSum(xg)
		if perm {
			permuteQ4(p.buf[gi*g:(gi+1)*g], xg)
		}
	}
}

// groupSum returns the sum of x (len a multiple of 16) in float32, in eight
// independent accumulators: accumulator t adds x[16j+2t] + x[16j+2t+1].
func groupSum(x []float32) float32 {
	var a0, a1, a2, a3, a4, a5, a6, a7 float32
	for len(x) >= 16 {
		s := (*[16]float32)(x)
		a0 += s[0] + s[1]
		a1 += s[2] + s[3]
		a2 += s[4] + s[5]
		a3 += s[6] + s[7]
		a4 += s[8] + s[9]
		a5 += s[10] + s[11]
		a6 += s[12] + s[13]
		a7 += s[14] + s[15]
		x = x[16:]
	}
	return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
}

// rows computes rows [r0, r1) of Y for every vector. sb is scratch for 2*Groups
// decoded scales and biases, nil unless a portable quantized kernel runs.
func (m Matrix) rows(k kernelKind, p *plan, Y []float32, r0, r1 int, sb []float32) {
	rb := m.RowBytes()
	cols := m.Cols
	ng := m.Groups()
	n := p.n
	sbytes := ng * m.Type.Size() // scale (and bias) bytes per row
	var s, b []float32
	if sb != nil {
		s, b = sb[:ng], sb[ng:2*ng]
	}
	var out [4]float32
	var pad []byte // padded copy of the last row, for kQAnyAsm
	for r := r0; r < r1; r++ {
		row := m.Weight[r*rb : (r+1)*rb]
		var rs, rbias []byte
		if m.Bits > 0 {
			rs = m.Scales[r*sbytes : (r+1)*sbytes]
			rbias = m.Biases[r*sbytes : (r+1)*sbytes]
			if s != nil {
				DecodeFloats(s, rs, m.Type)
				DecodeFloats(b, rbias, m.Type)
			}
		}
		v := 0
		// Four vectors at a time where the assembly has a kernel for it:
		// the row is decoded once for all four.
		for ; v+4 <= n && (k == kQAsm || k == kDenseAsm); v += 4 {
			x := p.x[v*cols : (v+4)*cols]
			if k == kQAsm {
				qDot4Asm(m.Bits, row, x, cols, rs, rbias, m.Type, p.xsum[v*ng:(v+4)*ng], m.GroupSize, &out)
			} else {
				denseDot4Asm(m.Type, row, x, cols, &out)
			}
			for j, y := range out {
				Y[(v+j)*m.Rows+r] = y
			}
		}
		for ; v < n; v++ {
			x := p.x[v*cols : (v+1)*cols]
			var y float32
			switch k {
			case kQAsm:
				y = qDotAsm(m.Bits, row, x, rs, rbias, m.Type, p.xsum[v*ng:(v+1)*ng], m.GroupSize)
			case kQ4Go:
				y = q4DotGo(row, x, s, b, p.xsum[v*ng:(v+1)*ng], m.GroupSize)
			case kQ8Go:
				y = q8DotGo(row, x, s, b, p.xsum[v*ng:(v+1)*ng], m.GroupSize)
			case kQGo:
				y = qDotGo(m.Weight[r*rb:], x, s, b, p.xsum[v*ng:(v+1)*ng], m.GroupSize, m.Bits)
			case kQAnyAsm:
				var ok bool
				y, ok = qAnyAsm(m.Bits, m.Weight[r*rb:], x, rs, rbias, m.Type, p.xsum[v*ng:(v+1)*ng], m.GroupSize)
				if !ok {
					// The last row: give the kernel a padded copy to over-read.
					if pad == nil {
						pad = make([]byte, rb+8)
						copy(pad, row)
					}
					y, _ = qAnyAsm(m.Bits, pad, x, rs, rbias, m.Type, p.xsum[v*ng:(v+1)*ng], m.GroupSize)
				}
			case kDenseAsm:
				y = denseDotAsm(m.Type, row, x)
			case kDenseGo:
				y = denseDotGo(m.Type, row, x)
			}
			Y[v*m.Rows+r] = y
		}
	}
}

// parallelRows runs fn over [0, rows) in chunks, spread over GOMAXPROCS
// goroutines when the work (rowCost bytes per row) is large enough.
func parallelRows(rows, rowCost int, fn func(r0, r1 int)) {
	total := int64(rows) * int64(rowCost)
	nw := runtime.GOMAXPROCS(0)
	if nw < 2 || total < parMinBytes || rows < 2 {
		fn(0, rows)
		return
	}
	// About four chunks per worker evens out uneven progress, but no chunk
	// smaller than parChunkBytes.
	chunkRows := int(total / int64(4*nw) / int64(max(rowCost, 1)))
	if minRows := parChunkBytes / max(rowCost, 1); chunkRows < minRows {
		chunkRows = minRows
	}
	chunkRows = max(chunkRows, 1)
	nChunks := (rows + chunkRows - 1) / chunkRows
	nw = min(nw, nChunks)
	if nw < 2 {
		fn(0, rows)
		return
	}
	var next atomic.Int64
	work := func() {
		for {
			c := int(next.Add(1) - 1)
			r0 := c * chunkRows
			if r0 >= rows {
				return
			}
			fn(r0, min(r0+chunkRows, rows))
		}
	}
	var wg sync.WaitGroup
	wg.Add(nw - 1)
	for i := 1; i < nw; i++ {
		go func() { defer wg.Done(); work() }()
	}
	work()
	wg.Wait()
}
