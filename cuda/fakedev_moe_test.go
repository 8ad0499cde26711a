package cuda

import (
	"encoding/binary"
	"math"
	"strings"

	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/nn"
)

// moeKernel emulates the routed-expert kernels (kernels/22_moe.cu) from
// their parameter block: each slot's expert found through the table in
// fake device memory, its products by the CPU backend (as the fake's
// gemv), the GLU and the combine by nn.HostDevice (as the fake's glu and
// combine), so the routed path's results are the same bits as Route and
// MoE.Run on the fake: a check of the table, the addresses and the
// grids the host side computes. A shared expert as every token's slot k
// (MoEParams.shared) is found through its table of one; down then adds it
// as the separate launches would (Combine over its one slot of weight 1,
// then AddGated).
func (f *fakeDev) moeKernel(k string, grid [3]uint32, p []byte) {
	ptr := func(i int) devptr { return binary.LittleEndian.Uint64(p[8*i:]) }
	u := func(j int) int { return int(binary.LittleEndian.Uint32(p[72+4*j:])) }
	rows, cols, group, st, bits, kk, E, act, layer := u(0), u(1), u(2), mlxq.Float(u(3)), u(4), u(5), u(6), u(7), u(8)
	table, selp, wtsp, scalep, xp, yp, faultp, gatep, sharedp := ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), ptr(5), ptr(6), ptr(7), ptr(8)
	gateup := strings.HasPrefix(k, "moe_gateup")
	if next := ptr(14); next != 0 {
		// The ranges to prefetch (qp_moe_prefetch_next): each inside an
		// allocation, as the GPU's prefetches would need to be useful.
		w := f.at(next, 48)
		for r := range 3 {
			a, n := binary.LittleEndian.Uint64(w[16*r:]), binary.LittleEndian.Uint64(w[16*r+8:])
			if n > 0 {
				f.at(a, int(n))
			}
		}
		f.prefetchRanges++
		f.pfFirst = binary.LittleEndian.Uint64(w)
	}
	slotsPer := kk // a token's slots
	if sharedp != 0 {
		slotsPer++
		if gateup == (gatep != 0) {
			f.t.Fatalf("%s: a shared slot with gate %#x", k, gatep)
		}
	}
	per := 1
	if bits == 4 || bits == 8 {
		per = qRows
	}
	// gateup: QP_SIMDS/split row quads a group; down: one row quad, two
	// when a row is at most 16 chunks of 16 bytes (the simdgroups' halves).
	split := f.split(k, u(9))
	wantGroups := ceilDiv(rows, per)
	if gateup {
		wantGroups = ceilDiv(rows, per*rowsPerTG/split)
	} else if per > 1 && cols*bits <= 2048 {
		wantGroups = ceilDiv(rows, 2*per)
	}
	if int(grid[0]) != wantGroups || split > 1 && (per == 1 || !gateup) {
		f.t.Fatalf("%s: grid %v, split %d for %d rows of %d", k, grid, split, rows, cols)
	}
	if strings.HasSuffix(k, "_q4") != (bits == 4) || strings.HasSuffix(k, "_q8") != (bits == 8) {
		f.t.Fatalf("%s for %d-bit experts", k, bits)
	}
	n := int(grid[1]) // slots (gateup) or tokens (down)
	tokens := n
	if gateup {
		if n%slotsPer != 0 {
			f.t.Fatalf("%s: %d groups along y for %d slots a token", k, n, slotsPer)
		}
		tokens = n / slotsPer
	}
	sel := make([]int32, tokens*kk)
	for i := range sel {
		sel[i] = int32(binary.LittleEndian.Uint32(f.at(selp+uint64(4*i), 4)))
	}
	fault := func() { binary.LittleEndian.PutUint32(f.at(faultp, 4), uint32(layer+1)) }
	// mat is matrix j (0 gate, 1 up, 2 down) of expert e (-1: the shared
	// expert), as the kernel finds it.
	mat := func(e, j int) mlxq.Matrix {
		tab := table
		if e < 0 {
			tab, e = sharedp, 0
		}
		a := func(i int) devptr { return binary.LittleEndian.Uint64(f.at(tab+uint64(8*(9*e+3*j+i)), 8)) }
		var m mlxq.Matrix
		var err error
		if bits == 0 {
			m, err = mlxq.NewDense(rows, cols, st, f.at(a(0), rows*cols*st.Size()))
		} else {
			sb := rows * (cols / group) * st.Size()
			m, err = mlxq.NewQuantized(rows, cols, bits, group, st, f.at(a(0), rows*cols*bits/8), f.at(a(1), sb), f.at(a(2), sb))
		}
		if err != nil {
			f.t.Fatalf("%s: expert %d: %v", k, e, err)
		}
		return m
	}
	view := func(a devptr, n int) []float32 { return f32s(f.at(a, 4*n)) }
	var h nn.HostDevice
	if gateup {
		a := nn.SiLUGate
		if act == actGELUTanh {
			a = nn.GELUTanhGate
		}
		for s := range n {
			y := view(yp+uint64(4*s*rows), rows)
			t, j := s/slotsPer, s%slotsPer
			e := -1 // the shared expert
			if j < kk {
				if e = int(sel[t*kk+j]); e < 0 || e >= E {
					fault()
					clear(y)
					continue
				}
			}
			x := view(xp+uint64(4*t*cols), cols)
			g, up := make([]float32, rows), make([]float32, rows)
			runtime.CPU{}.MatMul(mat(e, 0), g, x, 1)
			runtime.CPU{}.MatMul(mat(e, 1), up, x, 1)
			h.GLU(a, nn.HostTensor(y), nn.HostTensor(g), nn.HostTensor(up), rows)
		}
		return
	}
	res := make([]float32, kk*rows)
	w := make([]float32, kk)
	for t := range n {
		clear(res)
		for i := range kk {
			s := t*kk + i
			e := int(sel[s])
			if e < 0 || e >= E {
				fault()
				w[i] = 0
				continue
			}
			w[i] = math.Float32frombits(binary.LittleEndian.Uint32(f.at(wtsp+uint64(4*s), 4)))
			if scalep != 0 {
				w[i] *= view(scalep, E)[e]
			}
			runtime.CPU{}.MatMul(mat(e, 2), res[i*rows:(i+1)*rows], view(xp+uint64(4*(t*slotsPer+i)*cols), cols), 1)
		}
		y := nn.HostTensor(view(yp+uint64(4*t*rows), rows))
		sum := make([]float32, rows)
		switch {
		case sharedp != 0:
			h.Combine(y, nn.HostTensor(res), w, 1, kk, rows)
			sh := make([]float32, rows)
			runtime.CPU{}.MatMul(mat(-1, 2), sh, view(xp+uint64(4*(t*slotsPer+kk)*cols), cols), 1)
			h.Combine(nn.HostTensor(sum), nn.HostTensor(sh), []float32{1}, 1, 1, rows)
			h.AddGated(y, nn.HostTensor(sum), nn.HostTensor(view(gatep+uint64(4*t), 1)), 1, rows)
		case gatep == 0:
			h.Combine(y, nn.HostTensor(res), w, 1, kk, rows)
		default:
			h.Combine(nn.HostTensor(sum), nn.HostTensor(res), w, 1, kk, rows)
			h.AddGated(y, nn.HostTensor(sum), nn.HostTensor(view(gatep+uint64(4*t), 1)), 1, rows)
		}
	}
}
