package cuda

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"unsafe"
)

// The recorder submits repeated work as CUDA graphs. A kernel launch costs
// the host 5-6 µs of driver time on the H200 machine (BenchmarkLaunchGPU),
// and a decode step queues about 160 of them; a CUDA graph launch costs
// about 1 µs per node. So the recorder, which stands between the Backend
// and the device, keeps the compute stream's submissions (launch, htod,
// dtod, memset) in a host queue until the Layer's Flush (the end of a
// layer), or something needs their results or orders another stream
// against them (a download, a wait, an event, the copy stream, a free);
// then it submits the queue:
//
//   - as the replay of a graph captured earlier when the queue has the
//     same ops (kinds, kernels, grids, copy addresses and sizes, in order;
//     the kernels' parameter bytes may differ and are set on the graph's
//     nodes first): a decode step's layers repeat the previous step's but
//     for the positions in RoPE's and attention's parameters;
//   - captured into a new graph (then launched) when a queue of its shape
//     was submitted op by op before (a decode step's, or one layer's when
//     something reads after each layer);
//   - else op by op, as without the recorder.
//
// Layers of one kind queue the same ops with other weights, states and
// scratch, so a graph of their shape could serve them all with every
// node's parameters set anew at each replay: 66-86 parameter sets a decode
// token on the tiny Qwen models (BenchmarkLayerHostFake), about 68 µs of
// the host's time a token on the H100 machine (eleventh session's CPU
// profile). So a graph also has an identity, the shape's hash and the
// first launch's parameters (a layer's first op reads its own weights: its
// norm), and a queue replays the graph of its identity when there is one,
// captures one when its identity was seen in one of the last identPasses
// passes (a decode step's layer, the second step on), and otherwise
// replays a graph of its shape with the parameters set (the one of the
// fewest differences) or goes op by op as above. A decode step's layer
// then sets only what moves with the position (RoPE's, attention's).
//
// Staged values (the token's embedding, index lists, a KV row list) are
// read by a graph's copy nodes from the same pinned staging addresses when
// the graph runs, so a replay sees this step's values. Any failure of the
// graph functions switches graphs off for the device (logged) and submits
// the queue op by op: no work is lost. QPACK_CUDA_GRAPHS=0 turns them off.

// graphMinOps is the shortest queue worth a graph: four launches op by op
// cost the host about as much as a graph launch. (It was 16, until the
// fused ops of layer_fused.go left a decode step's layers 10-14 ops each,
// which then went op by op: slower than before the fusion.)
const graphMinOps = 4

// maxGraphs is how many captured graphs a recorder keeps (the most
// recently used); maxSeen how many shapes of queues submitted op by op it
// remembers as candidates.
const (
	maxGraphs = 256 // a graph per layer (Layer.Flush submits each) and the head
	maxSeen   = 1024
)

// identPasses: a queue whose identity comes back within this many passes
// (syncAll: a Layer's EndPass) gets a graph of its own. A decode step's
// layers come back every pass. An identity that moves with the position
// (a queue whose first launch is a RoPE, after the early start's split:
// gemma4's layer 0) comes back only when the positions do, in another
// conversation hundreds of passes later: capturing it then would make a
// graph for one replay, and a state reset every 512 steps made 0.41
// captures a token of BenchmarkLayerHostFake on the tiny gemma4 (on the
// GPU a capture and an instantiation each); a replay of a graph of its
// shape sets the few nodes that differ instead.
const identPasses = 4

const graphsEnv = "QPACK_CUDA_GRAPHS"

// flushLayersEnv groups layers into one submission: the Layer's queue is
// submitted at every n-th Flush instead of every one (n =
// flushEveryDefault unless set), so that n layers replay as one graph.
// Between two graphs the GPU idles a few microseconds (the twenty-first
// session's timeline, H100: 3.9 µs before each DeltaNet layer's graph,
// 7.6 before each attention layer's); a longer queue leaves the GPU fewer
// of those gaps but starts later. Anything that reads a result or orders
// another stream against the queue still submits it first, so the
// grouping never changes what runs, only when it is submitted
// (TestGraphsGPU passes with 2). "step" never submits at Flush (a decode
// step becomes one queue, submitted when its logits are read): slower
// (1,268 against 1,426 tok/s on the H200, fourteenth session: the host no
// longer queues a layer while the GPU runs the one before).
const flushLayersEnv = "QPACK_CUDA_FLUSH_LAYERS"

