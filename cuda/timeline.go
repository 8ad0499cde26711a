package cuda

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The submission timeline (QPACK_CUDA_PROFILE=graphs): the recorder stays
// on (graphs replayed as in a real run) and brackets every queue it submits
// (a graph launch or ops one by one) with two timing events on the compute
// stream. The GPU time inside the brackets is the queues' work; the time
// from one queue's closing event to the next queue's opening event is time
// the GPU spent outside the layers' queues: idle while the host prepared
// the next (queueing a layer, sampling, a download's wait) or running what
// the recorder does not queue (downloads). A decode step that is bound by
// its kernels shows small gaps; one bound by the host shows large ones.
// It costs the host two event records a queue (about 2 µs).
//
// The timeline also times the host's side of the gaps that follow a wait
// for the GPU (a download's, an event's): from the wait's end to the next
// op queued (a decode step: copying the logits out, sampling, the runner,
// the graph's preamble) and to that queue's submission (queueing the first
// layer). While the host does this the GPU has nothing to run.
const profileGraphs = "graphs"

// gapBounds are the upper bounds (µs) of the gap histogram's bins; the
// last bin has none.
var gapBounds = [...]float64{1, 5, 20, 100}

// labelsShown is how many kinds of queue (by their ops) the report lists.
const labelsShown = 24

type timeline struct {
	t       kernelTimer
	pending []submission
	free    []event
	prev    event // the last collected submission's closing event (0: none)

	queues, graphLaunches int
	ops                   int64
	inside, between       float64 // ms
	gapN                  [len(gapBounds) + 1]int
	gapMS                 [len(gapBounds) + 1]float64
	bySize                map[int]*kernelTime // GPU time inside queues by their ops (a layer's kind)
	byLabel               map[string]*queueTime
	names                 map[uintptr]string // kernel names by function, for the labels (nil: addresses)
	labels                map[uint64]string  // queueLabel by shapeHash: built once a shape, not at every submission

	// The host after a wait (see the type's comment): when the last wait
	// ended and the first op after it was queued (zero: none pending), and
	// the totals over the waits followed by a submission.
	waitEnd, firstOp    time.Time
	afterWaits          int
	toFirstOp, toSubmit time.Duration
	maxToSubmit         time.Duration

	// The host's path after a wait, point by point: from the first wait's
	// end after a submission (origin) to the points the Layer and the
	// recorder name (mark: the first of each name) and to the next
	// submission, summed by the label of the queue submitted (a decode
	// step's boundary: the selection's download, its parse, the pass's
	// end, the draw, the next step's embedding row and first ops, ending
	// in layer 0's first queue).
	origin time.Time
	marks  []hostMark // this boundary's, in order
	paths  map[string]*hostPath
}

// hostMark is a named point of the host's path after a wait.
type hostMark struct {
	name string
	at   time.Time
}

// hostPath sums the host's paths that ended in one kind of queue.
type hostPath struct {
	n      int
	submit time.Duration // from the origin to the submission
	sum    map[string]time.Duration
	count  map[string]int
}

// mean is a point's mean offset from the origin (µs) over the paths that
// passed it.
func (p *hostPath) mean(name string) float64 {
	return float64(p.sum[name].Nanoseconds()) / 1000 / float64(max(p.count[name], 1))
}

// pathsShown is how many kinds of queue the report gives the host's path
// before.
const pathsShown = 3

type submission struct {
	from, to event
	ops      int
	graph    bool
	label    string // the queue's ops in order (queueLabel)
}

// queueTime is the GPU time inside the queues of one label, and in the
// gaps just before them (what precedes a kind of queue: a decode step's
// boundary precedes its first layer's).
type queueTime struct {
	n          int
	ms, gapMS  float64
	firstIndex int // the label's first queue's index, for a stable order
}

// queueLabel names a queue by its ops: kernels by name, copies and
// memsets by kind, in order, a run of one name as "name xN".
func queueLabel(ops []recOp, names map[uintptr]string) string {
	var s strings.Builder
	name := func(op recOp) string {
		switch op.kind {
		case opLaunch:
			if n, ok := names[op.fn]; ok {
				return n
			}
			return fmt.Sprintf("fn%#x", op.fn)
		case opHtoD:
			return "htod"
		case opDtoD:
			return "dtod"
		}
		return "memset"
	}
	for i := 0; i < len(ops); {
		n, j := name(ops[i]), i+1
		for j < len(ops) && name(ops[j]) == n {
			j++
		}
		if i > 0 {
			s.WriteByte(' ')
		}
		s.WriteString(n)
		if j-i > 1 {
			fmt.Fprintf(&s, " x%d", j-i)
		}
		i = j
	}
	return s.String()
}

func newTimeline(dev device) *timeline {
	t, ok := dev.(kernelTimer)
	if !ok {
		return nil
	}
	return &timeline{t: t, bySize: map[int]*kernelTime{}, byLabel: map[string]*queueTime{}, labels: map[uint64]string{}, paths: map[string]*hostPath{}}
}

