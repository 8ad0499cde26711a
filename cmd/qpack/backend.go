package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	goruntime "runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/qpack-go/qpack/cuda"
	"github.com/qpack-go/qpack/metal"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/expertcache"
	"github.com/qpack-go/qpack/runtime/nn"
)

// backendChoices is what --backend accepts, for the help text and the
// error of an unknown name.
const backendChoices = "cpu, metal, cuda or auto"

// backendFlag is the --backend flag of the commands that run a model
// (generate, chat, logits, serve).
func backendFlag() cli.Flag {
	return &cli.StringFlag{Name: "backend", Value: "cpu",
		Usage: "compute backend: " + backendChoices + ". cpu: pure Go, every platform; metal: Apple GPU, macOS; " +
			"cuda: NVIDIA GPU, Linux (the driver and NVRTC are loaded at run time); " +
			"auto: metal on macOS or cuda on Linux when a device opens, else cpu. With cuda the GPU keeps its own expert cache beside --expert-cache (--gpu-expert-cache)"}
}

// gpuOpeners open the GPU backends --backend names, returning the backend
// and its device's name.
var gpuOpeners = map[string]func() (runtime.Backend, string, error){
	"metal": func() (runtime.Backend, string, error) {
		b, err := metal.New()
		if err != nil {
			return nil, "", err
		}
		return b, b.Name(), nil
	},
	"cuda": func() (runtime.Backend, string, error) {
		b, err := cuda.New()
		if err != nil {
			return nil, "", err
		}
		return b, b.Name(), nil
	},
}

// autoOrder is the GPU backend --backend auto tries on goos, if any.
func autoOrder(goos string) string {
	switch goos {
	case "darwin":
		return "metal"
	case "linux":
		return "cuda"
	}
	return ""
}

// backendError is a GPU backend that did not open. A missing device,
// driver or OS support is the user's choice of backend, so exit 2; any other
// failure (a kernel that does not compile) is the work failing, exit 1.
func backendError(name string, err error) error {
	code := exitFailure
	if errors.Is(err, cuda.ErrNoDevice) || errors.Is(err, metal.ErrUnsupported) {
		code = exitUsage
	}
	msg := fmt.Errorf("--backend %s: %w", name, err)
	if name == "cuda" && code == exitUsage {
		msg = fmt.Errorf("%w (QPACK_CUDA_DRIVER and QPACK_NVRTC name the libraries if they are installed elsewhere)", msg)
	}
	return withCode(code, msg)
}

// selectBackend returns the backend --backend names; its error carries the
// exit code. A backend that holds a device (metal, cuda) implements
// io.Closer: release it with closeBackend when the model is closed.
func selectBackend(name string) (runtime.Backend, error) {
	switch name {
	case "", "cpu":
		return runtime.CPU{}, nil
	case "auto":
		gpu := autoOrder(goruntime.GOOS)
		if gpu == "" {
			slog.Info("backend auto: cpu", "reason", "no GPU backend for "+goruntime.GOOS)
			return runtime.CPU{}, nil
		}
		b, dev, err := gpuOpeners[gpu]()
		if err != nil {
			slog.Info("backend auto: cpu", "reason", gpu+" did not open", "err", err)
			return runtime.CPU{}, nil
		}
		slog.Info("backend auto: "+gpu, "device", dev)
		return b, nil
	}
	open, ok := gpuOpeners[name]
	if !ok {
		return nil, withCode(exitUsage, fmt.Errorf("--backend %q: want %s", name, backendChoices))
	}
	b, dev, err := open()
	if err != nil {
		return nil, backendError(name, err)
	}
	slog.Debug("backend "+name, "device", dev)
	return b, nil
}

// backendInfo says which backend ran a command (the summary and --json
// "backend"): its name, the device, and for cuda what it launched and how
// many calls fell back to the CPU after a device error.
type backendInfo struct {
	Name     string `json:"name"`
	Device   string `json:"device,omitempty"`
	Launches int64  `json:"kernel_launches,omitempty"`
	// Layers: the model's layers ran on the backend's own whole-layer
	// device (activations, KV caches and states in device memory), not
	// one product at a time from host memory.
	Layers bool `json:"whole_layers"`
	// HostLayerOps counts layer ops the device ran on the host because no
	// kernel takes their shape (0 on the kernel path).
	HostLayerOps int64 `json:"host_layer_ops"`
	Fallbacks    int64 `json:"cpu_fallbacks"`
}