// flushEveryDefault is two layers a graph: on the H200 in the fourteenth
// session even with one, on H100s in the twenty-first (resident decode,
// 35b dims, bench/gpu/results/session21-h100) 1,706 against 1,670 tok/s
// over three interleaved rounds and 1,700 against 1,666 over two more
// (+2.1%), and with the qknorm, rope and kv fusions 1,724 (+3.5%); four
// layers a graph 1,697.
const flushEveryDefault = 2

// flushEveryFor parses flushLayersEnv: a positive count of layers, or
// "step"; anything else is flushEveryDefault.
func flushEveryFor(v string) int {
	if v == "step" {
		return math.MaxInt
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	return flushEveryDefault
}

type opKind uint8

const (
	opLaunch opKind = iota
	opHtoD
	opDtoD
	opMemset
)

// recOp is one queued submission.
type recOp struct {
	kind        opKind
	fn          uintptr
	grid, block [3]uint32
	p0, p1      int    // launch: its parameter bytes, params[p0:p1]
	dst, src    devptr // copies and memset (htod: src unused)
	host        []byte // htod's source (pinned)
	n           int    // bytes
}

// replays reports whether b can replay as a: everything equal but the
// kernels' parameter bytes.
func (a *recOp) replays(b *recOp) bool {
	if a.kind != b.kind || a.n != b.n || a.dst != b.dst || a.src != b.src {
		return false
	}
	switch a.kind {
	case opLaunch:
		return a.fn == b.fn && a.grid == b.grid && a.block == b.block && a.p1-a.p0 == b.p1-b.p0
	case opHtoD:
		return len(a.host) == len(b.host) && (len(a.host) == 0 || &a.host[0] == &b.host[0])
	}
	return true
}

// recGraph is a captured queue: its graph, the executable, the queue it
// was captured from (with the parameters its nodes now hold) and the node
// of each launch.
type recGraph struct {
	hash        uint64 // shapeHash of ops
	ident       uint64 // identHash of the queue it was captured from
	graph, exec uintptr
	ops         []recOp
	params      []byte
	nodes       []uintptr
}

// graphDevice is a device with the graph functions the recorder uses.
type graphDevice interface {
	grapher
	// lastNode is the node the capture added last (during a capture).
	lastNode() (uintptr, error)
	// setKernelParams gives node of exec new parameter bytes for its
	// kernel (fn, grid, block unchanged), from its next launch on.
	setKernelParams(exec, node, fn uintptr, grid, block [3]uint32, params []byte) error
}

type recorder struct {
	d  device
	gr graphDevice
	on bool

	ops    []recOp
	params []byte
	seen   map[uint64]bool   // shapes of queues submitted op by op
	idents map[uint64]uint64 // identities (identHash) of queues without a graph of their own: the pass last seen
	passes uint64            // syncAll calls that returned nil
	graphs []*recGraph       // most recently used first
	stats  *Stats
	tl     *timeline // QPACK_CUDA_PROFILE=graphs (timeline.go), or nil
	// sizes holds the bytes of each device allocation made through the
	// recorder, for memFree's dropReaching.
	sizes map[devptr]int
	// early: submit the queue as soon as it holds earlyOps ops when the
	// compute stream has drained (idle: a sync since the last submission;
	// QPACK_CUDA_EARLY=0 turns it off).
	early, idle bool
	// oneByOne (QPACK_CUDA_EARLY=op): the early start issues the first
	// earlyOps ops after a drain one by one as they are queued, instead
	// of as one graph of them; left counts those still to come.
	oneByOne bool
	left     int
}

// earlyEnv turns off the early start (recorder.early) with "0"; "op"
// makes it issue its ops one by one (recorder.oneByOne): an A/B switch
// for the device, whether an idle GPU starts sooner on a launch than on a
// graph's (the eighteenth session's timeline had layer 0's first queue
// ~20 µs longer than its ops' share).
const earlyEnv = "QPACK_CUDA_EARLY"

// earlyOps is how many ops a queue holds when the recorder submits it
// early: after a wait for the GPU (a decode step's logits), the GPU has
// nothing to run until the host submits, and the host took 41.4 µs from
// the wait to the first layer's submission (H200, fourteenth session's
// timeline): submitting its first ops as soon as they are queued starts
// the GPU while the host queues the rest. Deterministic (the same split
// every step), so both parts replay as graphs; a queue this short is
// still a graph (graphMinOps). Measured (35b dims, 256 tokens): 30.5 µs
// to the first submission, the GPU idle between queues 26.1 ms instead
// of 28.7 (bench/gpu/results/session14-h200/timeline-early*.txt).
const earlyOps = graphMinOps

// withRecorder wraps dev in a recorder when it can run graphs and they are
// not switched off.
func withRecorder(dev device, stats *Stats) device {
	gd, ok := dev.(graphDevice)
	if !ok || os.Getenv(graphsEnv) == "0" {
		return dev
	}
	early := os.Getenv(earlyEnv)
	return &recorder{d: dev, gr: gd, on: true, stats: stats, seen: map[uint64]bool{}, idents: map[uint64]uint64{}, sizes: map[devptr]int{},
		early: early != "0", oneByOne: early == "op"}
}

var _ device = (*recorder)(nil)

func (r *recorder) name() string                  { return r.d.name() }
func (r *recorder) computeCapability() (int, int) { return r.d.computeCapability() }
func (r *recorder) compile(src, name string) (string, string, error) {
	if err := r.flush(); err != nil {
		return "", "", err
	}
	return r.d.compile(src, name)
}
func (r *recorder) function(name string) (uintptr, error) { return r.d.function(name) }

// A graph's copy and memset nodes must not outlive the memory they reach:
// the driver evidently binds them to its allocations when it captures
// them (no document says so), and a graph launched after that memory was freed crashed the
// process inside cuGraphLaunch (SIGSEGV, H100, twenty-seventh session:
// TestSelectOneGPU freed a vector, allocated one of its size, which the
// driver placed at the same address, and replayed the graph whose copy
// node wrote the old one), even though the queue's addresses, and so its
// shape, were the same again. So a free first destroys the graphs with a
// copy or memset node that reaches the memory freed (kernel nodes hold
// plain addresses in their parameter bytes, which replays compare).
func (r *recorder) memAlloc(n int) (devptr, error) {
	p, err := r.d.memAlloc(n)
	if err == nil {
		r.sizes[p] = n
	}
	return p, err
}

func (r *recorder) memFree(p devptr) error {
	return r.then(func() error {
		n, ok := r.sizes[p]
		if !ok {
			n = 1 // not allocated here: at least its first byte
		}
		delete(r.sizes, p)
		r.dropReaching(uintptr(p), uintptr(p)+uintptr(n), false)
		return r.d.memFree(p)
	})
}

func (r *recorder) hostAlloc(n int) ([]byte, devptr, error) { return r.d.hostAlloc(n) }

func (r *recorder) hostFree(b []byte) error {
	return r.then(func() error {
		if len(b) > 0 {
			lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
			r.dropReaching(lo, lo+uintptr(len(b)), true)
		}
		return r.d.hostFree(b)
	})
}

// dropReaching destroys the graphs with a copy or memset node that reaches
// [lo, hi): device memory, or with host the pinned memory an htod reads.
func (r *recorder) dropReaching(lo, hi uintptr, host bool) {
	keep := r.graphs[:0]
	for _, g := range r.graphs {
		if g.reaches(lo, hi, host) {
			r.destroy(g)
			continue
		}
		keep = append(keep, g)
	}
	clear(r.graphs[len(keep):])
	r.graphs = keep
}

// reaches reports whether a copy or memset node of g reaches [lo, hi).
func (g *recGraph) reaches(lo, hi uintptr, host bool) bool {
	overlaps := func(p uintptr, n int) bool { return n > 0 && p < hi && lo < p+uintptr(n) }
	for i := range g.ops {
		op := &g.ops[i]
		switch {
		case op.kind == opLaunch:
		case host:
			if op.kind == opHtoD && len(op.host) > 0 && overlaps(uintptr(unsafe.Pointer(&op.host[0])), len(op.host)) {
				return true
			}
		case overlaps(uintptr(op.dst), op.n), op.kind == opDtoD && overlaps(uintptr(op.src), op.n):
			return true
		}
	}
	return false
}
func (r *recorder) newEvent() (event, error)       { return r.d.newEvent() }
func (r *recorder) memInfo() (int64, int64, error) { return r.d.memInfo() }
func (r *recorder) dtoh(dst []byte, src devptr) error {
	return r.then(func() error { return r.d.dtoh(dst, src) })
}
func (r *recorder) htodOn(s stream, dst devptr, src []byte) error {
	if s == computeStream {
		return r.htod(dst, src)
	}
	return r.then(func() error { return r.d.htodOn(s, dst, src) })
}
func (r *recorder) record(e event, s stream) error {
	return r.then(func() error { return r.d.record(e, s) })
}
func (r *recorder) waitEvent(s stream, e event) error {
	return r.then(func() error { return r.d.waitEvent(s, e) })
}
func (r *recorder) eventSync(e event) error {
	return r.waited(r.then(func() error { return r.d.eventSync(e) }))
}
func (r *recorder) freeEvent(e event) error { return r.then(func() error { return r.d.freeEvent(e) }) }
func (r *recorder) sync() error             { return r.drained(r.waited(r.then(r.d.sync))) }
func (r *recorder) syncAll() error {
	err := r.drained(r.waited(r.then(r.d.syncAll)))
	if err == nil {
		r.passes++
	}
	return err
}

// drained notes that the compute stream has run everything submitted
// (after a sync that returned nil), for the early start; err passes on.
func (r *recorder) drained(err error) error {
	r.idle, r.left = err == nil, earlyOps
	return err
}

// waited notes the end of a wait for the GPU for the timeline's host
// figures (the host's time from it to the next queue), passing err on.
func (r *recorder) waited(err error) error {
	if r.tl != nil && err == nil {
		r.tl.waited()
	}
	return err
}

// mark names a point of the host's path after a wait for the timeline.
func (r *recorder) mark(name string) {
	if r.tl != nil {
		r.tl.mark(name)
	}
}

// timed submits what is queued, then times fn's work (submitted before
// the closing event).
func (r *recorder) timed(fn func() error) (float32, error) {
	if err := r.flush(); err != nil {
		return 0, err
	}
	return r.d.timed(func() error {
		err := fn()
		if e := r.flush(); err == nil {
			err = e
		}
		return err
	})
}

func (r *recorder) close() error {
	err := r.flush()
	r.dropGraphs()
	if e := r.d.close(); err == nil {
		err = e
	}
	return err
}

func (r *recorder) launch(f uintptr, grid, block [3]uint32, params []byte) error {
	p0 := len(r.params)
	r.params = append(r.params, params...)
	r.ops = append(r.ops, recOp{kind: opLaunch, fn: f, grid: grid, block: block, p0: p0, p1: len(r.params)})
	r.mark("a launch queued")
	return r.queued()
}

func (r *recorder) htod(dst devptr, src []byte) error {
	r.ops = append(r.ops, recOp{kind: opHtoD, dst: dst, host: src, n: len(src)})
	r.mark("an htod queued")
	return r.queued()
}

func (r *recorder) dtod(dst, src devptr, n int) error {
	r.ops = append(r.ops, recOp{kind: opDtoD, dst: dst, src: src, n: n})
	return r.queued()
}

func (r *recorder) memset(dst devptr, n int) error {
	r.ops = append(r.ops, recOp{kind: opMemset, dst: dst, n: n})
	r.mark("a memset queued")
	return r.queued()
}

// queued notes a queued op for the timeline's host figures, and submits
// the queue early when the GPU is idle and it holds earlyOps ops.
func (r *recorder) queued() error {
	if r.tl != nil {
		r.tl.queued()
	}
	switch {
	case !r.idle || !r.early:
	case r.oneByOne && r.left > 0:
		r.left--
		idle := r.left > 0
		err := r.flushAs(false)
		r.idle = idle
		return err
	case !r.oneByOne && len(r.ops) >= earlyOps:
		return r.flush()
	}
	return nil
}

// then submits the queue, then runs fn.
func (r *recorder) then(fn func() error) error {
	if err := r.flush(); err != nil {
		return err
	}
	return fn()
}

// flush submits the queue (see the type's comment).
func (r *recorder) flush() error { return r.flushAs(r.on) }

// flushAs submits the queue, as a graph where graphs says it may.
func (r *recorder) flushAs(graphs bool) error {
	if len(r.ops) == 0 {
		return nil
	}
	ops, params := r.ops, r.params
	defer func() { r.ops, r.params = ops[:0], params[:0] }()
	r.idle = false

	submit := func(graph bool, fn func() error) error {
		if r.tl == nil {
			return fn()
		}
		return r.tl.around(r.d, ops, graph, fn)
	}
	if graphs && len(ops) >= graphMinOps {
		h := shapeHash(ops)
		id := identHash(h, ops, params)
		g := r.find(h, id, ops, params)
		own := g != nil && g.ident == id
		switch {
		case !own && (r.recent(id) || g == nil && r.seen[h]):
			err := submit(true, func() error { return r.capture(h, id, ops, params) })
			if err == nil {
				delete(r.seen, h)
				delete(r.idents, id)
				return nil
			}
			r.off("capturing a graph", err)
		case g != nil: // its own graph, or one of its shape (parameters set)
			if !own {
				remember(r.idents, id, r.passes)
			}
			err := submit(true, func() error { return r.replay(g, ops, params) })
			if err == nil {
				return nil
			}
			r.off("replaying a graph", err)
		default:
			remember(r.idents, id, r.passes)
			remember(r.seen, h, true)
		}
	}
	return submit(false, func() error { return r.issue(ops, params) })
}

// remember sets k to v in a map of at most maxSeen keys (emptied when full).
func remember[V any](set map[uint64]V, k uint64, v V) {
	if len(set) >= maxSeen {
		clear(set)
	}
	set[k] = v
}

// recent reports whether identity id was seen in one of the last
// identPasses passes.
func (r *recorder) recent(id uint64) bool {
	p, ok := r.idents[id]
	return ok && r.passes-p <= identPasses
}

// shapeHash hashes what replays compares, a word at a time (a multiply
// and a shift per word; find compares the ops themselves, so a collision
// costs a comparison, never a wrong replay). Byte-wise FNV-1a took 8% of
// the host's time per decode token (BenchmarkLayerHostFake).
func shapeHash(ops []recOp) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		h = (h ^ v) * 0x9e3779b97f4a7c15
		h ^= h >> 32
	}
	for i := range ops {
		op := &ops[i]
		mix(uint64(op.kind))
		mix(uint64(op.fn))
		mix(uint64(op.grid[0]) | uint64(op.grid[1])<<32)
		mix(uint64(op.grid[2]) | uint64(op.block[0])<<32)
		mix(uint64(op.p1 - op.p0))
		mix(op.dst)
		mix(op.src)
		mix(uint64(op.n))
		if op.kind == opHtoD && len(op.host) > 0 {
			mix(uint64(uintptr(unsafe.Pointer(&op.host[0]))))
		}
	}
	return h
}

