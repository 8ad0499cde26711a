// Command gpu measures decode and prefill on the CUDA backend (issue 15's
// benchmarks) on a synthetic .qpack container at the real per-layer dims of
// Qwen3.6-35B-A3B (-dims 35b: hidden 2048, 256 experts top-8 of 512) or
// Qwen3-Next-80B-A3B (-dims 80b: hidden 2048, 512 experts top-10 of 512),
// written to disk (after a free-space check) and deleted at the end unless
// -keep. Every figure is printed as a ratio against a limit measured in the
// same run, with the machine (GPU, CPU cores) beside it:
//
//   - decode, experts streamed from disk through a small host expert cache
//     (-host-cache percent of all experts) and a small device expert cache
//     (-device-cache percent, where the build's CUDA backend has one:
//     SetExpertCacheBytes), against the I/O limit: the disk's pread
//     bandwidth of whole expert blobs at random offsets (same I/O mode and
//     reads in flight as the cache; measured before, between and after the
//     runs) ÷ the bytes the run read per token; goal ≥ 0.8x. The CPU
//     backend's decode in the same configuration is printed beside it;
//   - decode with every expert resident (host cache and device cache ≥ all
//     experts, warmed by a prefill that routes to all of them) against the
//     HBM limit: bytes touched per token (dense weights, the embedding's one
//     row, the top-k experts of every sparse layer, the KV cache read and the
//     DeltaNet state read and written, in float32) ÷ the device's copy
//     bandwidth (cuMemcpyDtoD of 1 GiB, bytes read plus written:
//     cuda.Backend.MeasureCopyBandwidth); goal ≥ 0.5x;
//   - prefill of a -prompt token prompt (every expert in memory, so that it
//     measures compute) on CUDA against the CPU backend on all cores; the CPU
//     runs a container of -cpu-layers layers and its rate is scaled per
//     layer (tok/s × cpu-layers ÷ layers); the products' FLOPs (2·rows·cols
//     per token for every quantized dense matrix but the embedding, lm_head
//     once, plus the top-k experts' three matrices per sparse layer) over the
//     prefill's whole time, against the GPU's measured matmul rate where the
//     build's backend measures one (goal ≥ 25%).
//
// Every step runs in a fresh process under -timeout (writing a container
// under -write-timeout, by default four times that); a step that fails or
// times out is reported and the others still run (exit status 1); a step
// that needs a GPU is skipped, with the reason, where none opens.
//
//	go run ./bench/gpu [-dims 35b|80b] [-layers 8] [-tokens 32] [-prompt 4096] [-cpu-layers 4] [-dir /tmp] [-keep] [-json]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/runner"
)

// config is the command line.
type config struct {
	Dims        string        `json:"dims"`
	Layers      int           `json:"layers"`
	CPULayers   int           `json:"cpu_layers"`
	Vocab       int           `json:"vocab"`
	Tokens      int           `json:"tokens"`
	Prompt      int           `json:"prompt"`
	Context     int           `json:"resident_context"`
	Chunk       int           `json:"chunk"`
	HostCache   float64       `json:"host_cache_percent"`
	DeviceCache float64       `json:"device_cache_percent"`
	IO          string        `json:"io"`
	Dir         string        `json:"-"`
	Keep        bool          `json:"-"`
	JSON        bool          `json:"-"`
	JSONOut     string        `json:"-"`
	Timeout     time.Duration `json:"step_timeout_ns"`
	WriteTime   time.Duration `json:"write_timeout_ns"`
	BWTime      time.Duration `json:"pread_measure_ns"`
	CopyBytes   int           `json:"copy_bytes"`
}

func main() {
	var c config
	child := flag.String("child", "", "internal: run one step (write, gpuinfo, decode, resident, prefill, prefill-streamed) in this process")
	model := flag.String("model", "", "internal: the container")
	backend := flag.String("backend", "cpu", "internal: the step's backend (cpu or cuda)")
	flag.StringVar(&c.Dims, "dims", "35b", "per-layer dims: 35b (Qwen3.6-35B-A3B) or 80b (Qwen3-Next-80B-A3B); toy for tests")
	flag.IntVar(&c.Layers, "layers", 8, "decoder layers of the container (every 4th full attention); 0: all of the real model's if the disk has room, else as many as fit")
	flag.IntVar(&c.CPULayers, "cpu-layers", 4, "layers of the container the CPU prefill runs (its rate is scaled per layer); 0 skips the CPU prefill")
	flag.IntVar(&c.Vocab, "vocab", 32768, "vocabulary size (35b has 248320, 80b 151936; a smaller one keeps lm_head, which a few layers do not amortize, from dominating)")
	flag.IntVar(&c.Tokens, "tokens", 32, "decode tokens measured (after 8 warm-up tokens)")
	flag.IntVar(&c.Prompt, "prompt", 4096, "prefill prompt tokens (0: no prefill)")
	flag.IntVar(&c.Context, "resident-context", 16, "prompt tokens before the resident decode (its context; the streamed decodes always start from 16)")
	flag.IntVar(&c.Chunk, "chunk", runner.DefaultPrefillChunk, "prefill tokens per forward pass")
	flag.Float64Var(&c.HostCache, "host-cache", 5, "streamed decode: host expert cache, percent of all experts")
	flag.Float64Var(&c.DeviceCache, "device-cache", 5, "streamed decode: device expert cache, percent of all experts")
	flag.StringVar(&c.IO, "io", "direct", "expert reads: direct or buffered")
	flag.StringVar(&c.Dir, "dir", os.TempDir(), "where to write the container")
	flag.BoolVar(&c.Keep, "keep", false, "keep the container (and reuse one left by an earlier -keep run)")
	flag.BoolVar(&c.JSON, "json", false, "print the results as JSON")
	flag.StringVar(&c.JSONOut, "json-out", "", "also write the results as JSON to this file")
	flag.DurationVar(&c.Timeout, "timeout", 150*time.Second, "bound on each step (writing the container: 4x)")
	flag.DurationVar(&c.WriteTime, "write-timeout", 0, "bound on writing each container (0: 4x -timeout)")
	flag.DurationVar(&c.BWTime, "bw-time", 3*time.Second, "duration of each pread bandwidth measurement")
	flag.IntVar(&c.CopyBytes, "copy-bytes", 1<<30, "bytes of the device copy-bandwidth measurement")
	flag.Parse()
	if c.WriteTime <= 0 {
		c.WriteTime = 4 * c.Timeout
	}
	if c.Context < 1 {
		fail(fmt.Errorf("-resident-context %d: want at least 1 token", c.Context))
	}
	if _, ok := models[c.Dims]; !ok {
		fail(fmt.Errorf("-dims %q: want 35b or 80b", c.Dims))
	}
	mode, err := expertcache.ParseIOMode(c.IO)
	if err != nil {
		fail(err)
	}
	if *child != "" {
		res, err := runChild(*child, *model, *backend, c, mode)
		if err != nil {
			fail(err)
		}
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			fail(err)
		}
		return
	}
	rep, err := run(c, mode)
	if err != nil {
		fail(err)
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		fail(err)
	}
	js = append(js, '\n')
	if c.JSONOut != "" {
		if err := os.WriteFile(c.JSONOut, js, 0o644); err != nil {
			fail(err)
		}
	}
	if c.JSON {
		_, err = os.Stdout.Write(js)
	} else {
		err = rep.print(os.Stdout)
	}
	if err != nil {
		fail(err)
	}
	if rep.Failed > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/gpu:", err)
	os.Exit(1)
}
