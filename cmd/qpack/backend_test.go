package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/cuda"
	"github.com/qpack-go/qpack/metal"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/nn"
	"github.com/qpack-go/qpack/runtime/runner"
)

func TestSelectBackend(t *testing.T) {
	for _, name := range []string{"", "cpu"} {
		b, err := selectBackend(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := b.(runtime.CPU); !ok {
			t.Fatalf("%q gave %T", name, b)
		}
		if got := describeBackend(b).String(); got != "cpu" {
			t.Errorf("%q described as %q", name, got)
		}
	}
	for _, name := range []string{"gpu", "CUDA", "cpu ", "metal,cuda"} {
		_, err := selectBackend(name)
		if err == nil || !strings.Contains(err.Error(), "want cpu, metal, cuda or auto") || exitCode(err) != exitUsage {
			t.Errorf("%q: %v (exit %d), want the choices and exit 2", name, err, exitCode(err))
		}
	}
}

func TestAutoOrder(t *testing.T) {
	for goos, want := range map[string]string{"darwin": "metal", "linux": "cuda", "windows": "", "freebsd": ""} {
		if got := autoOrder(goos); got != want {
			t.Errorf("auto on %s tries %q, want %q", goos, got, want)
		}
		if want != "" && gpuOpeners[want] == nil {
			t.Errorf("auto on %s names %q, which has no opener", goos, want)
		}
	}
}

// A GPU backend that is not there is the user's choice (exit 2) and says
// what to use; any other failure to open one is the work failing (exit 1).
func TestBackendErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int
		want []string
	}{
		{"cuda", cuda.ErrNoDevice, exitUsage, []string{"--backend cuda:", "use --backend cpu", "QPACK_CUDA_DRIVER"}},
		{"cuda", &cuda.Error{Call: "cuInit", Code: 100, Name: "CUDA_ERROR_NO_DEVICE"}, exitUsage, []string{"CUDA_ERROR_NO_DEVICE"}},
		{"cuda", &cuda.Error{Call: "nvrtcCompileProgram", Code: 6, Name: "NVRTC_ERROR_COMPILATION"}, exitFailure, []string{"--backend cuda:", "nvrtcCompileProgram"}},
		{"metal", metal.ErrUnsupported, exitUsage, []string{"--backend metal:", "use --backend cpu"}},
		{"metal", errors.New("metal: no kernel gemv"), exitFailure, []string{"no kernel gemv"}},
	} {
		err := backendError(tc.name, tc.err)
		if got := exitCode(err); got != tc.code {
			t.Errorf("%s %v: exit %d, want %d", tc.name, tc.err, got, tc.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.name, err, w)
			}
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: message is not one line: %q", tc.name, err)
		}
	}
}

func TestDescribeBackend(t *testing.T) {
	if describeBackend(nil) != nil {
		t.Error("nil backend described")
	}
	i := &backendInfo{Name: "cuda", Device: "NVIDIA H200 (sm_90, 132 SMs)", Launches: 7, Fallbacks: 1}
	if got, want := i.String(), "cuda (NVIDIA H200 (sm_90, 132 SMs), one product at a time, 7 kernel launches, 1 CPU fallbacks)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	i.Layers, i.HostLayerOps, i.Fallbacks = true, 2, 0
	if got, want := i.String(), "cuda (NVIDIA H200 (sm_90, 132 SMs), whole layers on the device, 2 layer ops on the host, 7 kernel launches, 0 CPU fallbacks)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (&backendInfo{Name: "metal", Device: "Apple M3"}).String(); got != "metal (Apple M3)" {
		t.Errorf("metal: %q", got)
	}
}

// layeredStub is a backend with a whole-layer device (a GPU's shape).
type layeredStub struct{ runtime.CPU }

func (layeredStub) LayerDevice() nn.Device { return nn.HostDevice{} }

type chunkFlags struct {
	set bool
	n   int
}

func (f chunkFlags) IsSet(string) bool { return f.set }
func (f chunkFlags) Int(string) int    { return f.n }