// identHash is a queue's identity: its shape's hash h and the bytes of its
// first launch's parameters (h alone when it has none).
func identHash(h uint64, ops []recOp, params []byte) uint64 {
	for i := range ops {
		if ops[i].kind != opLaunch {
			continue
		}
		for _, c := range params[ops[i].p0:ops[i].p1] {
			h = (h ^ uint64(c)) * 0x100000001b3
		}
		return h ^ h>>29
	}
	return h
}

// sameQueue reports whether b has a's ops (parameters aside).
func sameQueue(a, b []recOp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].replays(&b[i]) {
			return false
		}
	}
	return true
}

// find returns the graph of identity id for ops, or else the graph of
// their shape whose nodes hold the fewest parameter blocks other than
// params' (nil when none has their shape); it becomes the most recently
// used.
func (r *recorder) find(h, id uint64, ops []recOp, params []byte) *recGraph {
	// The identity first, comparing two words a graph (a real model's
	// decode has tens of layers of one shape; their parameters are
	// compared only when none is this queue's own).
	best, fewest := -1, 0
	for i, g := range r.graphs {
		if g.ident == id && g.hash == h && sameQueue(g.ops, ops) {
			best = i
			break
		}
	}
	if best < 0 {
		for i, g := range r.graphs {
			if g.hash == h && sameQueue(g.ops, ops) {
				if n := paramDiffs(g, ops, params); best < 0 || n < fewest {
					best, fewest = i, n
				}
			}
		}
	}
	if best < 0 {
		return nil
	}
	g := r.graphs[best]
	copy(r.graphs[1:best+1], r.graphs[:best]) // most recent first
	r.graphs[0] = g
	return g
}

