package cuda

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The queued step's first measurements (cuda/README.md, "Next": the GPU
// waiting on a flag in mapped host memory for the next token, so that the
// next step's work is queued before the host has drawn it). Two facts
// decide whether that design can work and what it gains:
//
//   - BenchmarkFlagReleaseGPU: how soon the GPU goes on after the host sets
//     the flag (cuStreamWaitValue32 on the compute stream, then a kernel
//     that writes a word of mapped memory the host polls), against a launch
//     of the same kernel on an idle stream (what a step's first queue costs
//     now, less the host's work before it).
//   - BenchmarkFreeWhileGatedGPU: whether the driver calls the Layer makes
//     between steps (a device free, a device allocation, a pinned
//     allocation and free, a query of the stream) return while the stream
//     waits on a flag no one has set, or wait for the stream: any that
//     waits would hang a queued step's host (it sets the flag only later).
//
// The probe kernel is this file's own module, compiled on a device opened
// for the benchmark alone (as persistent_probe's); neither is the
// backend's Source() or recorded.

// One parameter struct, as every kernel of the backend takes (launch
// passes its bytes as the kernel's single parameter). The twenty-ninth
// session's kernel took (done, v) as two parameters: v was read from past
// the launch's one-entry argument array, so the kernel wrote a word the
// host never waited for, and neither the gated run nor (thirtieth
// session) the warm-up saw it.
const flagProbeSource = `
struct DoneP {
    unsigned* done;
    unsigned v;
    unsigned pad;
};
static_assert(sizeof(DoneP) == 16, "DoneP layout");

extern "C" __global__ void probe_done(DoneP p) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        *(volatile unsigned*)p.done = p.v;
        asm volatile("membar.sys;" ::: "memory");
    }
}
`

// Stream memory operations (cuStreamWaitValue32's flags).
const (
	streamWaitValueGEQ = 0x0
)

// flagProbe opens a device for a flag probe: the probe kernel, the
// stream-wait symbol, and one page of mapped pinned memory whose word 0 is
// the flag and word 16 the kernel's done word.
func flagProbe(b *testing.B) (g *gpu, fn uintptr, flag, word *uint32, flagDev, doneDev devptr) {
	b.Helper()
	g, _ = probeDevice(b, flagProbeSource, "flagprobe.cu")
	f, err := g.function("probe_done")
	if err != nil {
		b.Fatal(err)
	}
	p, err := purego.Dlsym(g.drv.h, "cuStreamWaitValue32_v2")
	if err != nil || p == 0 {
		b.Skipf("the driver has no cuStreamWaitValue32_v2: %v", err)
	}
	g.drv.fn["cuStreamWaitValue32_v2"] = p
	h, d, err := g.hostAlloc(4096)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.hostFree(h) })
	flag = (*uint32)(unsafe.Pointer(&h[0]))
	word = (*uint32)(unsafe.Pointer(&h[64]))
	return g, f, flag, word, d, d + 64
}

// waitFlag queues a wait on the compute stream until the flag at p is at
// least v.
func (g *gpu) waitFlag(p devptr, v uint32) error {
	g.queueOn(computeStream)
	return g.do(func() error {
		return g.call("cuStreamWaitValue32_v2", g.stream, uintptr(p), uintptr(v), streamWaitValueGEQ)
	})
}

// spinWord polls w until it holds v, for at most limit (spinUntil).
func spinWord(w *uint32, v uint32, limit time.Duration) bool {
	ok, _ := spinUntil(limit, func() (bool, error) { return atomic.LoadUint32(w) == v, nil })
	return ok
}

