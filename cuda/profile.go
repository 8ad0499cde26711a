package cuda

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// The kernel profiler (QPACK_CUDA_PROFILE=1): every kernel launch, and
// every copy and memset on the compute stream (profiledCopies), is
// bracketed by two timing events on that stream, and the GPU time
// between them is summed per kernel (per kind of copy); Backend.Close
// logs the table (and Profile returns it). It costs two event records per launch and turns
// CUDA graphs off, so it measures where the GPU's time goes, not the
// decode rate.
const profileEnv = "QPACK_CUDA_PROFILE"

// kernelTimer is a device whose events can time work (device_linux.go).
type kernelTimer interface {
	newTimingEvent() (event, error)
	elapsed(from, to event) (float32, error) // milliseconds; to has completed
}

type profiler struct {
	t       kernelTimer
	pending []profiled
	free    []event
	total   map[string]*kernelTime
	fastest float64 // ms, the shortest launch seen (-1: none yet)
}

type profiled struct {
	kernel   string
	from, to event
	copy     bool // a copy or memset (profiledCopies), not a kernel
}

type kernelTime struct {
	n  int
	ms float64
}

func newProfiler(dev device) *profiler {
	t, ok := dev.(kernelTimer)
	if !ok || os.Getenv(profileEnv) != "1" {
		return nil
	}
	return &profiler{t: t, total: map[string]*kernelTime{}, fastest: -1}
}

// bracket runs work between two timing events (from free, or new)
// recorded on d's compute stream.
func bracket(d device, t kernelTimer, free *[]event, work func() error) (from, to event, err error) {
	if from, err = reuseEvent(t, free); err != nil {
		return
	}
	if to, err = reuseEvent(t, free); err != nil {
		return
	}
	if err = d.record(from, computeStream); err != nil {
		return
	}
	if err = work(); err != nil {
		return
	}
	err = d.record(to, computeStream)
	return
}

// reuseEvent takes a timing event from free, or makes one when it is empty.
func reuseEvent(t kernelTimer, free *[]event) (event, error) {
	if n := len(*free); n > 0 {
		e := (*free)[n-1]
		*free = (*free)[:n-1]
		return e, nil
	}
	return t.newTimingEvent()
}

// around times launch (b.mu held).
func (p *profiler) around(b *Backend, kernel string, launch func() error) error {
	return p.aroundOn(b.dev, kernel, false, launch)
}

// aroundOn times work queued on d's compute stream as what.
func (p *profiler) aroundOn(d device, what string, copy bool, work func() error) error {
	from, to, err := bracket(d, p.t, &p.free, work)
	if err != nil {
		return err
	}
	p.pending = append(p.pending, profiled{what, from, to, copy})
	if len(p.pending) >= 1024 {
		return p.collectOn(d)
	}
	return nil
}

// profiledCopies is the device under the kernel profiler: the compute
// stream's copies and memsets are timed as the kernels are ("htod",
// "dtod" and "memset" in the table: a decode step's embedding row, its
// arena's reset), everything else passes through.
type profiledCopies struct {
	device
	p *profiler
}

func (d *profiledCopies) htod(dst devptr, src []byte) error {
	return d.p.aroundOn(d.device, "htod", true, func() error { return d.device.htod(dst, src) })
}

func (d *profiledCopies) htodOn(s stream, dst devptr, src []byte) error {
	if s != computeStream {
		return d.device.htodOn(s, dst, src)
	}
	return d.htod(dst, src)
}

func (d *profiledCopies) dtod(dst, src devptr, n int) error {
	return d.p.aroundOn(d.device, "dtod", true, func() error { return d.device.dtod(dst, src, n) })
}

func (d *profiledCopies) memset(dst devptr, n int) error {
	return d.p.aroundOn(d.device, "memset", true, func() error { return d.device.memset(dst, n) })
}

// collect waits for the stream and adds up the pending launches.
func (p *profiler) collect(b *Backend) error { return p.collectOn(b.dev) }

func (p *profiler) collectOn(d device) error {
	if len(p.pending) == 0 {
		return nil
	}
	if err := d.sync(); err != nil {
		return err
	}
	for _, q := range p.pending {
		ms, err := p.t.elapsed(q.from, q.to)
		if err != nil {
			return err
		}
		kt := p.total[q.kernel]
		if kt == nil {
			kt = &kernelTime{}
			p.total[q.kernel] = kt
		}
		kt.n++
		kt.ms += float64(ms)
		if !q.copy && (p.fastest < 0 || float64(ms) < p.fastest) {
			p.fastest = float64(ms)
		}
		p.free = append(p.free, q.from, q.to)
	}
	p.pending = p.pending[:0]
	return nil
}

// Profile returns the kernel profile so far (QPACK_CUDA_PROFILE=1), most
// GPU time first, the submission timeline (QPACK_CUDA_PROFILE=graphs), or
// "" when neither is on.
func (b *Backend) Profile() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.profileLocked()
}

func (b *Backend) profileLocked() string {
	p := b.prof
	if p == nil {
		if b.tl == nil {
			return ""
		}
		if err := b.tl.collect(b.dev); err != nil {
			return "cuda timeline: " + err.Error()
		}
		return b.tl.String()
	}
	if err := p.collect(b); err != nil {
		return "cuda profile: " + err.Error()
	}
	type row struct {
		k string
		t *kernelTime
	}
	var rows []row
	var all float64
	for k, t := range p.total {
		rows = append(rows, row{k, t})
		all += t.ms
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].t.ms > rows[j].t.ms })
	var s strings.Builder
	fmt.Fprintf(&s, "cuda kernel profile: %.3f ms of GPU time in kernels\n", all)
	for _, r := range rows {
		fmt.Fprintf(&s, "  %-18s %8d launches %10.3f ms %5.1f%% %8.2f us each\n", r.k, r.t.n, r.t.ms, 100*r.t.ms/max(all, 1e-9), 1000*r.t.ms/float64(r.t.n))
	}
	if p.fastest >= 0 {
		// A launch's time runs from its first event to its second, so it
		// includes the host's cost of issuing it whenever the GPU waits
		// for the host: the fastest launch bounds that floor.
		fmt.Fprintf(&s, "  (each figure includes the time between a launch's two events, the host's issue cost when the GPU waits for it; the fastest launch took %.2f us)\n", 1000*p.fastest)
	}
	return s.String()
}

// logProfile writes the profile to stderr (asked for by the environment,
// like a CPU profile; not a log record).
func (b *Backend) logProfile() {
	if s := b.profileLocked(); s != "" {
		fmt.Fprint(os.Stderr, s)
	}
}

// release frees the profiler's events (streams idle after collect).
func (p *profiler) release(b *Backend) error {
	err := p.collect(b)
	for _, e := range p.free {
		if e2 := b.dev.freeEvent(e); err == nil {
			err = e2
		}
	}
	p.free = nil
	return err
}

// ResetProfile forgets the kernel profile so far (a measurement's start).
func (b *Backend) ResetProfile() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.prof != nil {
		b.prof.collect(b)
		clear(b.prof.total)
		b.prof.fastest = -1
	}
	if b.tl != nil {
		b.tl.reset(b.dev)
	}
}