// Without --prefill-chunk a GPU that runs whole layers gets the larger
// chunk (4,096; the server 1,024); the CPU keeps the runner's default; a
// given flag always wins.
func TestPrefillChunkDefault(t *testing.T) {
	def := chunkFlags{n: runner.DefaultPrefillChunk}
	for _, gpu := range []int{gpuPrefillChunk, gpuServePrefillChunk} {
		if got := prefillChunk(def, runtime.CPU{}, gpu); got != runner.DefaultPrefillChunk {
			t.Errorf("cpu: %d", got)
		}
		if got := prefillChunk(def, layeredStub{}, gpu); got != gpu {
			t.Errorf("gpu: %d, want %d", got, gpu)
		}
		if got := prefillChunk(chunkFlags{set: true, n: 64}, layeredStub{}, gpu); got != 64 {
			t.Errorf("gpu with --prefill-chunk 64: %d", got)
		}
	}
	if gpuPrefillChunk != 4096 || gpuServePrefillChunk != 1024 {
		t.Errorf("defaults %d and %d, the flags' usage says 4096 and 1024", gpuPrefillChunk, gpuServePrefillChunk)
	}
}

// cacheStub records SetExpertCacheBytes (cuda's device expert cache).
type cacheStub struct {
	runtime.CPU
	n   int64
	set bool
}

func (c *cacheStub) SetExpertCacheBytes(n int64) { c.n, c.set = n, true }

// --gpu-expert-cache reaches a backend with a device expert cache ("0":
// none, which its API spells negative), leaves it alone for auto, and is a
// usage error with a backend that has none or with a bad size.
func TestGPUExpertCacheFlag(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int64
		set  bool
	}{{"auto", 0, false}, {"", 0, false}, {"0", -1, true}, {"2GiB", 2 << 30, true}} {
		s := &cacheStub{}
		if err := applyGPUExpertCache(c.v, s); err != nil {
			t.Fatalf("%q: %v", c.v, err)
		}
		if s.set != c.set || s.n != c.want {
			t.Errorf("%q: set %v to %d, want %v %d", c.v, s.set, s.n, c.set, c.want)
		}
	}
	for _, c := range []struct {
		v  string
		be runtime.Backend
	}{{"1GiB", runtime.CPU{}}, {"lots", &cacheStub{}}} {
		err := applyGPUExpertCache(c.v, c.be)
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--gpu-expert-cache") {
			t.Errorf("%q on %T: %v (exit %d)", c.v, c.be, err, exitCode(err))
		}
	}
	// From the CLI: refused before the model is loaded.
	_, stderr, code := runMain(t, "generate", "../../testdata/tiny/qwen3_next-q4g64", "--prompt", "hi", "--gpu-expert-cache", "1GiB")
	if code != exitUsage || !strings.Contains(stderr, "only cuda does") {
		t.Errorf("generate --gpu-expert-cache on cpu: exit %d\n%s", code, stderr)
	}
}

// A failure whose cause is the GPU's memory, however wrapped, is followed
// by a line saying what takes that memory and which flags make it
// smaller; other errors, and the driver's other results, are not.
func TestGPUMemoryHint(t *testing.T) {
	oom := fmt.Errorf("generate: layer 3: %w", fmt.Errorf("cuda layer Temp(1048576): %w",
		&cuda.Error{Call: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}))
	for _, c := range []struct {
		err  error
		hint bool
	}{
		{oom, true},
		{fmt.Errorf("x: %w", &cuda.Error{Call: "cuLaunchKernel", Code: 1, Name: "CUDA_ERROR_INVALID_VALUE"}), false},
		{fmt.Errorf("x: %w", &cuda.Error{Call: "nvrtcCompileProgram", Code: 2, Name: "NVRTC_ERROR_PROGRAM_CREATION_FAILURE"}), false},
		{errors.New("out of memory"), false},
	} {
		var out strings.Builder
		if code := exitStatus(&out, c.err); code != exitFailure {
			t.Errorf("%v: exit %d", c.err, code)
		}
		if got := strings.Contains(out.String(), "--gpu-expert-cache") && strings.Contains(out.String(), "--prefill-chunk"); got != c.hint {
			t.Errorf("%v: hint %v, want %v:\n%s", c.err, got, c.hint, out.String())
		}
	}
}
