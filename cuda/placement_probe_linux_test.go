package cuda

import (
	"encoding/binary"
	"slices"
	"testing"
)

// BenchmarkPlacementGPU prints, for grids of 128 to 396 groups of the
// placement probe (placement_probe_test.go: moe_gateup_q4's footprint, at
// launch bounds of 2 and of 3 groups a multiprocessor), where the block
// scheduler put the groups: how many multiprocessors ran one, how many
// groups the busiest ran, how many groups waited for another to end, and
// the launch's span (the last of 4 launches; each reads a fresh slice of a
// buffer past the L2). 8 routed slots of 32 groups are 256; with the
// shared expert as slot k, 288; at split 1, 128 and 144.
//
//	go test -c ./cuda && cd cuda && ./cuda.test -test.run '^$' -test.bench PlacementGPU -test.benchtime 1x -test.v
func BenchmarkPlacementGPU(b *testing.B) {
	g, sms := probeDevice(b, placeSource, "place.cu")
	grids := []int{128, sms, 144, 256, 2 * sms, 288, 3 * sms}
	maxGrid := slices.Max(grids) // the buffers' size, on any device
	const per4 = 40 << 10 / 16   // 40 KB a group
	const rounds = 8
	src, err := g.memAlloc(rounds * maxGrid * per4 * 16)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(src)
	if err := g.memset(src, rounds*maxGrid*per4*16); err != nil {
		b.Fatal(err)
	}
	smBuf, err := g.memAlloc(4 * maxGrid)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(smBuf)
	tBuf, err := g.memAlloc(16 * maxGrid)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(tBuf)
	sink, err := g.memAlloc(4 * maxGrid)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(sink)
	out, _, err := g.hostAlloc(20 * maxGrid)
	if err != nil {
		b.Fatal(err)
	}
	defer g.hostFree(out)
	b.Logf("device %s: the probe's groups of 256 threads, 41,216 bytes of shared memory, 40 KB read each", g.name())
	round := 0
	for range b.N {
		for _, k := range []string{"probe_place2", "probe_place3"} {
			f, err := g.function(k)
			if err != nil {
				b.Fatal(err)
			}
			for _, grid := range grids {
				var s placeStats
				for range 4 {
					off := devptr((round % rounds) * maxGrid * per4 * 16)
					round++
					p := params(nil).ptr(src + off).ptr(smBuf).ptr(tBuf).ptr(sink).u32(per4).u32(0)
					if err := g.launch(f, [3]uint32{uint32(grid), 1, 1}, [3]uint32{256, 1, 1}, p); err != nil {
						b.Fatal(err)
					}
					if err := g.dtoh(out[:4*grid], smBuf); err != nil {
						b.Fatal(err)
					}
					if err := g.dtoh(out[4*maxGrid:4*maxGrid+16*grid], tBuf); err != nil {
						b.Fatal(err)
					}
					if err := g.sync(); err != nil {
						b.Fatal(err)
					}
					ids := make([]uint32, grid)
					ts := make([]uint64, 2*grid)
					for i := range ids {
						ids[i] = binary.LittleEndian.Uint32(out[4*i:])
					}
					for i := range ts {
						ts[i] = binary.LittleEndian.Uint64(out[4*maxGrid+8*i:])
					}
					if s, err = placement(ids, ts, sms); err != nil {
						b.Fatal(err)
					}
				}
				b.Logf("%s grid %3d: %v", k, grid, s)
			}
		}
	}
}