// waited notes that a wait for the GPU ended now.
func (tl *timeline) waited() {
	now := time.Now()
	tl.waitEnd, tl.firstOp = now, time.Time{}
	if tl.origin.IsZero() {
		tl.origin = now
	} else {
		tl.markAt("a later wait ends", now)
	}
}

// Mark implements runtime.Marker: a point of the host's path outside the
// backend (the runner's draw, Forward's entry) for the timeline's report.
func (b *Backend) Mark(point string) {
	if b.tl == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tl.mark(point)
}

// mark notes that the host passed the named point (only the first of each
// name after the boundary's first wait counts).
func (tl *timeline) mark(name string) {
	if !tl.origin.IsZero() {
		tl.markAt(name, time.Now())
	}
}

func (tl *timeline) markAt(name string, at time.Time) {
	for _, m := range tl.marks {
		if m.name == name {
			return
		}
	}
	tl.marks = append(tl.marks, hostMark{name, at})
}

// boundaryEnds adds this boundary's marks and its submission (at now, of
// a queue labelled label) to the sums.
func (tl *timeline) boundaryEnds(now time.Time, label string) {
	if tl.origin.IsZero() {
		return
	}
	p := tl.paths[label]
	if p == nil {
		p = &hostPath{sum: map[string]time.Duration{}, count: map[string]int{}}
		tl.paths[label] = p
	}
	for _, m := range tl.marks {
		p.sum[m.name] += m.at.Sub(tl.origin)
		p.count[m.name]++
	}
	p.n++
	p.submit += now.Sub(tl.origin)
	tl.origin, tl.marks = time.Time{}, tl.marks[:0]
}

// queued notes that an op was queued now.
func (tl *timeline) queued() {
	if !tl.waitEnd.IsZero() && tl.firstOp.IsZero() {
		tl.firstOp = time.Now()
	}
}

// submitted adds the host's time from the last wait to this submission
// (of a queue labelled label).
func (tl *timeline) submitted(label string) {
	now := time.Now()
	tl.boundaryEnds(now, label)
	if tl.waitEnd.IsZero() {
		return
	}
	first := tl.firstOp
	if first.IsZero() {
		first = now
	}
	tl.afterWaits++
	tl.toFirstOp += first.Sub(tl.waitEnd)
	d := now.Sub(tl.waitEnd)
	tl.toSubmit += d
	tl.maxToSubmit = max(tl.maxToSubmit, d)
	tl.waitEnd, tl.firstOp = time.Time{}, time.Time{}
}

// around brackets submit (a queue of n ops; graph: as a graph launch) with
// events recorded on d's compute stream.
func (tl *timeline) around(d device, ops []recOp, graph bool, submit func() error) error {
	h := shapeHash(ops)
	label, ok := tl.labels[h]
	if !ok {
		label = queueLabel(ops, tl.names)
		tl.labels[h] = label
	}
	tl.submitted(label)
	from, to, err := bracket(d, tl.t, &tl.free, submit)
	if err != nil {
		return err
	}
	tl.pending = append(tl.pending, submission{from, to, len(ops), graph, label})
	if len(tl.pending) >= 512 {
		return tl.collect(d)
	}
	return nil
}

// collect waits for the compute stream and adds up the pending queues.
func (tl *timeline) collect(d device) error {
	if len(tl.pending) == 0 {
		return nil
	}
	if err := d.sync(); err != nil {
		return err
	}
	for _, s := range tl.pending {
		ms, err := tl.t.elapsed(s.from, s.to)
		if err != nil {
			return err
		}
		tl.queues++
		tl.ops += int64(s.ops)
		if s.graph {
			tl.graphLaunches++
		}
		tl.inside += float64(ms)
		kt := tl.bySize[s.ops]
		if kt == nil {
			kt = &kernelTime{}
			tl.bySize[s.ops] = kt
		}
		kt.n++
		kt.ms += float64(ms)
		qt := tl.byLabel[s.label]
		if qt == nil {
			qt = &queueTime{firstIndex: tl.queues}
			tl.byLabel[s.label] = qt
		}
		qt.n++
		qt.ms += float64(ms)
		if tl.prev != 0 {
			gap, err := tl.t.elapsed(tl.prev, s.from)
			if err != nil {
				return err
			}
			tl.addGap(float64(gap))
			qt.gapMS += float64(gap)
			tl.free = append(tl.free, tl.prev)
		}
		tl.free = append(tl.free, s.from)
		tl.prev = s.to
	}
	tl.pending = tl.pending[:0]
	return nil
}

func (tl *timeline) addGap(ms float64) {
	tl.between += ms
	i := 0
	for i < len(gapBounds) && 1000*ms >= gapBounds[i] {
		i++
	}
	tl.gapN[i]++
	tl.gapMS[i] += ms
}

