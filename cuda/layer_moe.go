package cuda

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// Routing on the device (nn.ExpertRouter): when the device expert cache
// holds every expert of a layer, the layer's routed experts run as three
// kernels and no wait: route_topk writes the choice into the arena,
// moe_gateup_* and moe_down_* (kernels/22_moe.cu) read it and find each
// chosen expert's matrices through the layer's expert table, a device
// array of the cached slots' addresses.
//
// A table is built from the cache's slots and stays valid while the cache
// does not change: the cache counts its changes (version), and a table
// built at another version is rebuilt (uploaded again on the compute
// stream, so work queued earlier still reads the old contents first). The
// slots a table names are safe to read for the queued work: a slot given
// to another expert is written on the copy stream only after it waited for
// the compute stream (layer_expert.go), and spare slots are freed only with
// both streams idle.
//
// A token whose router logits hold a NaN chooses no expert; the kernels
// then store layer+1 into the fault word, which EndPass reads back: the
// pass returns an error instead of its logits.

// routedMaxTokens is the most tokens a chunk may have for routing on the
// device: each (token, expert) pair reads its expert's weights on its own,
// where MoE.Run reads each chosen expert once for all its tokens (the
// batched products), which wins for longer chunks.
const routedMaxTokens = 8

// sizeMoE is the size of MoEParams (kernels/22_moe.cu).
const sizeMoE = 120

// tableKey names a layer of a model's experts.
type tableKey struct {
	src   any
	layer int
}

// expertTable is a layer's table of expert slots on the device.
type expertTable struct {
	p       devptr // [E][9] uint64
	cap     int    // experts it has room for
	version int64  // the expert cache's version it was built at; -1: none
	shape   [3]mlxq.Matrix
	kernels [2]string // gate/up and down kernel
	uses    int
	// slots are the experts' cache slots, valid while version is the
	// cache's (a change of the set of slots rebuilds the table).
	slots []*expertSlot
	pfSet bool // its tail holds the ranges learned (layer_pfnext.go)
}

// touchEvery is how often (uses of a table) each of its slots is marked
// used in the cache's LRU order, so that an expert cache shared with
// streamed layers keeps the routed layers' experts: often enough for the
// LRU order to see them, rarely enough that decode does not walk E slots
// per layer and token. Each use touches the next E/touchEvery slots in
// turn: walking all E every 16th use made every layer walk its 256 slots
// on the same step (their tables are used once a step each), a spike of
// hundreds of microseconds that the GPU waited for.
const touchEvery = 16

// completeFraction: MissingExperts offers a layer's missing experts when
// at most 1/completeFraction of them (at least one) are missing.
const completeFraction = 8

// moeKernels returns the gate/up and down kernels for experts of these
// shapes, or why there are none.
func moeKernels(gate, up, down mlxq.Matrix) ([2]string, error) {
	if !sameShape(gate, up) || down.Rows != gate.Cols || down.Cols != gate.Rows ||
		down.Bits != gate.Bits || down.GroupSize != gate.GroupSize || down.Type != gate.Type {
		return [2]string{}, fmt.Errorf("gate %dx%d, up %dx%d, down %dx%d of unlike quantization", gate.Rows, gate.Cols, up.Rows, up.Cols, down.Rows, down.Cols)
	}
	switch gate.Bits {
	case 4:
		return [2]string{"moe_gateup_q4", "moe_down_q4"}, nil
	case 8:
		return [2]string{"moe_gateup_q8", "moe_down_q8"}, nil
	case 2, 3, 5, 6:
		return [2]string{"moe_gateup_qn", "moe_down_qn"}, nil
	case 0:
		return [2]string{"moe_gateup_dense", "moe_down_dense"}, nil
	}
	return [2]string{}, fmt.Errorf("%d-bit experts", gate.Bits)
}