// describeBackend fills backendInfo from b, as it stands now.
func describeBackend(b runtime.Backend) *backendInfo {
	switch b := b.(type) {
	case *cuda.Backend:
		st := b.Stats()
		return &backendInfo{Name: "cuda", Device: b.Name(), Launches: st.Launches, Fallbacks: st.Fallbacks,
			Layers: b.LayerDevice() != nil, HostLayerOps: st.HostOps}
	case *metal.Backend:
		return &backendInfo{Name: "metal", Device: b.Name(), Layers: b.LayerDevice() != nil}
	case nil:
		return nil
	}
	return &backendInfo{Name: "cpu"}
}

// String is the summary's line, e.g. "cuda (NVIDIA H200 (sm_90, 132 SMs),
// whole layers on the device, 0 layer ops on the host, 812 kernel
// launches, 0 CPU fallbacks)".
func (i *backendInfo) String() string {
	switch {
	case i.Name == "cuda":
		how := "one product at a time"
		if i.Layers {
			how = fmt.Sprintf("whole layers on the device, %d layer ops on the host", i.HostLayerOps)
		}
		return fmt.Sprintf("cuda (%s, %s, %d kernel launches, %d CPU fallbacks)", i.Device, how, i.Launches, i.Fallbacks)
	case i.Device != "":
		return fmt.Sprintf("%s (%s)", i.Name, i.Device)
	}
	return i.Name
}

// gpuPrefillChunk is the prompt tokens per forward pass of generate and
// chat on a backend that runs whole layers on a GPU, when --prefill-chunk
// is not given. With the runner's default (128) each
// routed expert sees a few tokens of a chunk and its products stay one
// vector at a time; in larger chunks they are batched (the tensor-core
// kernels), and a chunk reads nearly every expert of each layer once,
// whatever its length, so with the experts streamed from disk a prompt's
// reads fall with the chunk's length. bench/gpu on the H100 (35B dims, 8
// layers, a 4,096-token prompt; BENCHMARKS.md, eleventh session): every
// expert resident, 20.9k tok/s in one chunk against 16.0k in chunks of
// 1,024; streamed through 5% caches, 1,875 tok/s (0.88 MB read a token)
// against 527 (3.4 MB).
const gpuPrefillChunk = 4096

// gpuServePrefillChunk is serve's: a session's state is saved at chunk
// boundaries only (so that a resumed prompt's logits equal a cold run's),
// and a conversation reuses the multiples of the chunk below its last
// prompt, so the server keeps a finer grain.
const gpuServePrefillChunk = 1024

// prefillChunk is --prefill-chunk when given, else gpuDefault on a backend
// that runs whole layers on a GPU, else the flag's default (the runner's).
func prefillChunk(l interface {
	IsSet(string) bool
	Int(string) int
}, be runtime.Backend, gpuDefault int) int {
	if l.IsSet("prefill-chunk") {
		return l.Int("prefill-chunk")
	}
	if d, ok := be.(nn.Layered); ok && d.LayerDevice() != nil {
		return gpuDefault
	}
	return l.Int("prefill-chunk")
}

// applyGPUExpertCache sets --gpu-expert-cache on a backend that keeps a
// device expert cache (cuda); "auto" leaves its default. Given with another
// backend, it is a usage error (exit 2): nothing would honour it.
func applyGPUExpertCache(v string, be runtime.Backend) error {
	if v == "" || v == "auto" {
		return nil
	}
	var n int64
	if strings.TrimSpace(v) != "0" {
		var err error
		if n, err = expertcache.ParseSize(v); err != nil {
			return withCode(exitUsage, fmt.Errorf("--gpu-expert-cache: %w", err))
		}
	}
	c, ok := be.(interface{ SetExpertCacheBytes(int64) })
	if !ok {
		return withCode(exitUsage, fmt.Errorf("--gpu-expert-cache %s: the %s backend keeps no expert cache of its own (only cuda does)", v, describeBackend(be).Name))
	}
	if n == 0 {
		n = -1 // SetExpertCacheBytes: negative keeps nothing, 0 is the default
	}
	c.SetExpertCacheBytes(n)
	return nil
}

// closeBackend releases what selectBackend opened, saying first if a GPU
// backend had to compute on the CPU after a device error.
func closeBackend(b runtime.Backend) {
	if cb, ok := b.(*cuda.Backend); ok && cb.Err() != nil {
		slog.Warn("cuda: calls were computed on the CPU after a device error", "fallbacks", cb.Stats().Fallbacks, "err", cb.Err())
	}
	if c, ok := b.(io.Closer); ok {
		if err := c.Close(); err != nil {
			slog.Warn("closing the backend", "err", err)
		}
	}
}
