// Command matvec measures the CPU matrix-vector kernels of runtime/mlxq
// against the machine's memory bandwidth, measured in the same run.
//
// The baseline is copy() of a buffer as large as the packed weights, split
// over the same number of goroutines as the kernels use. A kernel's figure is
// the packed weight bytes it streams per second; the ratio is kernel GB/s
// over copy GB/s (copy moves every byte twice, read and write, so a
// read-only kernel at full memory speed can exceed 1).
//
// Each kernel is timed in rounds alternating with the copy baseline. The
// times reported are the fastest (on a machine shared with other work, the
// least disturbed); the ratio is the median over rounds of the ratio within
// a round (copy time / kernel time), which cancels slow load changes.
//
//	go run ./bench/matvec [-mib 512] [-threads 2] [-rounds 8] [-json]
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/qpack-go/qpack/runtime/mlxq"
)

type result struct {
	Name    string     `json:"name"`
	Bytes   int64      `json:"bytes"`         // weight bytes streamed per call (times vectors for MatMul: see Vectors)
	Vectors int        `json:"vectors"`       // input vectors per call
	Seconds float64    `json:"seconds"`       // fastest time per call
	GBps    float64    `json:"gb_per_s"`      // packed weight bytes per second (1e9), fastest round
	Ratio   float64    `json:"ratio_to_copy"` // median over rounds of copy time / kernel time
	MinMax  [2]float64 `json:"ratio_range"`   // smallest and largest round ratio
	Note    string     `json:"note,omitempty"`
}