// RouteExperts implements nn.ExpertRouter.
func (l *Layer) RouteExperts(s nn.RoutedSpec) bool {
	if s.T <= 0 || s.T > routedMaxTokens || s.K < 1 || s.K > min(s.E, routeMaxK) || s.E > routeMaxE {
		return false
	}
	if s.Scale != nil && (len(s.Scale) < s.E || s.ScaleDev.N < s.E) {
		return false
	}
	ok := l.lockKeep() // the router's launch may be pending: it may make the choice (routeFused)
	defer l.unlock()
	if !ok || !l.kernels {
		return false
	}
	tab, ok := l.expertTable(s.Src, s.Layer, s.E)
	if !ok {
		return false
	}
	T, k, E, H := s.T, s.K, s.E, s.H
	gate, down := tab.shape[0], tab.shape[2]
	if gate.Cols != H {
		return false
	}
	I := gate.Rows
	var shared *sharedExpert
	if s.Shared != nil {
		if shared, ok = l.sharedExpert(*s.Shared, H); !ok || s.SharedGate.N < T {
			return false
		}
	}
	// The shared expert as every token's slot k of the same two launches,
	// where it can be.
	slots := k
	if shared != nil && l.b.sharedSlot(tab, shared, T, k) {
		slots = k + 1
	}
	// Past here the work is queued (or the device error kept): true.
	lp, xp, op := addr(s.Logits, T*E), addr(s.X, T*H), addr(s.Out, T*H)
	fused := l.routeFused(lp, T, E, k) && xp%16 == 0
	if !fused {
		l.flushPending()
	}
	var sp devptr
	if s.Scale != nil {
		sp = addr(s.ScaleDev, E)
	}
	fault, err := l.faultWord()
	if err == nil && shared != nil && slots == k {
		err = l.moeConsts()
	}
	if err != nil {
		l.fail("RouteExperts", err)
		return true
	}
	sel, err := l.scratch(4 * int64(T*k))
	var wts, h devptr
	if err == nil {
		wts, err = l.scratch(4 * int64(T*k))
	}
	if err == nil {
		h, err = l.scratch(4 * int64(T*slots*I)) // 256-byte aligned: the 16-byte loads of x
	}
	if err == nil && xp%16 != 0 {
		var x devptr
		if x, err = l.scratch(4 * int64(T*H)); err == nil {
			err = l.b.dev.dtod(x, xp, 4*T*H)
			xp = x
		}
	}
	if err != nil {
		l.fail("RouteExperts", err)
		return true
	}
	if fused {
		ps := l.pset
		l.pset = pendingSet{}
		err = l.b.gemvSetNorm(ps.k, ps.s, ps.norm, ps.done, routeArgs{sel: sel, wts: wts, k: k, norm: s.Norm})
	} else {
		err = l.b.kRouteTopK(sel, wts, lp, T, E, k, s.Norm)
	}
	if err != nil {
		l.fail("RouteExperts", err)
		return true
	}
	mp := moeParams{table: tab.p, sel: sel, wts: wts, fault: fault, k: k, E: E, layer: s.Layer}
	if slots > k {
		mp.shared, mp.gate = shared.table, addr(s.SharedGate, T)
		shared = nil // no launches of its own
	}
	up := mp
	up.x, up.y, up.m, up.act, up.gate = xp, h, gate, int(s.Act), 0
	dn := mp
	dn.x, dn.y, dn.m, dn.scale = h, op, down, sp
	l.prefetchNext(tab, T, &up, &dn)
	if err := l.b.kMoE(tab.kernels[0], up, T*slots); err != nil {
		l.fail("RouteExperts", err)
		return true
	}
	if err := l.b.kMoE(tab.kernels[1], dn, T); err != nil {
		l.fail("RouteExperts", err)
		return true
	}
	if shared != nil {
		// The shared expert: a table of one, every token's slot 0 of
		// weight 1, gated into Out.
		Is := shared.gate.Rows
		h2, err := l.scratch(4 * int64(T*Is))
		if err != nil {
			l.fail("RouteExperts", err)
			return true
		}
		sp := moeParams{table: shared.table, sel: l.consts, wts: l.consts + 4*routeMaxK, fault: fault, k: 1, E: 1, layer: s.Layer}
		up := sp
		up.x, up.y, up.m, up.act = xp, h2, shared.gate, int(s.Act)
		dn := sp
		dn.x, dn.y, dn.m, dn.gate = h2, op, shared.down, addr(s.SharedGate, T)
		if err := l.b.kMoE(shared.kernels[0], up, T); err != nil {
			l.fail("RouteExperts", err)
			return true
		}
		if err := l.b.kMoE(shared.kernels[1], dn, T); err != nil {
			l.fail("RouteExperts", err)
			return true
		}
	}
	l.faultArmed = true
	l.b.stats.RoutedLayers++
	return true
}