// paramDiffs counts the launches of ops whose parameters differ from what
// g's nodes hold.
func paramDiffs(g *recGraph, ops []recOp, params []byte) int {
	n := 0
	for i := range ops {
		op, was := &ops[i], &g.ops[i]
		if op.kind == opLaunch && !bytes.Equal(params[op.p0:op.p1], g.params[was.p0:was.p1]) {
			n++
		}
	}
	return n
}

// replay sets the nodes whose parameters differ and launches g.
func (r *recorder) replay(g *recGraph, ops []recOp, params []byte) error {
	for i := range ops {
		op, was := &ops[i], &g.ops[i]
		if op.kind != opLaunch {
			continue
		}
		now, before := params[op.p0:op.p1], g.params[was.p0:was.p1]
		if bytes.Equal(now, before) {
			continue
		}
		if err := r.gr.setKernelParams(g.exec, g.nodes[i], op.fn, op.grid, op.block, now); err != nil {
			return err
		}
		copy(before, now)
	}
	if err := r.gr.graphLaunch(g.exec); err != nil {
		return err
	}
	r.stats.GraphLaunches++
	r.stats.GraphNodes += int64(len(ops))
	return nil
}

// capture records the queue into a new graph and launches it.
func (r *recorder) capture(h, id uint64, ops []recOp, params []byte) (err error) {
	if err := r.gr.beginCapture(); err != nil {
		return err
	}
	nodes := make([]uintptr, len(ops))
	for i := range ops {
		err = r.issueOne(&ops[i], params)
		if err == nil && ops[i].kind == opLaunch {
			nodes[i], err = r.gr.lastNode()
		}
		if err != nil {
			if g, e := r.gr.endCapture(); e == nil && g != 0 {
				r.gr.destroyGraph(g)
			}
			return err
		}
	}
	graph, err := r.gr.endCapture()
	if err != nil {
		if graph != 0 {
			r.gr.destroyGraph(graph)
		}
		return err
	}
	exec, err := r.gr.instantiate(graph)
	if err != nil {
		r.gr.destroyGraph(graph)
		return err
	}
	g := &recGraph{hash: h, ident: id, graph: graph, exec: exec, ops: append([]recOp(nil), ops...), params: append([]byte(nil), params...), nodes: nodes}
	if err := r.gr.graphLaunch(exec); err != nil {
		r.gr.destroyExec(exec)
		r.gr.destroyGraph(graph)
		return err
	}
	r.stats.GraphCaptures++
	r.stats.GraphLaunches++
	r.stats.GraphNodes += int64(len(ops))
	r.graphs = append([]*recGraph{g}, r.graphs...)
	if len(r.graphs) > maxGraphs {
		old := r.graphs[maxGraphs]
		r.graphs = r.graphs[:maxGraphs]
		r.destroy(old)
	}
	return nil
}

