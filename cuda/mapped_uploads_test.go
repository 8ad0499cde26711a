package cuda

import (
	"fmt"
	"strings"
	"testing"
)

// With mapped uploads (the default; QPACK_CUDA_MAPPED_UPLOADS=0 turns them
// off) a resident decode step queues no copy
// from the host on the compute stream (the embedding row and the KV row
// lists are read by kernels from the mapped staging memory), still gives
// the CPU's logits bit for bit and still replays as graphs; without it
// each step copies.
func TestMappedUploadsFake(t *testing.T) {
	for _, name := range []string{"qwen3_5_moe-q4g32", "gemma4-q4g32"} {
		for _, mapped := range []bool{false, true} {
			b, g := graphBackend(t)
			b.mappedUploads = mapped
			ref, m := loadBoth(t, name, b)
			rs, st := ref.NewState(), m.NewState()
			routeEveryExpert(t, ref, rs)
			routeEveryExpert(t, m, st)
			var s0 Stats
			htods := 0
			for i := range 24 {
				if i == 8 { // the graphs are captured: count from here
					s0 = b.Stats()
					g.log, g.calls = true, nil
				}
				stepBoth(t, fmt.Sprintf("%s mapped %v step %d", name, mapped, i), m, st, ref, rs, []int{(5*i + 2) % m.Config.Vocab})
			}
			for _, c := range g.calls {
				if c == "htod" {
					htods++
				}
			}
			s := b.Stats()
			if s.GraphCaptures != s0.GraphCaptures || s.GraphLaunches == s0.GraphLaunches {
				t.Errorf("%s, mapped %v: %d captures and %d graph launches in steps 8-23", name, mapped,
					s.GraphCaptures-s0.GraphCaptures, s.GraphLaunches-s0.GraphLaunches)
			}
			if mapped && htods != 0 {
				t.Errorf("%s: %d copies from the host in 16 decode steps with mapped uploads, want none", name, htods)
			}
			if !mapped && htods < 16 {
				t.Errorf("%s: %d copies from the host in 16 decode steps without mapped uploads: the test sees no embedding row's copy", name, htods)
			}
		}
	}
}

// Every tiny model with mapped uploads, prompts and decode: bit for bit
// the CPU's logits and hidden states (a prompt's uploads past the limits
// go through copies as before).
func TestMappedUploadsTinyModelsFake(t *testing.T) {
	b, _ := graphBackend(t)
	b.mappedUploads = true
	compareTiny(t, func(*testing.T) *Backend { return b }, func(string) float64 { return 0 })
}

// The same on the GPU, both ways: kernels reading the mapped staging
// memory in place (the default) and the copies (QPACK_CUDA_MAPPED_UPLOADS=0;
// the conformance recording runs it, and the sanitizers over it).
func TestMappedUploadsGPU(t *testing.T) {
	b := openOrSkip(t)
	defer func() { b.mappedUploads = true }()
	for _, mapped := range []bool{true, false} {
		t.Run(fmt.Sprintf("mapped %v", mapped), func(t *testing.T) {
			b.mappedUploads = mapped
			compareTiny(t, func(*testing.T) *Backend { return b }, func(name string) float64 {
				if strings.HasSuffix(name, "-f32") {
					return 1e-4
				}
				return 1e-3
			})
		})
	}
}