// expertTable returns the valid table of src's layer, building it when
// the cache holds all E of its experts with shapes the kernels take; lock
// held.
func (l *Layer) expertTable(src nn.ExpertSource, layer, E int) (*expertTable, bool) {
	key0, cacheable := keyOf(src, layer, 0)
	if !cacheable {
		return nil, false
	}
	c := &l.experts
	tk := tableKey{src: key0.src, layer: layer}
	if c.perLayer[tk] < E {
		return nil, false
	}
	tab := l.tables[tk]
	if tab != nil && tab.version == c.version && tab.cap >= E {
		m := len(tab.slots)
		n := (m + touchEvery - 1) / touchEvery
		for i := range n {
			c.touch(tab.slots[(tab.uses*n+i)%m])
		}
		tab.uses = (tab.uses + 1) % touchEvery
		return tab, true
	}
	// Build: every expert present, all of one shape the kernels take;
	// then a tail of three ranges to prefetch, zero until learned
	// (layer_pfnext.go).
	words := make([]byte, 8*9*E+pfTailBytes)
	slots := make([]*expertSlot, E)
	var shape [3]mlxq.Matrix
	var kernels [2]string
	for e := range E {
		slot, ok := c.slots[expertKey{src: key0.src, layer: layer, expert: e}]
		if !ok {
			return nil, false
		}
		slots[e] = slot
		ms := [3]nn.Mat{slot.mats.Gate, slot.mats.Up, slot.mats.Down}
		if e == 0 {
			ks, err := moeKernels(ms[0].W, ms[1].W, ms[2].W)
			if err != nil {
				if !l.refused["RouteExperts"] {
					l.refused["RouteExperts"] = true
					slog.Info("cuda: the layer's experts are routed on the host (no device kernel for them)", "layer", layer, "why", err)
				}
				return nil, false
			}
			kernels = ks
			for i, m := range ms {
				shape[i] = m.W
			}
		}
		for i, m := range ms {
			d, ok := m.Dev.(*devMat)
			if !ok || !sameShape(m.W, shape[i]) {
				return nil, false
			}
			for j, p := range []devptr{d.w, d.s, d.b} {
				binary.LittleEndian.PutUint64(words[8*(9*e+3*i+j):], p)
			}
		}
	}
	if tab == nil || tab.cap < E {
		p, err := l.devAlloc(int64(len(words)), fmt.Sprintf("the expert table of layer %d", layer))
		if err != nil {
			l.fail("RouteExperts", err)
			return nil, false
		}
		if tab != nil {
			// Queued work may still read the old one: free it when the
			// streams are idle.
			l.retired = append(l.retired, tab.p)
		}
		tab = &expertTable{p: p, cap: E}
		if l.tables == nil {
			l.tables = map[tableKey]*expertTable{}
		}
		l.tables[tk] = tab
	}
	if err := l.upload(tab.p, words, false); err != nil {
		l.fail("RouteExperts", err)
		return nil, false
	}
	for _, slot := range slots {
		c.touch(slot)
	}
	tab.version, tab.shape, tab.kernels, tab.uses, tab.slots = c.version, shape, kernels, 0, slots
	tab.pfSet = false
	return tab, true
}

// faultWord returns the device address of the word the MoE kernels report
// a token without experts in: a word of mapped, page-locked host memory
// (allocated zeroed once), so that EndPass reads it without a download and
// its round trip; lock held.
func (l *Layer) faultWord() (devptr, error) {
	if l.fault != 0 {
		return l.fault, nil
	}
	h, p, err := l.b.dev.hostAlloc(4)
	if err != nil {
		return 0, fmt.Errorf("the routed experts' fault word: %w", err)
	}
	l.fault, l.faultHost = p, h
	return p, nil
}

// checkFault reads the fault word after a pass that routed on the device
// (streams idle, so the kernels' stores are visible) and clears it; lock
// held.
func (l *Layer) checkFault() {
	if !l.faultArmed || l.faultHost == nil {
		return
	}
	l.faultArmed = false
	v := binary.LittleEndian.Uint32(l.faultHost)
	if v == 0 {
		return
	}
	clear(l.faultHost)
	l.fail("RouteExperts", fmt.Errorf("cuda: layer %d: a token's router logits hold a NaN (it chose no expert)", v-1))
}

// dropTables forgets every table, the shared experts' too (a model's
// weights left the device; streams idle); lock held.
func (l *Layer) dropTables() {
	for _, t := range l.tables {
		l.retired = append(l.retired, t.p)
	}
	for _, se := range l.shared {
		l.retired = append(l.retired, se.table)
	}
	l.tables, l.shared = nil, nil
	l.freeRetired()
}

// freeRetired frees tables replaced since the streams were last idle;
// lock held, streams idle.
func (l *Layer) freeRetired() {
	for _, p := range l.retired {
		if err := l.devFree(p); err != nil {
			l.fail("freeing an expert table", err)
		}
	}
	l.retired = nil
}

