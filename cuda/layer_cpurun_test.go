package cuda

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/internal/gpukernels/cpurun"
	"github.com/qpack-go/qpack/runtime/nn/devicetest"
)

// cpuDev (layer_kernels_test.go) needs no streams or events: its launches
// run at once.
func (d *cpuDev) htodOn(_ stream, dst devptr, src []byte) error { return d.htod(dst, src) }
func (d *cpuDev) memset(dst devptr, n int) error                { clear(d.at(dst, n)); return nil }
func (d *cpuDev) newEvent() (event, error)                      { return 1, nil }
func (d *cpuDev) record(event, stream) error                    { return nil }
func (d *cpuDev) waitEvent(stream, event) error                 { return nil }
func (d *cpuDev) eventSync(event) error                         { return nil }
func (d *cpuDev) freeEvent(event) error                         { return nil }
func (d *cpuDev) memInfo() (int64, int64, error)                { return 1 << 30, 2 << 30, nil }
func (d *cpuDev) syncAll() error                                { return nil }

// cpuRunDev is the fake device with the real whole-layer kernels: their
// shared bodies compiled for the CPU (cpurun: real barriers and simdgroup
// reductions, a guard page after each buffer). The gemv kernels (CUDA
// only) stay the fake's CPU products. So the Layer's use of the kernels
// (addresses, extents, layouts, the KV rows) meets the kernel authors'
// arithmetic before any GPU does.
type cpuRunDev struct {
	*fakeDev
	h *cpurun.Harness
}

// allocOf returns the allocation holding device address p.
func (f *fakeDev) allocOf(p devptr) (devptr, []byte) {
	for _, m := range []map[devptr][]byte{f.dev, f.host} {
		for base, b := range m {
			if p >= base && p < base+devptr(len(b)) {
				return base, b
			}
		}
	}
	f.t.Fatalf("device address %#x is in no allocation", p)
	return 0, nil
}

func (d *cpuRunDev) launch(fn uintptr, grid, block [3]uint32, p []byte) error {
	k := kernelNames[fn-1]
	nptr, ok := layerKernelPtrs[k]
	if !ok {
		return d.fakeDev.launch(fn, grid, block, p)
	}
	if d.fail != nil {
		return d.fail
	}
	if block != [3]uint32{tgThreads, 1, 1} || grid[1] != 1 || grid[2] != 1 {
		d.t.Fatalf("%s: grid %v block %v", k, grid, block)
	}
	// One harness buffer per allocation the pointers address, from the
	// lowest of them to the allocation's end, so that aliasing views stay
	// aliased.
	type span struct {
		base, lo devptr
		mem      []byte
		idx      int
	}
	var spans []*span
	q := append([]byte(nil), p...)
	find := func(a devptr) *span {
		base, mem := d.allocOf(a)
		for _, s := range spans {
			if s.base == base {
				s.lo = min(s.lo, a)
				return s
			}
		}
		s := &span{base: base, lo: a, mem: mem}
		spans = append(spans, s)
		return s
	}
	ptrs := make([]*span, nptr)
	for i := range nptr {
		if a := binary.LittleEndian.Uint64(q[8*i:]); a != 0 {
			ptrs[i] = find(a)
		}
	}
	bufs := make([][]byte, len(spans))
	for i, s := range spans {
		s.idx = i
		bufs[i] = s.mem[s.lo-s.base:]
	}
	for i, s := range ptrs {
		if s != nil {
			a := binary.LittleEndian.Uint64(q[8*i:])
			binary.LittleEndian.PutUint64(q[8*i:], cpurun.Addr(s.idx, int(a-s.lo)))
		}
	}
	d.launches = append(d.launches, k)
	return d.h.Launch(k, int(grid[0]), q, bufs)
}

func cpuRunBackend(t *testing.T) *Backend {
	t.Helper()
	h, err := cpurun.Build(t.TempDir())
	if errors.Is(err, cpurun.ErrNoCompiler) {
		t.Skip("g++ not installed: the CPU run of the kernel bodies needs it")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return testBackend(t, &cpuRunDev{fakeDev: newFake(t), h: h})
}

// The conformance suite over the Layer with the real kernel bodies (on the
// CPU), within the CUDA bounds.
func TestDeviceConformanceCPURun(t *testing.T) {
	b := cpuRunBackend(t)
	devicetest.Ops(t, b.LayerDevice(), devicetest.DefaultTolerances())
	if s := b.Stats(); s.HostOps != 0 {
		t.Errorf("%d ops on the host path", s.HostOps)
	}
}

// Tiny models over the Layer with the real kernel bodies (on the CPU)
// against the CPU backend: 1e-4 for float32 weights, 1e-3 quantized. Every
// launch ships its buffers through the executor's pipe, so by default two
// small models run (about 45 s on 2 cores); QPACK_CUDA_CPURUN=all runs
// every model.
func TestLayerTinyModelsCPURun(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: every kernel launch ships its buffers to the executor")
	}
	only := []string{"gemma4-towers-q4g64", "qwen3_5_moe-q4g32"}
	if os.Getenv("QPACK_CUDA_CPURUN") == "all" {
		only = nil
	}
	compareTiny(t, func(t *testing.T) *Backend { return cpuRunBackend(t) }, func(name string) float64 {
		if strings.HasSuffix(name, "-f32") {
			return 1e-4
		}
		return 1e-3
	}, only...)
}
