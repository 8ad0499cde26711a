package cuda

import (
	"fmt"
	"os"
	"testing"
)

// The tiny models with routed experts, one of each MoE kernel kind (4 and
// 8 bits, float32) and architecture.
var pfNextModels = []string{"qwen3_next-q4g64", "qwen3_5_moe-q8g64", "gemma4-q4g32", "qwen3_next-f32"}

// pfSites are QPACK_CUDA_PF_NEXT's launches.
var pfSites = map[int]string{pfDown: "down", pfGateUp: "gateup"}

// pfSet returns decodeBothWays's switch for the prefetch from site.
func pfSet(b *Backend, site int) func(on bool) {
	return func(on bool) {
		b.pfNext = pfNone
		if on {
			b.pfNext = site
		}
	}
}

// decodeBothWays decodes 16 resident tokens of a tiny model on b twice,
// after set(true) and after set(false), and fails unless each step's
// logits are the same bits both ways; with tol >= 0, also unless they are
// within tol of the CPU's, with its greedy token (0: the CPU's bits).
// what names the switch in the messages. It returns the launches and the
// layers routed on the device each way.
func decodeBothWays(t *testing.T, b *Backend, name, what string, tol float64, set func(on bool)) (launches, routed [2]int64) {
	t.Helper()
	var logits [2][][]float32
	for i, on := range []bool{true, false} {
		// A subtest each, so that the first way's model is closed (its
		// experts out of the device cache) before the second loads.
		t.Run(fmt.Sprintf("%s %v", what, on), func(t *testing.T) {
			set(on)
			ref, m := loadBoth(t, name, b)
			rs, st := ref.NewState(), m.NewState()
			routeEveryExpert(t, ref, rs)
			routeEveryExpert(t, m, st)
			s0 := b.Stats()
			for step := range 16 {
				label := fmt.Sprintf("%s %s %v step %d", name, what, on, step)
				tok := []int{(5*step + 2) % m.Config.Vocab}
				w, err := ref.Forward(rs, tok, nil)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				g, err := m.Forward(st, tok, nil)
				if err != nil {
					t.Fatalf("%s: %v", label, err)
				}
				if tol >= 0 {
					if d := maxDiff(g, w); !(d <= tol) {
						t.Fatalf("%s: logits max abs difference %.3g > %.3g", label, d, tol)
					}
					if argmax(g) != argmax(w) {
						t.Fatalf("%s: greedy token %d, cpu %d", label, argmax(g), argmax(w))
					}
				}
				logits[i] = append(logits[i], append([]float32(nil), g...))
			}
			s := b.Stats()
			launches[i], routed[i] = s.Launches-s0.Launches, s.RoutedLayers-s0.RoutedLayers
		})
	}
	if t.Failed() {
		return launches, routed
	}
	// Every MoE layer of every step routed on the device, both ways.
	if routed[0] == 0 || routed[0] != routed[1] {
		t.Fatalf("%s: %d and %d layers routed on the device", name, routed[0], routed[1])
	}
	for step := range logits[0] {
		sameBits(t, fmt.Sprintf("%s step %d: the logits with %s on and off", name, step, what), logits[0][step], logits[1][step])
	}
	return launches, routed
}

// On the fake device: 16 resident decode steps of each tiny model with the
// next product prefetched from each site and without; the CPU's bits
// both ways, and from the second step on every routed layer's launch
// carries ranges (learned in the first), each inside an allocation, the
// first of them where the next gemv launch's matrix starts (the fake
// device checks).
func TestPrefetchNextFake(t *testing.T) {
	for site, sname := range pfSites {
		for _, name := range pfNextModels {
			t.Run(sname+"/"+name, func(t *testing.T) {
				b, f := fakeBackend(t)
				_, routed := decodeBothWays(t, b, name, "prefetch", 0, pfSet(b, site))
				got, want := f.prefetchRanges, routed[0]-routed[0]/16
				if routed[0]%16 != 0 || int64(got) != want {
					t.Errorf("%s: %d MoE launches with ranges to prefetch, want %d (%d layers routed in 16 steps)", name, got, want, routed[0])
				}
				if f.pfMisses != 0 || f.pfHits != got {
					t.Errorf("%s: of %d prefetches, %d were of the next gemv launch's matrix, %d of another", name, got, f.pfHits, f.pfMisses)
				}
			})
		}
	}
}

// The same on the GPU: the same bits with and without the prefetches (the
// recording runs it, and the sanitizers). Not against the CPU: after
// routeEveryExpert's 128-token prompt through the tf32 gemm kernels the
// quantized models' logits are 0.013-0.021 from the CPU's (H100, the
// twenty-third session), past the 1e-3 of a short prompt; compareTiny
// holds the CPU bounds.
func TestPrefetchNextGPU(t *testing.T) {
	b := openOrSkip(t)
	defer func(v int) { b.pfNext = v }(b.pfNext)
	names := pfNextModels
	if os.Getenv("QPACK_CUDA_TINY_ONE") != "" {
		names = []string{"qwen3_5_moe-q8g64", "qwen3_next-f32"}
	}
	for site, sname := range pfSites {
		for _, name := range names {
			t.Run(sname+"/"+name, func(t *testing.T) {
				decodeBothWays(t, b, name, "prefetch", -1, pfSet(b, site))
			})
		}
	}
}

// QPACK_CUDA_PF_NEXT's values: moe_gateup prefetches unless told
// otherwise (measured +3.4%, twenty-seventh session).
func TestPfNextFor(t *testing.T) {
	for v, want := range map[string]int{"": pfGateUp, "gateup": pfGateUp, "down": pfDown, "off": pfNone, "none": pfNone, "0": pfNone, "bogus": pfGateUp} {
		if got := pfNextFor(v); got != want {
			t.Errorf("pfNextFor(%q) = %d, want %d", v, got, want)
		}
	}
}