func main() {
	mib := flag.Int("mib", 512, "size of the packed weight matrix in MiB (make it larger than the last-level cache)")
	threads := flag.Int("threads", 2, "GOMAXPROCS, and goroutines for the copy baseline")
	iters := flag.Int("rounds", 8, "timed rounds per kernel, each paired with a copy (fastest kept)")
	asJSON := flag.Bool("json", false, "print results as JSON")
	flag.Parse()
	if *mib < 1 || *threads < 1 || *iters < 1 {
		fmt.Fprintln(os.Stderr, "matvec: -mib, -threads and -iters must be positive")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(*threads)

	const cols = 2048 // the hidden size of the target models
	size := *mib << 20
	buf := make([]byte, size)
	dst := make([]byte, size)
	fillRandom(buf, 1)
	fillRandom(dst, 2) // touch the pages

	var results []result
	copyFn := func() { parallelCopy(dst, buf, *threads) }
	copyTime := fastest(1, copyFn)
	copyFn()

	add := func(name string, m mlxq.Matrix, n int, note string) {
		x := make([]float32, n*m.Cols)
		r := rand.New(rand.NewPCG(3, 4))
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		y := make([]float32, n*m.Rows)
		m.MatMul(y, x, n) // warm up
		t := math.Inf(1)
		ratios := make([]float64, *iters)
		for i := range ratios {
			// The copy is of size bytes, the kernel of len(m.Weight): compare
			// per byte.
			c := fastest(1, copyFn) / float64(size)
			k := fastest(3, func() { m.MatMul(y, x, n) })
			copyTime = min(copyTime, c*float64(size))
			t = min(t, k)
			ratios[i] = c * float64(len(m.Weight)) / k
		}
		sort.Float64s(ratios)
		gb := float64(len(m.Weight)) / t / 1e9
		results = append(results, result{Name: name, Bytes: int64(len(m.Weight)), Vectors: n, Seconds: t, GBps: gb,
			Ratio: ratios[len(ratios)/2], MinMax: [2]float64{ratios[0], ratios[len(ratios)-1]}, Note: note})
	}

	// int4 g64, bf16 scales: the main format.
	rows4 := size / (cols / 2)
	ng := cols / 64
	sc, bi := scalesBiases(rows4*ng, 5)
	m4, err := mlxq.NewQuantized(rows4, cols, 4, 64, mlxq.BF16, buf, sc, bi)
	check(err)
	add("int4 g64 MatVec", m4, 1, fmt.Sprintf("[%d, %d], scales+biases %d MiB more", rows4, cols, 2*len(sc)>>20))
	add("int4 g64 MatMul n=8", m4, 8, "GB/s counts each weight byte once")
	sc, bi = nil, nil

	// int8 g64.
	rows8 := size / cols
	sc, bi = scalesBiases(rows8*ng, 6)
	m8, err := mlxq.NewQuantized(rows8, cols, 8, 64, mlxq.BF16, buf, sc, bi)
	check(err)
	add("int8 g64 MatVec", m8, 1, fmt.Sprintf("[%d, %d]", rows8, cols))
	sc, bi = nil, nil

	// Expert-sized int4 matrices as the runner sees them (in cache: a
	// latency figure, not a bandwidth one).
	exp, err := mlxq.NewQuantized(512, cols, 4, 64, mlxq.BF16, buf[:512*cols/2], sc512(512*ng), sc512(512*ng))
	check(err)
	add("int4 g64 [512,2048] MatVec (cached)", exp, 1, "one expert gate/up projection")

	// Dense bf16: rewrite the buffer with finite bf16 values.
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i+2 <= len(buf); i += 2 {
		binary.LittleEndian.PutUint16(buf[i:], mlxq.F32ToBF16(float32(r.NormFloat64()*0.02)))
	}
	mb, err := mlxq.NewDense(size/(2*cols), cols, mlxq.BF16, buf)
	check(err)
	add("bf16 dense MatVec", mb, 1, fmt.Sprintf("[%d, %d]", size/(2*cols), cols))

	copyGB := float64(size) / copyTime / 1e9
	results = append([]result{{Name: "copy baseline", Bytes: int64(size), Seconds: copyTime, GBps: copyGB, Ratio: 1, MinMax: [2]float64{1, 1},
		Note: fmt.Sprintf("copy() over %d goroutines", *threads)}}, results...)
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		check(enc.Encode(map[string]any{
			"goos": runtime.GOOS, "goarch": runtime.GOARCH, "threads": *threads, "mib": *mib, "results": results,
		}))
		return
	}
	fmt.Printf("mlxq matvec benchmark: %d MiB of packed weights, %d threads, %s/%s, %d rounds\n",
		*mib, *threads, runtime.GOOS, runtime.GOARCH, *iters)
	fmt.Printf("%-38s %10s %10s %11s %13s\n", "", "best time", "best GB/s", "x copy", "(round range)")
	for _, res := range results {
		fmt.Printf("%-38s %7.2f ms %10.2f %10.2fx   (%.2f-%.2f)  %s\n", res.Name, res.Seconds*1e3, res.GBps, res.Ratio, res.MinMax[0], res.MinMax[1], res.Note)
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "matvec:", err)
		os.Exit(1)
	}
}

func fillRandom(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for ; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}

// scalesBiases returns n bf16 scales and biases of plausible magnitude.
func scalesBiases(n int, seed uint64) (s, b []byte) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	s = make([]byte, 2*n)
	b = make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(s[2*i:], mlxq.F32ToBF16(float32(0.001+0.01*r.Float64())))
		binary.LittleEndian.PutUint16(b[2*i:], mlxq.F32ToBF16(float32(-0.05*r.Float64())))
	}
	return s, b
}

func sc512(n int) []byte { s, _ := scalesBiases(n, 9); return s }

func parallelCopy(dst, src []byte, threads int) {
	var wg sync.WaitGroup
	n := len(src)
	for t := 0; t < threads; t++ {
		lo, hi := n*t/threads, n*(t+1)/threads
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	wg.Wait()
}

// fastest times f iters times and returns the fastest, in seconds. Short
// calls are repeated to fill at least a millisecond per sample.
func fastest(iters int, f func()) float64 {
	reps := 1
	for {
		t0 := time.Now()
		for i := 0; i < reps; i++ {
			f()
		}
		if time.Since(t0) > time.Millisecond || reps > 1<<20 {
			break
		}
		reps *= 4
	}
	best := math.Inf(1)
	for i := 0; i < iters; i++ {
		t0 := time.Now()
		for j := 0; j < reps; j++ {
			f()
		}
		best = min(best, time.Since(t0).Seconds()/float64(reps))
	}
	return best
}