// moeParams are one MoE kernel's arguments (MoEParams).
type moeParams struct {
	table, sel, wts, scale, x, y, fault, gate, shared devptr
	m                                                 mlxq.Matrix // the product's matrix shape (rows, cols, quantization)
	k, E, act, layer                                  int
	next                                              devptr // 0, or the ranges to prefetch (layer_pfnext.go)
}

// slots is the slots a token has: k, and the shared expert's.
func (p moeParams) slots() int {
	if p.shared != 0 {
		return p.k + 1
	}
	return p.k
}

// kMoE queues a moe_gateup_* kernel over n = T·slots slots or a moe_down_*
// kernel over n = T tokens.
func (b *Backend) kMoE(kernel string, p moeParams, n int) error {
	m := p.m
	if n < 1 || n > maxGridY || p.k < 1 || p.k > routeMaxK {
		return fmt.Errorf("cuda: kernel %s: %d groups along y, k %d", kernel, n, p.k)
	}
	if err := checkExt(kernel, int64(n)*int64(max(m.Rows, m.Cols)), int64(p.slots())*int64(n)*int64(m.Cols)); err != nil {
		return err
	}
	groups, split := moeGrid(kernel, m, n, b.moeSplit)
	return b.launch(kernel, [3]int{groups, n, 1}, tgThreads, p.block(make(params, 0, sizeMoE), split), sizeMoE)
}

// block is the MoEParams block of p with that split, appended to dst
// (empty).
func (p moeParams) block(dst params, split int) params {
	m := p.m
	return dst[:0].ptr(p.table).ptr(p.sel).ptr(p.wts).ptr(p.scale).ptr(p.x).ptr(p.y).ptr(p.fault).ptr(p.gate).ptr(p.shared).
		u32(m.Rows).u32(m.Cols).u32(m.GroupSize).u32(int(m.Type)).u32(m.Bits).u32(p.k).u32(p.E).u32(p.act).u32(p.layer).u32(split).ptr(p.next)
}

// sharedSlotEnv set to 0 turns sharedSlot off.
const sharedSlotEnv = "QPACK_CUDA_SHARED_SLOT"

// sharedSlot reports whether a layer's shared expert runs as every
// token's slot k of the routed experts' two launches rather than two
// launches of its own: of the routed experts' shapes and kernels, and
// with gateup's split for T·(k+1) slots the one the routed experts (T·k
// slots) and the shared expert alone (T) get, so that every output is
// the bits of the separate launches. QPACK_CUDA_SHARED_SLOT=0 turns it
// off (an A/B switch for the benchmarks).
func (b *Backend) sharedSlot(tab *expertTable, se *sharedExpert, T, k int) bool {
	g, d := tab.shape[0], tab.shape[2]
	if b.noSharedSlot || se.kernels != tab.kernels || !sameShape(se.gate, g) || !sameShape(se.down, d) {
		return false
	}
	if g.Bits != 4 && g.Bits != 8 {
		return true // gateup splits only 4- and 8-bit rows
	}
	s := b.moeSplit(g.Rows, g.Cols, g.Bits, T*(k+1))
	return s == b.moeSplit(g.Rows, g.Cols, g.Bits, T*k) && s == b.moeSplit(g.Rows, g.Cols, g.Bits, T)
}

// moeGrid is the row blocks (groups along x) of a moe_* kernel over n slots
// (gateup) or tokens (down) of products of shape m, and gateup's split
// (splitFor: moeSplit's choice for the slots, so that a decode step's
// few slots fill the device; 1 for the other kernels). A gateup group
// takes QP_SIMDS/split row quads (rows of one for 2, 3, 5, 6 bits and
// dense), a down group one row quad, two where qp_moe_down_half splits
// its simdgroups (at most 16 chunks a row: moeDownHalf).
func moeGrid(kernel string, m mlxq.Matrix, n int, splitFor func(rows, cols, bits, n int) int) (groups, split int) {
	q := m.Bits == 4 || m.Bits == 8
	rows := 1
	if q {
		rows = qRows
	}
	if strings.HasPrefix(kernel, "moe_gateup") {
		split = 1
		if q {
			split = splitFor(m.Rows, m.Cols, m.Bits, n)
		}
		return ceilDiv(m.Rows, rows*rowsPerTG/split), split
	}
	if q && moeDownHalf(m) {
		rows *= 2
	}
	return ceilDiv(m.Rows, rows), 1
}