// issue submits ops one by one.
func (r *recorder) issue(ops []recOp, params []byte) error {
	for i := range ops {
		if err := r.issueOne(&ops[i], params); err != nil {
			return err
		}
	}
	return nil
}

func (r *recorder) issueOne(op *recOp, params []byte) error {
	switch op.kind {
	case opLaunch:
		return r.d.launch(op.fn, op.grid, op.block, params[op.p0:op.p1])
	case opHtoD:
		return r.d.htod(op.dst, op.host)
	case opDtoD:
		return r.d.dtod(op.dst, op.src, op.n)
	default:
		return r.d.memset(op.dst, op.n)
	}
}

// off switches graphs off after a failure of the graph functions.
func (r *recorder) off(what string, err error) {
	r.on = false
	slog.Warn("cuda: CUDA graphs switched off; submitting kernels one by one", "while", what, "err", err)
	r.dropGraphs()
}

func (r *recorder) destroy(g *recGraph) {
	// A launched graph still running is freed when it completes.
	if err := r.gr.destroyExec(g.exec); err != nil {
		slog.Debug("cuda: destroying a graph exec", "err", err)
	}
	if err := r.gr.destroyGraph(g.graph); err != nil {
		slog.Debug("cuda: destroying a graph", "err", err)
	}
}

func (r *recorder) dropGraphs() {
	for _, g := range r.graphs {
		r.destroy(g)
	}
	r.graphs = nil
	clear(r.seen)
	clear(r.idents)
}

// String says what the recorder holds (for logs and tests).
func (r *recorder) String() string {
	return fmt.Sprintf("recorder{on %v, %d queued, %d graphs}", r.on, len(r.ops), len(r.graphs))
}
