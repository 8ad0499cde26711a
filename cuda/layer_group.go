package cuda

import (
	"fmt"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// Grouped experts (nn.ExpertGrouper): a chunk's routed experts as three
// launches whatever their number. The chunk's (token, expert) slots,
// grouped by expert (MoE.Run's order), are the positions of one batched
// product per matrix kind: gemm_group_* (kernels/25_gemm.cu) computes
// tiles of up to gemmBM positions of one expert each, gathering a
// position's token row of X (xrow) for the gate and up products, into
// G and U [positions][I]; glu makes G = act(G)·U; the down products read G
// by position and write each position's row into its slot's row of Res
// (yrow). A prefill chunk of 4,096 tokens thus runs its ~256 experts'
// products as three launches of thousands of groups instead of ~1,500
// launches of a few groups each.
//
// Each output is the tensor-core kernel's arithmetic on the same rows (the
// bits of gemm_q4/gemm_q8 for that expert and token): tf32 inputs, within
// the batched products' bound (9.8e-4 x sum|w x| worst case, gemm.go).

// groupMinTokens is the shortest chunk whose experts run grouped: shorter
// ones (decode, the device-routed layers up to routedMaxTokens, short
// prompts) keep the per-expert products, the matvec where an expert has
// few tokens, as MatMul chooses.
const groupMinTokens = gemmMinVectors

// Sizes of QGemmGroup and QGemmTile (kernels/25_gemm.cu).
const (
	sizeQGemmGroup = 56
	sizeQGemmTile  = 40
)

// GroupsExperts implements nn.ExpertGrouper.
func (l *Layer) GroupsExperts(T, K int) bool {
	ok := l.lock()
	defer l.unlock()
	return ok && l.kernels && T >= groupMinTokens && K >= 1
}

// groupKernel names the grouped product for experts of these shapes, or
// why there is none.
func groupKernel(gate, up, down mlxq.Matrix, H int) (string, error) {
	if _, err := moeKernels(gate, up, down); err != nil {
		return "", err
	}
	if gate.Cols != H || gate.Cols%gemmBK != 0 || gate.Rows%gemmBK != 0 {
		return "", fmt.Errorf("experts of %d x %d for a hidden size %d (multiples of %d needed)", gate.Rows, gate.Cols, H, gemmBK)
	}
	switch gate.Bits {
	case 4:
		return "gemm_group_q4", nil
	case 8:
		return "gemm_group_q8", nil
	}
	return "", fmt.Errorf("%d-bit experts", gate.Bits)
}

// GroupExperts implements nn.ExpertGrouper.
func (l *Layer) GroupExperts(g nn.ExpertGroup) bool {
	P := g.T * g.K
	n := len(g.Mats)
	if n == 0 || g.T < 1 || g.K < 1 || len(g.First) != n+1 || len(g.Slots) != P || g.First[0] != 0 || g.First[n] != P {
		return false
	}
	gate, down := g.Mats[0].Gate.W, g.Mats[0].Down.W
	kernel, err := groupKernel(gate, g.Mats[0].Up.W, down, g.H)
	if err != nil {
		return false
	}
	I, H := gate.Rows, gate.Cols
	if checkExt(kernel, int64(P)*int64(I), int64(P)*int64(H)) != nil {
		return false
	}
	mats := make([][3]*devMat, n)
	for i, m := range g.Mats {
		if g.First[i+1] < g.First[i] || !sameShape(m.Gate.W, gate) || !sameShape(m.Up.W, gate) || !sameShape(m.Down.W, down) {
			return false
		}
		for j, mm := range [3]nn.Mat{m.Gate, m.Up, m.Down} {
			d, ok := mm.Dev.(*devMat)
			if !ok || d.w%16 != 0 {
				return false // not a device copy, or not where the 16-byte loads need it
			}
			mats[i][j] = d
		}
	}
	xrow, yrow := make([]int32, P), make([]int32, P)
	seen := make([]bool, P)
	for i, s := range g.Slots {
		if s < 0 || s >= P || seen[s] {
			panic(fmt.Sprintf("cuda: GroupExperts: slot %d at position %d of %d", s, i, P))
		}
		seen[s] = true
		xrow[i], yrow[i] = int32(s/g.K), int32(s)
	}
	ok := l.lock()
	defer l.unlock()
	xp, rp := addr(g.X, g.T*H), addr(g.Res, P*H)
	if !ok || !l.kernels {
		return false
	}
	if err := l.groupExperts(kernel, g, mats, xrow, yrow, xp, rp); err != nil {
		l.fail("GroupExperts", err)
	}
	l.b.stats.GroupedLayers++
	return true
}

// groupExperts queues the three launches (lock held).
func (l *Layer) groupExperts(kernel string, g nn.ExpertGroup, mats [][3]*devMat, xrow, yrow []int32, xp, rp devptr) error {
	gate := g.Mats[0].Gate.W
	I, H, P := gate.Rows, gate.Cols, len(xrow)
	if xp%16 != 0 { // the 16-byte loads of x
		x, err := l.scratch(4 * int64(g.T*H))
		if err != nil {
			return err
		}
		if err := l.b.dev.dtod(x, xp, 4*g.T*H); err != nil {
			return err
		}
		xp = x
	}
	G, err := l.scratch(4 * int64(P*I))
	if err != nil {
		return err
	}
	U, err := l.scratch(4 * int64(P*I))
	if err != nil {
		return err
	}
	// The tiles: gate and up of each expert's position blocks (into G and
	// U), and its down (into Res).
	var gu, dn params
	tile := func(p params, d *devMat, y devptr, m0, m1 int) params {
		return p.ptr(d.w).ptr(d.s).ptr(d.b).ptr(y).u32(m0).u32(m1)
	}
	for i, m := range mats {
		for m0 := g.First[i]; m0 < g.First[i+1]; m0 += gemmBM {
			m1 := min(m0+gemmBM, g.First[i+1])
			gu = tile(tile(gu, m[0], G, m0, m1), m[1], U, m0, m1)
			dn = tile(dn, m[2], rp, m0, m1)
		}
	}
	up := func(b []byte) (devptr, error) {
		p, err := l.scratch(int64(len(b)))
		if err != nil {
			return 0, err
		}
		return p, l.upload(p, b, false)
	}
	tgu, err := up(gu)
	if err != nil {
		return err
	}
	tdn, err := up(dn)
	if err != nil {
		return err
	}
	xr, err := up(i32b(xrow))
	if err != nil {
		return err
	}
	yr, err := up(i32b(yrow))
	if err != nil {
		return err
	}
	q, st := gate.GroupSize, int(gate.Type)
	p := params(make([]byte, 0, sizeQGemmGroup)).ptr(tgu).ptr(xp).ptr(xr).ptr(0).
		u32(I).u32(H).u32(q).u32(st).u32(I).u32(0)
	if err := l.b.launch(kernel, [3]int{len(gu) / sizeQGemmTile, ceilDiv(I, gemmBN), 1}, tgThreads, p, sizeQGemmGroup); err != nil {
		return err
	}
	if err := l.b.kGLU(g.Act, G, G, U, P*I); err != nil {
		return err
	}
	p = params(make([]byte, 0, sizeQGemmGroup)).ptr(tdn).ptr(G).ptr(0).ptr(yr).
		u32(H).u32(I).u32(q).u32(st).u32(H).u32(0)
	return l.b.launch(kernel, [3]int{len(dn) / sizeQGemmTile, ceilDiv(H, gemmBN), 1}, tgThreads, p, sizeQGemmGroup)
}