// reset forgets the totals (the pending queues are collected first, so
// the next gap is measured from a submission of the new period).
func (tl *timeline) reset(d device) {
	tl.collect(d)
	if tl.prev != 0 {
		tl.free = append(tl.free, tl.prev)
		tl.prev = 0
	}
	tl.queues, tl.graphLaunches, tl.ops = 0, 0, 0
	tl.inside, tl.between = 0, 0
	tl.gapN, tl.gapMS = [len(gapBounds) + 1]int{}, [len(gapBounds) + 1]float64{}
	clear(tl.bySize)
	clear(tl.byLabel)
	tl.waitEnd, tl.firstOp = time.Time{}, time.Time{}
	tl.afterWaits, tl.toFirstOp, tl.toSubmit, tl.maxToSubmit = 0, 0, 0, 0
	tl.origin, tl.marks = time.Time{}, tl.marks[:0]
	clear(tl.paths)
}

// release frees the timeline's events (the stream idle after collect).
func (tl *timeline) release(d device) error {
	err := tl.collect(d)
	if tl.prev != 0 {
		tl.free = append(tl.free, tl.prev)
		tl.prev = 0
	}
	for _, e := range tl.free {
		if e2 := d.freeEvent(e); err == nil {
			err = e2
		}
	}
	tl.free = nil
	return err
}

func (tl *timeline) String() string {
	var s strings.Builder
	span := tl.inside + tl.between
	fmt.Fprintf(&s, "cuda submission timeline: %d queues (%d graph launches, %d op by op, %.1f ops each) over %.3f ms of GPU time: %.3f ms inside them (%.1f%%), %.3f ms between them (%.1f%%: the GPU idle, or running a download, between the host's queues)\n",
		tl.queues, tl.graphLaunches, tl.queues-tl.graphLaunches, float64(tl.ops)/float64(max(tl.queues, 1)),
		span, tl.inside, 100*tl.inside/max(span, 1e-9), tl.between, 100*tl.between/max(span, 1e-9))
	if tl.queues > 0 {
		fmt.Fprintf(&s, "  %.2f us inside a queue on average\n", 1000*tl.inside/float64(tl.queues))
	}
	sizes := slices.Sorted(maps.Keys(tl.bySize))
	for _, n := range sizes {
		kt := tl.bySize[n]
		fmt.Fprintf(&s, "  queues of %3d ops: %6d, %9.3f ms inside, %8.2f us each\n", n, kt.n, kt.ms, 1000*kt.ms/float64(kt.n))
	}
	for i := range tl.gapN {
		lo, hi := "0", "inf"
		if i > 0 {
			lo = fmt.Sprint(gapBounds[i-1])
		}
		if i < len(gapBounds) {
			hi = fmt.Sprint(gapBounds[i])
		}
		fmt.Fprintf(&s, "  gaps of %s-%s us: %6d, %9.3f ms\n", lo, hi, tl.gapN[i], tl.gapMS[i])
	}
	// The kinds of queue that took the most GPU time (labelsShown of
	// them), in the order they first ran.
	labels := slices.SortedFunc(maps.Keys(tl.byLabel), func(a, b string) int {
		return cmp.Compare(tl.byLabel[b].ms+tl.byLabel[b].gapMS, tl.byLabel[a].ms+tl.byLabel[a].gapMS)
	})
	labels = labels[:min(len(labels), labelsShown)]
	slices.SortFunc(labels, func(a, b string) int { return cmp.Compare(tl.byLabel[a].firstIndex, tl.byLabel[b].firstIndex) })
	for _, l := range labels {
		qt := tl.byLabel[l]
		fmt.Fprintf(&s, "  %6d queues, %8.2f us inside each, %8.2f us in the gap before each: %s\n", qt.n, 1000*qt.ms/float64(qt.n), 1000*qt.gapMS/float64(qt.n), l)
	}
	if n := tl.afterWaits; n > 0 {
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(n) }
		fmt.Fprintf(&s, "  the host after a wait for the GPU (%d waits followed by a queue): %.1f us to the first op queued, %.1f us to its queue's submission (at most %.1f us)\n",
			n, us(tl.toFirstOp), us(tl.toSubmit), float64(tl.maxToSubmit.Nanoseconds())/1000)
	}
	// The host's path before the kinds of queue it kept the GPU waiting
	// for longest (pathsShown of them).
	kinds := slices.SortedFunc(maps.Keys(tl.paths), func(a, b string) int {
		return cmp.Compare(tl.paths[b].submit, tl.paths[a].submit)
	})
	for _, l := range kinds[:min(len(kinds), pathsShown)] {
		p := tl.paths[l]
		fmt.Fprintf(&s, "  the host's path from the first wait to the submission of %q (%d times; each point's mean in µs, and how often it was passed):", l, p.n)
		names := slices.SortedFunc(maps.Keys(p.sum), func(a, b string) int { return cmp.Compare(p.mean(a), p.mean(b)) })
		for _, name := range names {
			fmt.Fprintf(&s, " +%.1f %s (%d);", p.mean(name), name, p.count[name])
		}
		fmt.Fprintf(&s, " +%.1f submitted\n", float64(p.submit.Nanoseconds())/1000/float64(p.n))
	}
	return s.String()
}
