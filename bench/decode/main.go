// Command decode measures the CPU runner's decode speed on a synthetic model
// with the real per-layer dimensions of Qwen3.5/3.6-35B-A3B (hidden 2048,
// attention heads 16/2 × 256, DeltaNet heads 16/32 × 128, 256 experts top-8
// of 512, shared expert 512, 4-bit group 64) and every expert in RAM: the
// compute-bound figure. Weights are random, quantized in memory with
// mlxq.Quantize.
//
// It prints tokens per second and, as the baseline measured in the same run,
// how fast this machine streams the same number of weight bytes from RAM
// (a plain sum over a buffer of the bytes one token touches), with the ratio.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/qpack-go/qpack/runtime/mlxq"
	"github.com/qpack-go/qpack/runtime/synthetic"
)

func main() {
	layers := flag.Int("layers", 4, "decoder layers (every 4th is full attention)")
	vocab := flag.Int("vocab", 248320, "vocabulary size (the real one is 248320)")
	prompt := flag.Int("prompt", 16, "prompt tokens prefilled before timing")
	steps := flag.Int("tokens", 24, "decode steps timed")
	seed := flag.Uint64("seed", 1, "weight seed")
	unique := flag.Int("unique", 16, "distinct random experts per layer (and embedding rows); the rest repeat their bytes in separate memory; 0 = all distinct (slow to generate)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the timed decode steps to this file")
	flag.Parse()
	profile = *cpuprofile
	if err := run(*layers, *vocab, *prompt, *steps, *seed, *unique); err != nil {
		fmt.Fprintln(os.Stderr, "decode:", err)
		os.Exit(1)
	}
}

func run(layers, vocab, prompt, steps int, seed uint64, unique int) error {
	d := synthetic.Real(layers, vocab)
	d.Unique = unique
	t0 := time.Now()
	g, err := synthetic.Generate(d, seed)
	if err != nil {
		return err
	}
	m, err := g.Build(nil)
	if err != nil {
		return err
	}
	var total int64
	for _, t := range g.Tensors {
		total += int64(len(t.Data))
	}
	fmt.Printf("model: %d layers, vocab %d, %d experts top-%d, %.2f GB of weights in RAM (generated in %.1fs), GOMAXPROCS %d\n",
		layers, vocab, d.Experts, d.TopK, float64(total)/1e9, time.Since(t0).Seconds(), goruntime.GOMAXPROCS(0))

	// Bytes one decode token touches: everything but the routed experts and
	// the embedding table, plus top-k experts per layer and one embedding row.
	var expertBytes, embedBytes int64
	for n, t := range g.Tensors {
		switch {
		case contains(n, ".mlp.switch_mlp."):
			expertBytes += int64(len(t.Data))
		case contains(n, "embed_tokens"):
			embedBytes += int64(len(t.Data))
		}
	}
	perToken := total - expertBytes - embedBytes + expertBytes/int64(d.Experts)*int64(d.TopK)

	st := m.NewState()
	toks := make([]int, prompt)
	for i := range toks {
		toks[i] = (i*7919 + 13) % vocab
	}
	tp := time.Now()
	logits, err := m.Forward(st, toks, nil)
	if err != nil {
		return err
	}
	prefill := time.Since(tp)
	next := argmax(logits)
	// one warm-up step
	if logits, err = m.Forward(st, []int{next}, nil); err != nil {
		return err
	}
	next = argmax(logits)
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	start := time.Now()
	for range steps {
		if logits, err = m.Forward(st, []int{next}, nil); err != nil {
			return err
		}
		next = argmax(logits)
	}
	el := time.Since(start)
	if profile != "" {
		pprof.StopCPUProfile()
	}
	tokps := float64(steps) / el.Seconds()
	eff := float64(perToken) * tokps / 1e9

	// The lm_head product alone, to split the token time into head and layers
	// and extrapolate to the real 40 layers.
	ht := g.Tensors["language_model.lm_head.weight"]
	head, err := mlxq.NewQuantized(vocab, d.Hidden, d.Bits, d.Group, mlxq.BF16, ht.Data,
		g.Tensors["language_model.lm_head.scales"].Data, g.Tensors["language_model.lm_head.biases"].Data)
	if err != nil {
		return err
	}
	hx := make([]float32, d.Hidden)
	for i := range hx {
		hx[i] = float32(i%7) - 3
	}
	hy := make([]float32, vocab)
	head.MatVec(hy, hx)
	th := time.Now()
	for range steps {
		head.MatVec(hy, hx)
	}
	headMs := time.Since(th).Seconds() * 1000 / float64(steps)
	layerMs := (1000/tokps - headMs) / float64(layers)

	base := streamRate(perToken)
	fmt.Printf("prefill: %d tokens in %.2fs (%.1f tok/s)\n", prompt, prefill.Seconds(), float64(prompt)/prefill.Seconds())
	fmt.Printf("decode:  %.2f tok/s (%.1f ms/token), %.0f MB of weights per token -> %.2f GB/s effective\n",
		tokps, 1000/tokps, float64(perToken)/1e6, eff)
	fmt.Printf("split:   lm_head %.1f ms, %.1f ms per layer -> a 40-layer model would decode at %.2f tok/s\n",
		headMs, layerMs, 1000/(headMs+40*layerMs))
	fmt.Printf("baseline: summing %.0f MB from RAM runs at %.2f GB/s -> decode reaches %.2fx of it\n",
		float64(perToken)/1e6, base, eff/base)
	return nil
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func argmax(x []float32) int {
	b := 0
	for i, v := range x {
		if v > x[b] {
			b = i
		}
	}
	return b
}

var (
	sink    uint64
	profile string
)

// streamRate measures GB/s of reading n bytes (one goroutine per CPU, each
// summing its share as uint64 words), best of 5.
func streamRate(n int64) float64 {
	words := make([]uint64, n/8)
	for i := range words {
		words[i] = uint64(i)
	}
	procs := goruntime.GOMAXPROCS(0)
	best := math.Inf(1)
	for range 5 {
		t := time.Now()
		done := make(chan uint64, procs)
		step := (len(words) + procs - 1) / procs
		for p := range procs {
			lo, hi := p*step, min((p+1)*step, len(words))
			go func() {
				var s uint64
				for _, w := range words[lo:hi] {
					s += w
				}
				done <- s
			}()
		}
		for range procs {
			sink += <-done
		}
		best = min(best, time.Since(t).Seconds())
	}
	return float64(n) / best / 1e9
}