// probeDone queues the probe kernel f, which writes v into the done word.
func probeDone(g *gpu, f uintptr, done devptr, v uint32) error {
	return g.launch(f, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, params(nil).ptr(done).u32(int(v)).u32(0))
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func BenchmarkFlagReleaseGPU(b *testing.B) {
	g, f, flag, done, flagDev, doneDev := flagProbe(b)
	// The kernel runs once before any gate (its first launch loads the
	// module), and the host checks that its word arrives.
	warm := atomic.LoadUint32(done) + 1
	if err := probeDone(g, f, doneDev, warm); err != nil {
		b.Fatal(err)
	}
	if err := g.sync(); err != nil {
		b.Fatal(err)
	}
	if !spinWord(done, warm, time.Second) {
		b.Fatal("the probe kernel did not run on an idle stream within 1 s")
	}
	const n = 200
	for range b.N {
		var gated, launched []time.Duration
		v := atomic.LoadUint32(done)
		for i := range 2 * n {
			v++
			if i%2 == 0 {
				// Gated: the wait and the kernel queued, the GPU idle at
				// the wait (100 µs), then the flag set.
				if err := g.waitFlag(flagDev, v); err != nil {
					b.Fatal(err)
				}
				if err := probeDone(g, f, doneDev, v); err != nil {
					b.Fatal(err)
				}
				time.Sleep(100 * time.Microsecond)
				t0 := time.Now()
				atomic.StoreUint32(flag, v)
				if !spinWord(done, v, time.Second) {
					b.Fatalf("the kernel behind the flag did not run within 1 s of the flag's %d", v)
				}
				gated = append(gated, time.Since(t0))
			} else {
				// Launched: the same kernel queued on the idle stream.
				t0 := time.Now()
				if err := probeDone(g, f, doneDev, v); err != nil {
					b.Fatal(err)
				}
				if !spinWord(done, v, time.Second) {
					b.Fatal("the launched kernel did not run within 1 s")
				}
				launched = append(launched, time.Since(t0))
			}
			if err := g.sync(); err != nil {
				b.Fatal(err)
			}
		}
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		b.ReportMetric(us(median(gated)), "gated_us")
		b.ReportMetric(us(median(launched)), "launched_us")
		b.Logf("%s: from the host's store of the flag to the gated kernel's word seen by the host, median %.2f µs; a launch on the idle stream to its word, median %.2f µs (%d each)",
			g.name(), us(median(gated)), us(median(launched)), n)
	}
}

func BenchmarkFreeWhileGatedGPU(b *testing.B) {
	g, _, flag, _, flagDev, _ := flagProbe(b)
	for range b.N {
		v := atomic.LoadUint32(flag) + 1
		spare, err := g.memAlloc(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		var later []devptr // allocated while gated, freed after
		if err := g.waitFlag(flagDev, v); err != nil {
			b.Fatal(err)
		}
		for _, c := range []struct {
			name string
			call func() error
		}{
			{"cuMemAlloc", func() error {
				p, err := g.memAlloc(1 << 20)
				if err == nil {
					later = append(later, p)
				}
				return err
			}},
			{"cuMemFree", func() error { return g.memFree(spare) }},
			{"cuMemHostAlloc and cuMemFreeHost", func() error {
				h, _, err := g.hostAlloc(1 << 16)
				if err != nil {
					return err
				}
				return g.hostFree(h)
			}},
			{"cuStreamQuery", func() error {
				_, err := g.query("cuStreamQuery", g.stream)
				return err
			}},
		} {
			res := make(chan error, 1)
			t0 := time.Now()
			go func() { res <- c.call() }()
			select {
			case err := <-res:
				b.Logf("%s while the stream waits on a flag: returned after %v (%v)", c.name, time.Since(t0), err)
			case <-time.After(2 * time.Second):
				b.Logf("%s while the stream waits on a flag: still waiting after 2 s (it waits for the stream); the flag set", c.name)
				atomic.StoreUint32(flag, v)
				err := <-res
				b.Logf("%s returned %v after the call began, the flag set at 2 s (%v)", c.name, time.Since(t0), err)
				v++
				if err := g.waitFlag(flagDev, v); err != nil {
					b.Fatal(err)
				}
			}
		}
		atomic.StoreUint32(flag, v)
		if err := g.sync(); err != nil {
			b.Fatal(fmt.Errorf("the stream after the flag: %w", err))
		}
		for _, p := range later {
			g.memFree(p)
		}
	}
}

// TestFlagProbeSourceClang: the flag probe's kernel compiles (clang's CUDA
// front end), so a device call is not spent on a syntax error.
func TestFlagProbeSourceClang(t *testing.T) {
	checkProbePTX(t, flagProbeSource, "probe_done")
}
