package cuda

import (
	"testing"
)

// BenchmarkLayerChainGPU: the chain probe (chain_probe_test.go). It
// prints, for 8 layers of chainPhases (each layer's slices its own), the
// GPU time of the step as one graph with programmatic dependent launches,
// without and with each kernel's prefetch, against the bytes' HBM time,
// and each op's time alone in the chain's conditions (the best of the
// runs; an op's time is the chain's with it less the chain's without it
// would be noisier: the op is timed in a graph of its 8 layers' copies).
func BenchmarkLayerChainGPU(b *testing.B) {
	g, sms := probeDevice(b, chainSource, "chain.cu")
	f, err := g.function("chain_phase")
	if err != nil {
		b.Fatal(err)
	}
	const layers = 8
	slice := func(bytes int) int { return (bytes + 255) / 256 * 256 } // an op's bytes, 256-byte aligned
	layer := 0
	for _, ph := range chainPhases {
		layer += slice(ph.bytes)
	}
	total := layers * layer
	src, err := g.memAlloc(total)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(src)
	if err := g.memset(src, total); err != nil {
		b.Fatal(err)
	}
	sink, err := g.memAlloc(4 * 2 * sms)
	if err != nil {
		b.Fatal(err)
	}
	defer g.memFree(sink)
	bw := probeCopyBandwidth(b, g, src, total)
	b.Logf("device %s: copy bandwidth %.0f GB/s; %d layers of %d ops, %.1f MB a layer", g.name(), bw/1e9, layers, len(chainPhases), float64(layer)/1e6)
	// run times one graph of the ops in keep (every op when keep is nil)
	// over the layers: the best of 5 runs after one to warm up, in µs.
	run := func(pf bool, keep func(i int) bool) float64 {
		if err := g.beginCapture(); err != nil {
			b.Fatal(err)
		}
		off := uint64(0)
		for range layers {
			for i, ph := range chainPhases {
				n4 := ph.bytes / 16
				if keep == nil || keep(i) {
					if err := g.launch(f, [3]uint32{chainGrid(n4, sms), 1, 1}, [3]uint32{256, 1, 1},
						chainParams(src, sink, off/16, n4, pf)); err != nil {
						g.endCapture()
						b.Fatal(err)
					}
				}
				off += uint64(slice(ph.bytes))
			}
		}
		gr, err := g.endCapture()
		if err != nil {
			b.Fatal(err)
		}
		defer g.destroyGraph(gr)
		exec, err := g.instantiate(gr)
		if err != nil {
			b.Fatal(err)
		}
		defer g.destroyExec(exec)
		return bestRun(b, func() (float32, error) { return g.timed(func() error { return g.graphLaunch(exec) }) }) * 1000
	}
	hbm := float64(total) / bw * 1e6
	// The chain with every small op fused away (their bytes read by
	// nobody): the ceiling of a layer of six launches.
	big := func(i int) bool { return chainPhases[i].bytes >= 512<<10 }
	bigBytes := 0
	for i, ph := range chainPhases {
		if big(i) {
			bigBytes += layers * ph.bytes
		}
	}
	for range b.N {
		for _, pf := range []bool{false, true} {
			us := run(pf, nil)
			b.Logf("prefetch %-5v: %8.2f us a step of %d layers (%.2f us a layer), HBM time %.2f us: %.2fx", pf, us, layers, us/layers, hbm, hbm/us)
			if pf {
				b.ReportMetric(hbm/us, "pf_x")
			} else {
				b.ReportMetric(hbm/us, "x")
			}
		}
		for _, pf := range []bool{false, true} {
			us := run(pf, big)
			hb := float64(bigBytes) / bw * 1e6
			b.Logf("the ops of 512 KiB or more alone, prefetch %-5v: %8.2f us a step (%.2f us a layer), HBM time %.2f us: %.2fx", pf, us, us/layers, hb, hb/us)
		}
		for i, ph := range chainPhases {
			us := run(false, func(j int) bool { return j == i })
			b.Logf("  %-24s %10d B: %6.2f us an op (HBM %5.2f us: %.2fx)", ph.name, ph.bytes, us/layers,
				float64(ph.bytes)/bw*1e6, float64(ph.bytes)/bw*1e6/(us/layers))
		}
	}
}