// moeDownHalf is qp_moe_down_half: a 4- or 8-bit down product whose rows
// are at most 16 chunks of 16 bytes.
func moeDownHalf(m mlxq.Matrix) bool {
	return (m.Bits == 4 || m.Bits == 8) && m.Cols*m.Bits <= 16*128
}

// MissingExperts implements nn.ExpertRouter: the experts of a layer that
// is mostly cached (at most an eighth of it missing, so completing a layer
// reads a bounded batch at once rather than every unchosen expert of the
// model on one token), with kernels for its shapes, when they fit in the
// budget beside everything cached.
func (l *Layer) MissingExperts(src nn.ExpertSource, layer, E int) []int {
	key0, cacheable := keyOf(src, layer, 0)
	if !cacheable || E < 1 || E > routeMaxE {
		return nil
	}
	ok := l.lock()
	defer l.unlock()
	if !ok || !l.kernels {
		return nil
	}
	c := &l.experts
	have := c.perLayer[tableKey{src: key0.src, layer: layer}]
	if have == 0 || have >= E || E-have > max(1, E/completeFraction) {
		return nil
	}
	var miss []int
	var size int64
	for e := range E {
		s, ok := c.slots[expertKey{src: key0.src, layer: layer, expert: e}]
		if !ok {
			miss = append(miss, e)
			continue
		}
		if size == 0 {
			if _, err := moeKernels(s.mats.Gate.W, s.mats.Up.W, s.mats.Down.W); err != nil {
				return nil
			}
			size = s.size
		}
	}
	c.decide(l)
	if c.bytes+int64(len(miss))*size > c.budget {
		return nil
	}
	return miss
}

// sharedExpert is a dense MLP's matrices as a one-expert table.
type sharedExpert struct {
	table      devptr
	gate, down mlxq.Matrix
	kernels    [2]string
}

// sharedExpert returns the table of a shared expert made of Resident
// matrices (built once per gate matrix), or false when they are not
// this device's or the kernels do not take them; lock held.
func (l *Layer) sharedExpert(m nn.ExpertMats, H int) (*sharedExpert, bool) {
	g, ok1 := m.Gate.Dev.(*devMat)
	u, ok2 := m.Up.Dev.(*devMat)
	d, ok3 := m.Down.Dev.(*devMat)
	if !ok1 || !ok2 || !ok3 || m.Gate.W.Cols != H {
		return nil, false
	}
	if se, ok := l.shared[g]; ok {
		return se, true
	}
	ks, err := moeKernels(m.Gate.W, m.Up.W, m.Down.W)
	if err != nil {
		return nil, false
	}
	words := make([]byte, 8*9)
	for i, dm := range []*devMat{g, u, d} {
		for j, p := range []devptr{dm.w, dm.s, dm.b} {
			binary.LittleEndian.PutUint64(words[8*(3*i+j):], p)
		}
	}
	p, err := l.devAlloc(int64(len(words)), "a shared expert's table")
	if err == nil {
		err = l.upload(p, words, false)
	}
	if err != nil {
		l.fail("RouteExperts", err)
		return nil, false
	}
	se := &sharedExpert{table: p, gate: m.Gate.W, down: m.Down.W, kernels: ks}
	if l.shared == nil {
		l.shared = map[*devMat]*sharedExpert{}
	}
	l.shared[g] = se
	return se, true
}

// moeConsts uploads, once, routeMaxK int32 zeros (every token's slot 0)
// then routeMaxK float32 ones (their weights) for the shared expert's
// kernels; lock held.
func (l *Layer) moeConsts() error {
	if l.consts != 0 {
		return nil
	}
	p, err := l.devAlloc(8*routeMaxK, "the shared experts' index and weight vectors")
	if err != nil {
		return err
	}
	b := make([]byte, 8*routeMaxK)
	for i := range routeMaxK {
		binary.LittleEndian.PutUint32(b[4*routeMaxK+4*i:], 0x3f800000) // 1.0
	}
	if err := l.upload(p, b, false); err != nil {
		return err
	}
	l.consts = p
	return nil
}

// RoutesLayer implements nn.ExpertRouter.
func (l *Layer) RoutesLayer(src nn.ExpertSource, layer, E int) bool {
	if E < 1 || E > routeMaxE {
		return false
	}
	ok := l.lock()
	defer l.unlock()
	if !ok || !l.kernels {
		return false
	}
	_, ok = l.expertTable(src, layer, E)
	return ok
}
