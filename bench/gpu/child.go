package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/qpack-go/qpack/bench/internal/benchpack"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/runner"
	"github.com/qpack-go/qpack/runtime/sample"
)

// stepResult is what one child step reports.
type stepResult struct {
	Step    string `json:"step"`
	Backend string `json:"backend"`
	Device  string `json:"device,omitempty"`
	// Skipped says why the step did not run (no GPU); Error why it failed.
	Skipped string `json:"skipped,omitempty"`
	Error   string `json:"error,omitempty"`

	HostBudget int64 `json:"host_cache_bytes,omitempty"`
	// DeviceBudget is the device expert cache's budget set
	// (SetExpertCacheBytes); DeviceCache says what the backend has.
	DeviceBudget int64  `json:"device_cache_bytes,omitempty"`
	DeviceCache  string `json:"device_cache,omitempty"`
	Layered      bool   `json:"layered"` // the backend runs whole layers (nn.Layered)

	Tokens    int     `json:"tokens,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
	TokPerSec float64 `json:"tok_per_sec,omitempty"`
	// TokensHash: FNV-1a (64 bits, hex) of a decode's sampled token ids,
	// seeded as every run is: two builds or switches whose logits keep the
	// same bits draw the same tokens, so an A/B shows a switch that
	// changed them (bench/gpu/ab.sh prints it beside tok/s).
	TokensHash string `json:"tokens_hash,omitempty"`
	// Host expert cache during the measurement: bytes read from disk per
	// token, requests per token (zero when a device cache serves every
	// expert), hit rate.
	BytesPerToken    float64 `json:"bytes_read_per_token"`
	RequestsPerToken float64 `json:"host_cache_requests_per_token"`
	HitRate          float64 `json:"host_cache_hit_rate"`
	WarmSeconds      float64 `json:"warm_seconds,omitempty"`
	PeakRSS          int64   `json:"peak_rss,omitempty"`

	// gpuinfo: the device's copy bandwidth (bytes read plus written per
	// second) and matmul rate (FLOP/s), or why there is none.
	CopyBps     float64 `json:"copy_bytes_per_sec,omitempty"`
	MatMulFlops float64 `json:"matmul_flop_per_sec,omitempty"`
	MatMulNote  string  `json:"matmul_note,omitempty"`

	// The CUDA backend during the measurement, per token: the device
	// expert cache's hit rate and the bytes it copied in, and the layer
	// ops computed on the host (no kernel for them yet).
	DevExpertHitRate float64 `json:"device_expert_hit_rate"`
	// DevExpertLookupsPerToken counts the host's questions to the device
	// cache (none for a layer routed on the device).
	DevExpertLookupsPerToken float64 `json:"device_expert_lookups_per_token"`
	DevExpertBytesPerToken   float64 `json:"device_expert_bytes_per_token"`
	HostOpsPerToken          float64 `json:"host_ops_per_token"`
	LaunchesPerToken         float64 `json:"launches_per_token"`
	// RoutedPerToken is the sparse layers per token whose routing and
	// experts ran on the device without a wait (nn.ExpertRouter).
	RoutedPerToken float64 `json:"device_routed_layers_per_token"`

	// The CUDA backend's counters after the step, and its first device
	// error (calls then fell back to the CPU).
	CUDAStats any    `json:"cuda_stats,omitempty"`
	CUDAErr   string `json:"cuda_error,omitempty"`
}

func runChild(step, model, backend string, c config, mode expertcache.IOMode) (*stepResult, error) {
	if step == "write" {
		m := models[c.Dims]
		return &stepResult{Step: step}, benchpack.WriteModel(benchpack.QwenWriter(m.dims), m.tokenizer, model, c.Layers, c.Vocab)
	}
	res := &stepResult{Step: step, Backend: backend}
	be, err := openBackend(backend)
	if errors.Is(err, errNoGPU) {
		res.Skipped = err.Error()
		return res, nil
	}
	if err != nil {
		return nil, err
	}
	defer closeBackend(be)
	res.Device = deviceName(be)
	if step == "gpuinfo" {
		return res, gpuInfo(be, c, res)
	}
	if err := measure(step, model, be, c, mode, res); err != nil {
		return nil, err
	}
	cudaStats(be, res)
	return res, nil
}

// allExperts is the routed experts' bytes on disk (stride × experts ×
// layers) of the container.
func allExperts(model string) (int64, error) {
	cn, err := qpack.Open(model)
	if err != nil {
		return 0, err
	}
	defer cn.Close()
	return cn.Layout.ExpertStride * int64(cn.Layout.ExpertCount) * int64(cn.Layout.LayerCount), nil
}

// measure runs a decode (streamed: small caches; resident: every expert in
// the host cache and the device cache, warmed) or a prefill (every expert
// in memory; prefill-streamed: through the small caches, cold, as a user
// whose RAM holds a few percent of the experts prefills a prompt).
func measure(step, model string, be runtime.Backend, c config, mode expertcache.IOMode, res *stepResult) error {
	all, err := allExperts(model)
	if err != nil {
		return err
	}
	// At least a byte each: a zero budget means "the default" to both caches.
	host, dev := max(int64(float64(all)*c.HostCache/100), 1), max(int64(float64(all)*c.DeviceCache/100), 1)
	resident := step != "decode" && step != "prefill-streamed"
	if resident {
		host, dev = all+all/8, all+all/8 // room for every expert, and some slack
	}
	res.DeviceCache = setDeviceCache(be, dev)
	if res.DeviceCache == "" {
		res.DeviceBudget = dev
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := runner.Open(model, runner.Options{ExpertCache: host, IO: mode, PrefillChunk: c.Chunk, Logger: quiet, Backend: be})
	if err != nil {
		return err
	}
	defer r.Close()
	r.LimitHeap(256 << 20)
	r.EOS = nil
	_, res.Layered = be.(nn.Layered)
	res.HostBudget = r.Cache.Budget()
	cfg := r.Model.Config
	V := cfg.Vocab
	ctx := context.Background()
	if resident {
		t0 := time.Now()
		if host <= benchpack.MemAvailable()/2 || benchpack.MemAvailable() == 0 {
			if err := benchpack.Preload(r); err != nil {
				return err
			}
		}
		if step == "resident" || res.Layered {
			// Every expert routed to at least once, so a device expert
			// cache holds them all: 16·E/k tokens leave a given expert
			// unrouted with probability about e^-16 under uniform routing.
			warm := min(max(16*cfg.Experts/max(cfg.TopK, 1), 64), 4096)
			if _, _, err := r.NewSession().Feed(ctx, benchpack.RandomTokens(warm, V, 9)); err != nil {
				return err
			}
		}
		res.WarmSeconds = time.Since(t0).Seconds()
	}
	s := r.NewSession()
	c0, _ := cudaCounters(be)
	defer func() {
		c1, ok := cudaCounters(be)
		if !ok || res.Tokens == 0 {
			return
		}
		n := float64(res.Tokens)
		lookups := (c1.ExpertHits - c0.ExpertHits) + (c1.ExpertMisses - c0.ExpertMisses)
		res.DevExpertLookupsPerToken = float64(lookups) / n
		if lookups > 0 {
			res.DevExpertHitRate = float64(c1.ExpertHits-c0.ExpertHits) / float64(lookups)
		}
		res.DevExpertBytesPerToken = float64(c1.ExpertBytes-c0.ExpertBytes) / n
		res.HostOpsPerToken = float64(c1.HostOps-c0.HostOps) / n
		res.LaunchesPerToken = float64(c1.Launches-c0.Launches) / n
		res.RoutedPerToken = float64(c1.RoutedLayers-c0.RoutedLayers) / n
	}()
	if step == "prefill" || step == "prefill-streamed" {
		before := r.Cache.Stats()
		stop, err := cpuProfile(step)
		if err != nil {
			return err
		}
		t0 := time.Now()
		_, _, err = s.Feed(ctx, benchpack.RandomTokens(c.Prompt, V, 5))
		el := time.Since(t0)
		stop()
		if err != nil {
			return err
		}
		st := r.Cache.Stats()
		res.Tokens, res.Seconds, res.TokPerSec = c.Prompt, el.Seconds(), float64(c.Prompt)/el.Seconds()
		res.BytesPerToken = float64(st.BytesRead-before.BytesRead) / float64(c.Prompt)
		res.RequestsPerToken = float64(st.Requests-before.Requests) / float64(c.Prompt)
		res.PeakRSS = runner.PeakRSS()
		return nil
	}
	// Sampling at temperature 1 from the random model's logits gives varied
	// tokens, so routing does not settle into a loop; top-k 64 and top-p
	// 0.95 as Gemma 4's generation_config.json has them (a model's own
	// defaults; without a top-k, drawing from the whole vocabulary costs
	// the host about 1 ms per token at 32K entries, as much as the GPU's
	// decode step).
	gen := runner.GenOptions{Sample: sample.Params{Temperature: 1, TopK: 64, TopP: 0.95, Seed: 42}, MaxNew: 8}
	prompt := 16
	if step == "resident" {
		prompt = c.Context // a long one measures decode at a long context
	}
	if _, err := s.Generate(ctx, benchpack.RandomTokens(prompt, V, 3), gen); err != nil {
		return err
	}
	gen.MaxNew = c.Tokens + 1
	c0, _ = cudaCounters(be) // the measured tokens only
	stop, err := cpuProfile(step)
	if err != nil {
		return err
	}
	kp, profiling := be.(kernelProfiler)
	if profiling {
		kp.ResetProfile()
	}
	out, err := s.Generate(ctx, nil, gen)
	stop()
	if profiling {
		if p := kp.Profile(); p != "" {
			fmt.Fprintf(os.Stderr, "bench/gpu: %s, %d tokens: %s", step, c.Tokens+1, p)
		}
	}
	if err != nil {
		return err
	}
	st := out.DecodeCache
	res.Tokens, res.Seconds, res.TokPerSec = out.DecodeTokens, out.Decode.Seconds(), out.DecodeTokPerSec()
	res.TokensHash = tokensHash(out.Tokens)
	res.BytesPerToken, res.HitRate = out.BytesReadPerToken(), st.HitRate()
	if out.DecodeTokens > 0 {
		res.RequestsPerToken = float64(st.Requests) / float64(out.DecodeTokens)
	}
	res.PeakRSS = out.PeakRSS
	return nil
}

// gpuInfo measures the device's copy bandwidth and, where the backend
// measures one, its matmul rate.
func gpuInfo(be runtime.Backend, c config, res *stepResult) error {
	bw, ok := be.(copyBandwidther)
	if !ok {
		return fmt.Errorf("%s measures no copy bandwidth", res.Device)
	}
	var err error
	if res.CopyBps, err = bw.MeasureCopyBandwidth(c.CopyBytes, 10); err != nil {
		return fmt.Errorf("copy bandwidth: %w", err)
	}
	res.MatMulFlops, res.MatMulNote = matMulRate(be)
	return nil
}

// cpuProfile writes a CPU profile of the measured decode or prefill to
// $QPACK_BENCH_CPUPROFILE/<step>.pprof when that is set (where the host's
// time per token goes); the returned function ends it.
func cpuProfile(step string) (func(), error) {
	dir := os.Getenv("QPACK_BENCH_CPUPROFILE")
	if dir == "" {
		return func() {}, nil
	}
	// A new file: an existing one (not this run's) is never replaced.
	f, err := os.OpenFile(filepath.Join(dir, step+".pprof"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// kernelProfiler is the CUDA backend's kernel profile
// (QPACK_CUDA_PROFILE=1): reset before the measured tokens, printed after.
type kernelProfiler interface {
	ResetProfile()
	Profile() string
}

// tokensHash is TokensHash's FNV-1a of ids, each as 4 little-endian bytes.
func tokensHash(ids []int) string {
	h := fnv.New64a()
	var b [4]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:])
	}
	return fmt.Sprintf("%016x", h.Sum64())
}
