package verify

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/qpack-go/qpack/checkpoint"
	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// DeepOptions asks Verify to compare the container with its source.
type DeepOptions struct {
	// Source is the checkpoint to compare with (FromCheckpoint,
	// OpenDirSource, OpenHubSource). The caller closes it.
	Source *Source
	// Sample > 0 compares only that many randomly chosen experts per layer
	// (and no dense tensor), reading only their slices of the source; the
	// source shards' hashes cannot be checked then.
	Sample int
	// Seed chooses the sampled experts (the report records it).
	Seed uint64
	// Shards is how many source shards are streamed at once (0: GOMAXPROCS,
	// at most 4).
	Shards int
	// Prefetch is how many blocks of a shard are read ahead at once
	// (0: 2 for a directory, 8 for the Hub).
	Prefetch int
	// BlockSize is the size of one source read (0: 8 MiB for a directory,
	// 16 MiB for the Hub).
	BlockSize int
	// Window bounds the container bytes the digest pass, which runs
	// alongside the deep check, may read ahead of the comparisons and
	// leave in the page cache for them, so that each container file is
	// read from the disk once (0: DefaultWindow). Files larger than the
	// window are read twice. A negative Window runs the digest pass
	// first and the deep check after it, each reading the container.
	Window int64
}

// DefaultWindow is the default DeepOptions.Window: enough for one layer
// file of the largest models qpack knows (Qwen3-Next-80B-A3B at 8 bits:
// 512 experts of about 3.4 MB).
const DefaultWindow = 2 << 30

// Container reads of a deep check: slices are compared in pieces of at
// most comparePiece bytes by compareWorkers goroutines per shard.
const (
	comparePiece   = 1 << 20
	compareWorkers = 8
)

// DeepReport is what a deep check did.
type DeepReport struct {
	Source          string       `json:"source"`
	Commit          string       `json:"commit,omitempty"`
	Sample          int          `json:"sample,omitempty"`
	Seed            uint64       `json:"seed,omitempty"`
	Shards          []ShardCheck `json:"shards"`
	DenseTensors    int          `json:"dense_tensors"`     // compared
	ExpertSlices    int          `json:"expert_slices"`     // (layer, expert, section) slices compared
	BytesCompared   int64        `json:"bytes_compared"`    // container bytes compared with the source
	SourceBytesRead int64        `json:"source_bytes_read"` // bytes read from the source
	// Shared: the digest pass ran alongside, and the container files it
	// shared were read from the disk once (see DeepOptions.Window).
	Shared bool `json:"shared,omitempty"`
	// SideFiles counts the config, tokenizer and template files compared
	// whole with the source's.
	SideFiles int `json:"side_files"`
	// Seconds is the time of the deep check; when Shared, of both passes.
	Seconds float64 `json:"seconds"`
}

// ShardCheck is one source shard's hash check.
type ShardCheck struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"` // computed while streaming
	// Expected lists what the bytes must hash to, and who says so (the
	// manifest, the Hub listing, the HF cache).
	Expected []ExpectedHash `json:"expected,omitempty"`
	// Status: "ok", "mismatch", "unknown" (streamed, but nothing to
	// compare the hash with) or "unchecked" (sample mode, or not streamed).
	Status string `json:"status"`
}

// ExpectedHash is one expectation for a shard's hash.
type ExpectedHash struct {
	Kind string `json:"kind"` // "sha256" or "git-sha1"
	Hex  string `json:"hex"`
	From string `json:"from"`
	Got  string `json:"got,omitempty"`
}

// segment is a run of source bytes that must equal a run of container
// bytes.
type segment struct {
	srcOff, n int64
	file      string // container file
	dstOff    int64
	layer     int // -1 for a dense tensor
	expert    int
	section   string
	tensor    string // the source tensor
}

func (s *segment) end() int64 { return s.srcOff + s.n }

// mismatches collects the differences found, per segment; safe for
// concurrent use.
type mismatches struct {
	mu sync.Mutex
	m  map[*segment]*mismatch
}

func newMismatches() *mismatches { return &mismatches{m: map[*segment]*mismatch{}} }

func (ms *mismatches) record(s *segment, first, count int64, err error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m := ms.m[s]
	if m == nil {
		m = &mismatch{first: first}
		ms.m[s] = m
	}
	m.first = min(m.first, first)
	m.count += count
	if err != nil && m.err == nil {
		m.err = err
	}
}

// mismatch accumulates the differences found in one segment.
type mismatch struct {
	first int64 // offset within the segment of the first differing byte
	count int64
	err   error // a read error on the container side
}

// deepPlan is what a deep check streams.
type deepPlan struct {
	rep      *DeepReport
	perShard [][]segment // per source shard, sorted by source offset
}

// deepPrepare sets the defaults, checks that the source is the one the
// manifest records and maps every container byte to its source bytes. It
// returns nil when there is nothing to stream.
func (v *verifier) deepPrepare(ctx context.Context) (*deepPlan, error) {
	dc := *v.o.Deep // the caller's options stay as given
	v.o.Deep = &dc
	d := v.o.Deep
	src := d.Source
	if src == nil {
		return nil, errors.New("deep check: no source")
	}
	rep := &DeepReport{Source: src.Desc, Commit: src.Commit, Sample: d.Sample}
	if d.Sample > 0 {
		rep.Seed = d.Seed
	}
	v.rep.Deep = rep

	if d.Shards <= 0 {
		d.Shards = min(runtime.GOMAXPROCS(0), 4)
	}
	if d.Prefetch <= 0 {
		d.Prefetch = 2
		if src.Remote {
			d.Prefetch = 8
		}
	}
	if d.BlockSize <= 0 {
		d.BlockSize = 8 << 20
		if src.Remote {
			d.BlockSize = 16 << 20
		}
	}
	if d.Window == 0 {
		d.Window = DefaultWindow
	}

	checks, ok := v.matchRecordedSource(src)
	rep.Shards = checks
	if !ok {
		v.note("deep check not run: the source is not the one the manifest records")
		return nil, nil
	}
	perShard := v.buildMap(src, rep)
	v.compareSideFiles(ctx, src, rep)
	if d.Sample > 0 {
		v.note("sample mode: %d random experts per layer compared (seed %d), dense tensors not compared, source shard hashes not checked", d.Sample, d.Seed)
	}
	return &deepPlan{rep: rep, perShard: perShard}, nil
}

// deepRun runs a deep check on its own (after the digest pass).
func (v *verifier) deepRun(ctx context.Context, dp *deepPlan) error {
	start := time.Now()
	defer func() { dp.rep.Seconds = time.Since(start).Seconds() }()
	if v.o.Deep.Sample > 0 {
		v.flushMapProblems() // no shard is hashed: its header cannot be checked
		return v.deepSample(ctx, dp.perShard, dp.rep)
	}
	var done, compared atomic.Int64
	stop := make(chan struct{})
	finished := progressLoop("deep", v.o.Progress, done.Load, v.o.Deep.Source.size(), stop)
	err := v.deepStream(ctx, dp, nil, &done, &compared)
	close(stop)
	<-finished
	v.flushMapProblems()
	return err
}

// hashAndDeep runs the digest pass and the deep stream at once, sharing
// the container reads (see share). Progress is reported as phase "deep",
// counting the bytes hashed and the source bytes streamed.
func (v *verifier) hashAndDeep(ctx context.Context, dp *deepPlan) error {
	start := time.Now()
	jobs, hashTotal := v.hashPrepare()
	sh := newShare(v, jobs, dp.perShard, v.o.Deep.Window)
	dp.rep.Shared = true
	defer sh.watch(ctx)()
	var hashed, streamed, compared atomic.Int64
	stop := make(chan struct{})
	finished := progressLoop("deep", v.o.Progress, func() int64 { return hashed.Load() + streamed.Load() }, hashTotal+v.o.Deep.Source.size(), stop)
	hashDone := make(chan struct{})
	go func() {
		defer close(hashDone)
		v.hashRun(ctx, sh, &hashed)
	}()
	err := v.deepStream(ctx, dp, sh, &streamed, &compared)
	v.flushMapProblems()
	dp.rep.Seconds = time.Since(start).Seconds()
	sh.finishDeep()
	<-hashDone
	sh.cleanup()
	close(stop)
	<-finished
	v.rep.BytesHashed += hashed.Load()
	if err := ctx.Err(); err != nil {
		return err
	}
	v.judge()
	v.judgeDense()
	return err
}

// matchRecordedSource compares the source's shards with the ones the
// manifest records (names, sizes, hashes) and gathers what each shard must
// hash to.
func (v *verifier) matchRecordedSource(src *Source) ([]ShardCheck, bool) {
	var recorded map[string]qpack.Shard
	if e := v.man.Ext; e != nil && len(e.Source.Shards) > 0 {
		recorded = map[string]qpack.Shard{}
		for _, s := range e.Source.Shards {
			recorded[s.Name] = s
		}
	}
	ok := true
	bad := func(file, format string, args ...any) {
		ok = false
		v.problem(Problem{Scope: ScopeSource, Kind: KindSource, File: file, Message: fmt.Sprintf(format, args...)})
	}
	checks := make([]ShardCheck, len(src.Shards))
	seen := map[string]bool{}
	for i, sh := range src.Shards {
		seen[sh.Name] = true
		c := ShardCheck{Name: sh.Name, Size: sh.Size, Status: "unchecked"}
		if rec, found := recorded[sh.Name]; found {
			if rec.Size != sh.Size {
				bad(sh.Name, "%d bytes, the manifest records %d: not the source the container was made from", sh.Size, rec.Size)
			}
			if rec.SHA256 != "" {
				c.Expected = append(c.Expected, ExpectedHash{Kind: string(hfhub.HashSHA256), Hex: rec.SHA256, From: qpack.ManifestName})
			}
		} else if recorded != nil {
			bad(sh.Name, "not among the shards the manifest records: not the source the container was made from")
		}
		if sh.Expect.Hex != "" {
			c.Expected = append(c.Expected, ExpectedHash{Kind: string(sh.Expect.Kind), Hex: sh.Expect.Hex, From: sh.ExpectFrom})
		}
		if len(c.Expected) == 2 && c.Expected[0].Kind == c.Expected[1].Kind && c.Expected[0].Hex != c.Expected[1].Hex {
			bad(sh.Name, "%s says sha256 %s, the manifest records %s: not the source the container was made from (another revision?)", sh.ExpectFrom, c.Expected[1].Hex, c.Expected[0].Hex)
		}
		checks[i] = c
	}
	for name := range recorded {
		if !seen[name] {
			bad(name, "recorded in the manifest but not in the source")
		}
	}
	return checks, ok
}

// Expert tensor names: "<prefix>layers.<L>.<module path>.switch_mlp.<proj>.<part>"
// (mlx-lm also spells the module switch_glu).
type expertName struct {
	prefix  string
	layer   int
	section string
}

func parseExpertName(name string) (expertName, bool) {
	comps := strings.Split(name, ".")
	n := len(comps)
	for _, c := range comps {
		if c == "" {
			return expertName{}, false // "a..b", ".a", "a.": not a module path
		}
	}
	if n < 5 {
		return expertName{}, false
	}
	if comps[n-3] != "switch_mlp" && comps[n-3] != "switch_glu" {
		return expertName{}, false
	}
	proj, part := comps[n-2], comps[n-1]
	if !contains(qpack.Projections, proj) || !contains(qpack.SectionParts, part) {
		return expertName{}, false
	}
	for i := n - 5; i >= 0; i-- {
		if comps[i] != "layers" {
			continue
		}
		num := comps[i+1]
		l, err := strconv.Atoi(num)
		if len(num) > 9 || err != nil || l < 0 || strconv.Itoa(l) != num {
			continue // not a layer index; an earlier "layers" may be
		}
		prefix := strings.Join(comps[:i], ".")
		if prefix != "" {
			prefix += "."
		}
		return expertName{prefix: prefix, layer: l, section: proj + "." + part}, true
	}
	return expertName{}, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// auxiliaryTensor reports names that belong to parts of a checkpoint a
// container leaves out (multi-token prediction, vision).
func auxiliaryTensor(name string) bool {
	for _, c := range strings.Split(name, ".") {
		switch c {
		case "mtp", "vision_tower", "visual", "audio_tower":
			return true
		}
	}
	return false
}

type srcTensor struct {
	shard int
	t     safetensors.Tensor
}

// buildMap derives, independently of the repack, which source bytes every
// container byte must equal: dense tensors by name, expert sections from
// the stacked [E, ...] source tensors (expert e at e x size/E). It returns
// the segments of each shard sorted by source offset.
func (v *verifier) buildMap(src *Source, rep *DeepReport) [][]segment {
	perShard := make([][]segment, len(src.Shards))
	byName := map[string]srcTensor{}
	for si, sh := range src.Shards {
		for _, t := range sh.Header.Tensors {
			if prev, dup := byName[t.Name]; dup {
				v.mapProblem(Problem{Scope: ScopeSource, Kind: KindSource, File: sh.Name, Tensor: t.Name,
					Message: fmt.Sprintf("also in %s", src.Shards[prev.shard].Name)})
				continue
			}
			byName[t.Name] = srcTensor{si, t}
		}
	}
	used := map[string]bool{}
	add := func(si int, s segment) {
		if s.n > 0 {
			perShard[si] = append(perShard[si], s)
		}
	}

	// Dense tensors.
	if v.dense == nil {
		v.note("deep check: dense tensors not compared (model.safetensors is not usable)")
	} else if _, ok := v.stats[qpack.DenseName]; !ok {
		v.note("deep check: dense tensors not compared (model.safetensors is missing or has the wrong size)")
	} else {
		for _, t := range v.dense.Tensors {
			st, ok := byName[t.Name]
			if !ok {
				v.mapProblem(Problem{Scope: ScopeContainer, Kind: KindMismatch, File: qpack.DenseName, Tensor: t.Name,
					Message: "not in the source checkpoint"})
				continue
			}
			used[t.Name] = true
			if st.t.DType != t.DType || !equalShape(st.t.Shape, t.Shape) {
				v.mapProblem(Problem{Scope: ScopeContainer, Kind: KindMismatch, File: qpack.DenseName, Tensor: t.Name,
					Message: fmt.Sprintf("%s %v, the source has %s %v", t.DType, t.Shape, st.t.DType, st.t.Shape)})
				continue
			}
			if v.o.Deep.Sample > 0 {
				continue
			}
			rep.DenseTensors++
			add(st.shard, segment{srcOff: st.t.Offset, n: t.Size, file: qpack.DenseName, dstOff: t.Offset, layer: -1, tensor: t.Name})
		}
	}

	// Expert sections.
	l := v.layout
	if l == nil {
		v.note("deep check: expert sections not compared (the layout is not usable)")
	} else {
		groups := map[string]map[int]map[string]srcTensor{} // prefix -> layer -> section
		for name, st := range byName {
			if used[name] || auxiliaryTensor(name) {
				continue
			}
			en, ok := parseExpertName(name)
			if !ok {
				continue
			}
			g := groups[en.prefix]
			if g == nil {
				g = map[int]map[string]srcTensor{}
				groups[en.prefix] = g
			}
			if g[en.layer] == nil {
				g[en.layer] = map[string]srcTensor{}
			}
			g[en.layer][en.section] = st
		}
		prefix, ok := v.pickPrefix(groups)
		if ok {
			v.mapExperts(src, groups[prefix], used, add, rep)
		}
	}

	// Source tensors the container does not hold.
	var left []string
	var leftBytes int64
	for name, st := range byName {
		if !used[name] {
			left = append(left, name)
			leftBytes += st.t.Size
		}
	}
	if len(left) > 0 {
		sort.Strings(left)
		ex := left[:min(len(left), 5)]
		v.note("deep check: %d source tensors (%d bytes) are not in the container, e.g. %s", len(left), leftBytes, strings.Join(ex, ", "))
	}
	for i := range perShard {
		sort.Slice(perShard[i], func(a, b int) bool { return perShard[i][a].srcOff < perShard[i][b].srcOff })
	}
	return perShard
}

// pickPrefix chooses the family of expert tensors that belongs to the
// model (normally the only one): the one whose prefix the container's dense
// tensors also use for layer 0.
func (v *verifier) pickPrefix(groups map[string]map[int]map[string]srcTensor) (string, bool) {
	if len(groups) == 0 {
		v.mapProblem(Problem{Scope: ScopeContainer, Kind: KindMismatch, File: qpack.LayoutName,
			Message: "the source has no stacked expert tensors (…layers.L.….switch_mlp.<proj>.<part>) for the container's layers"})
		return "", false
	}
	keys := sortedKeys(groups)
	if len(keys) == 1 {
		return keys[0], true
	}
	var match []string
	if v.dense != nil {
		for _, k := range keys {
			for _, t := range v.dense.Tensors {
				if strings.HasPrefix(t.Name, k+"layers.0.") {
					match = append(match, k)
					break
				}
			}
		}
	}
	if len(match) == 1 {
		return match[0], true
	}
	v.mapProblem(Problem{Scope: ScopeSource, Kind: KindSource,
		Message: fmt.Sprintf("stacked expert tensors under several prefixes (%s): cannot tell which ones the container holds", strings.Join(keys, ", "))})
	return "", false
}

func (v *verifier) mapExperts(src *Source, layers map[int]map[string]srcTensor, used map[string]bool, add func(int, segment), rep *DeepReport) {
	l := v.layout
	d := v.o.Deep
	rng := rand.New(rand.NewPCG(d.Seed, d.Seed^0x9e3779b97f4a7c15))
	for layer := 0; layer < l.LayerCount; layer++ {
		file := qpack.LayerFile(layer)
		secs := layers[layer]
		usable := true
		if _, ok := v.stats[file]; !ok {
			v.note("deep check: layer %d not compared (%s is missing or has the wrong size)", layer, file)
			usable = false
		}
		experts := make([]int, l.ExpertCount)
		for e := range experts {
			experts[e] = e
		}
		if d.Sample > 0 && d.Sample < l.ExpertCount {
			rng.Shuffle(len(experts), func(i, j int) { experts[i], experts[j] = experts[j], experts[i] })
			experts = experts[:d.Sample]
			sort.Ints(experts)
		}
		for _, sec := range l.Sections {
			st, ok := secs[sec.Name]
			if !ok {
				v.mapProblem(Problem{Scope: ScopeContainer, Kind: KindMismatch, File: file, Layer: intp(layer), Section: sec.Name,
					Message: "the source has no stacked tensor for this section"})
				continue
			}
			used[st.t.Name] = true
			want := append([]int64{int64(l.ExpertCount)}, sec.Shape...)
			if st.t.DType != sec.DType || !equalShape(st.t.Shape, want) {
				v.mapProblem(Problem{Scope: ScopeContainer, Kind: KindMismatch, File: file, Layer: intp(layer), Section: sec.Name, Tensor: st.t.Name,
					Message: fmt.Sprintf("the layout says %s %v per expert (%d experts), the source tensor is %s %v", sec.DType, sec.Shape, l.ExpertCount, st.t.DType, st.t.Shape)})
				continue
			}
			if !usable {
				continue
			}
			for _, e := range experts {
				add(st.shard, segment{srcOff: st.t.Offset + int64(e)*sec.Size, n: sec.Size, file: file,
					dstOff: int64(e)*l.ExpertStride + sec.Offset, layer: layer, expert: e, section: sec.Name, tensor: st.t.Name})
				rep.ExpertSlices++
			}
		}
		// Stacked tensors of this layer that the layout has no section for.
		for name, st := range secs {
			if _, ok := l.Section(name); !ok {
				used[st.t.Name] = true
				v.mapProblem(Problem{Scope: ScopeContainer, Kind: KindMismatch, File: qpack.LayoutName, Layer: intp(layer), Tensor: st.t.Name,
					Message: fmt.Sprintf("the source has section %s, the layout does not", name)})
			}
		}
	}
	for layer, secs := range layers {
		if layer >= l.LayerCount {
			for _, st := range secs {
				used[st.t.Name] = true
				v.mapProblem(Problem{Scope: ScopeContainer, Kind: KindMismatch, File: qpack.LayoutName, Layer: intp(layer), Tensor: st.t.Name,
					Message: fmt.Sprintf("the source has expert tensors for layer %d, the layout has %d layers", layer, l.LayerCount)})
			}
		}
	}
	_ = src
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// containerFiles opens container files on demand for the comparisons.
type containerFiles struct {
	v      *verifier
	share  *share // nil unless the digest pass runs alongside
	mu     sync.Mutex
	files  map[string]*os.File
	errs   map[string]error
	direct map[string]*os.File // nil value: no O_DIRECT for the file
}

// getDirect returns the file opened with O_DIRECT (Linux), nil when it
// cannot be or the cache is to be kept. Such reads leave nothing in the
// page cache and save the kernel's copy.
func (c *containerFiles) getDirect(p string) *os.File {
	if c.v.o.KeepCache {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.direct[p]; ok {
		return f
	}
	if c.direct == nil {
		c.direct = map[string]*os.File{}
	}
	f := c.v.openDirect(p)
	c.direct[p] = f
	return f
}

func (c *containerFiles) noDirect(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.direct[p]; f != nil {
		f.Close()
	}
	c.direct[p] = nil
}

func (c *containerFiles) get(p string) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.files[p]; ok {
		return f, nil
	}
	if err, ok := c.errs[p]; ok {
		return nil, err
	}
	f, err := c.v.open(p)
	if err != nil {
		c.errs[p] = err
		return nil, err
	}
	if !c.v.o.KeepCache {
		// Slices are read in source order, scattered over the file: no
		// read-ahead, which would fetch (and drop) bytes read later.
		adviseRandom(f)
	}
	c.files[p] = f
	return f, nil
}

func (c *containerFiles) close() {
	for _, f := range c.files {
		f.Close()
	}
	for _, f := range c.direct {
		if f != nil {
			f.Close()
		}
	}
}

// compare checks src (source bytes for segment bytes [at, at+len(src)))
// against the container, reading into scratch.
func (v *verifier) compare(cf *containerFiles, s *segment, at int64, src, scratch []byte, ms *mismatches) {
	record := func(first, count int64, err error) { ms.record(s, first, count, err) }
	if cf.share != nil {
		if m := cf.share.view(s.file); m != nil {
			compareView(m, s, at, src, record)
			return
		}
	}
	if cf.share != nil && cf.share.keep(s.file) {
		// In the page cache (unless the mapping failed): no O_DIRECT.
	} else if d := cf.getDirect(s.file); d != nil && len(scratch) > 2*directAlign {
		n, ok := compareDirect(d, s, at, src, scratch, record)
		if ok {
			return
		}
		cf.noDirect(s.file) // refused: ordinary reads from here on
		src, at = src[n:], at+int64(n)
	}
	f, err := cf.get(s.file)
	if err != nil {
		record(at, 0, err)
		return
	}
	for len(src) > 0 {
		n := min(len(src), len(scratch))
		buf := scratch[:n]
		off := s.dstOff + at
		got, err := f.ReadAt(buf, off)
		if !v.o.KeepCache {
			dropCache(f, off, int64(got))
		}

		if got < n {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			record(at, 0, fmt.Errorf("reading byte %d: %w", off+int64(got), err))
			return
		}
		if first, count := diff(buf, src[:n]); count > 0 {
			record(at+first, count, nil)
		}
		src = src[n:]
		at += int64(n)
	}
}

// compareDirect compares src with bytes [at, at+len(src)) of segment s,
// reading the container file with O_DIRECT: the enclosing aligned range
// into scratch (aligned, with two alignment units to spare). It returns
// false and how many bytes it compared when O_DIRECT is refused.
func compareDirect(d *os.File, s *segment, at int64, src, scratch []byte, record func(first, count int64, err error)) (int, bool) {
	room := len(scratch) - 2*directAlign
	done := 0
	for len(src) > 0 {
		n := min(len(src), room)
		off := s.dstOff + at
		a := off &^ (directAlign - 1)
		e := (off + int64(n) + directAlign - 1) &^ (directAlign - 1)
		got, err := d.ReadAt(scratch[:e-a], a)
		if need := off + int64(n) - a; int64(got) < need {
			if errors.Is(err, syscall.EINVAL) {
				return done, false
			}
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			record(at, 0, fmt.Errorf("reading byte %d: %w", max(off, a+int64(got)), err))
			return done, true
		}
		if first, count := diff(scratch[off-a:off-a+int64(n)], src[:n]); count > 0 {
			record(at+first, count, nil)
		}
		src = src[n:]
		at += int64(n)
		done += n
	}
	return done, true
}

// diff returns the offset of the first byte where a and b (of the same
// length) differ and how many bytes do.
func diff(a, b []byte) (first, count int64) {
	if bytes.Equal(a, b) {
		return -1, 0
	}
	first = -1
	for i := range a {
		if a[i] != b[i] {
			if first < 0 {
				first = int64(i)
			}
			count++
		}
	}
	return first, count
}

// compareView compares src with bytes [at, at+len(src)) of segment s in a
// mapping of its file. The calling goroutine must have
// debug.SetPanicOnFault on: a fault (the file shrank meanwhile) is
// recorded as a read error.
func compareView(m []byte, s *segment, at int64, src []byte, record func(first, count int64, err error)) {
	off := s.dstOff + at
	if off < 0 || off > int64(len(m)) || int64(len(src)) > int64(len(m))-off {
		record(at, 0, fmt.Errorf("reading byte %d: beyond the end of the file (%d bytes)", off, len(m)))
		return
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			record(at, 0, fmt.Errorf("reading bytes [%d, %d): the file changed while being verified (%v)", off, off+int64(len(src)), r))
		}
	}()
	if first, count := diff(m[off:off+int64(len(src))], src); count > 0 {
		record(at+first, count, nil)
	}
}

// report turns the mismatches of one shard into problems. When the
// shard failed its hash check the source is at fault, not the container.
func (v *verifier) reportMismatches(shard string, ms *mismatches, hashStatus string) {
	mm := ms.m
	segs := make([]*segment, 0, len(mm))
	for s := range mm {
		segs = append(segs, s)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].srcOff < segs[j].srcOff })
	for _, s := range segs {
		m := mm[s]
		p := Problem{Scope: ScopeContainer, Kind: KindMismatch, File: s.file, Tensor: s.tensor, Offset: int64p(s.dstOff + m.first)}
		what := "tensor"
		if s.layer >= 0 {
			p.Layer, p.Expert, p.Section = intp(s.layer), intp(s.expert), s.section
			what = "section"
		}
		if m.err != nil {
			p.Kind = KindRead
			p.Message = m.err.Error()
			v.problem(p)
			continue
		}
		p.Message = fmt.Sprintf("%d of %d bytes differ from source tensor %s (%s), the first at byte %d of the %s", m.count, s.n, s.tensor, shard, m.first, what)
		switch hashStatus {
		case "mismatch":
			p.Scope = ScopeSource
			p.Message += "; the source shard failed its hash check, so the source is the likely culprit"
		case "unknown":
			p.Message += " (the source shard's hash could not be checked: nothing records it)"
		}
		v.problem(p)
	}
}

// deepStream reads every source shard once, in order and in large blocks,
// hashing it and comparing every block's mapped bytes with the container as
// it streams by. Shards are processed in parallel, started in order. With
// sh, container files are compared once the digest pass has read them.
func (v *verifier) deepStream(ctx context.Context, dp *deepPlan, sh *share, done, compared *atomic.Int64) error {
	d := v.o.Deep
	src := d.Source
	rep := dp.rep
	cf := &containerFiles{v: v, files: map[string]*os.File{}, errs: map[string]error{}, share: sh}
	defer cf.close()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, d.Shards)
	var wg sync.WaitGroup
start:
	for i := range src.Shards {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break start
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := v.streamShard(ctx, src.Shards[i], dp.perShard[i], &rep.Shards[i], cf, done, compared); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	rep.SourceBytesRead = done.Load()
	rep.BytesCompared = compared.Load()
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("deep check: %w", err)
	}
	return nil
}

// size is the total size of the source's shards.
func (s *Source) size() int64 {
	var n int64
	for _, sh := range s.Shards {
		n += sh.Size
	}
	return n
}

type sblock struct {
	buf  []byte
	off  int64
	n    int
	slot int
	refs atomic.Int32
}

// alignedBuffer returns n bytes at an address aligned for direct I/O.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	skip := int(uintptr(directAlign) - uintptr(unsafe.Pointer(&b[0]))%directAlign)
	return b[skip%directAlign:][: n : n+directAlign-skip%directAlign]
}

// compareTask is one piece of a segment to compare.
type compareTask struct {
	s   *segment
	at  int64 // offset within the segment
	b   *sblock
	src []byte
}

// streamShard streams one shard: reader goroutines read blocks ahead (slot
// i reads blocks i, i+k, ...; several at once for the Hub), every block
// goes in order to the hasher (sha256, and the git blob id where the Hub
// gives that) and to the dispatcher, which cuts the segments mapped into
// the block into pieces of at most comparePiece bytes for a pool of
// compareWorkers goroutines that read the container and compare. A block
// returns to its reader when the hasher and every piece are done with it;
// the buffers bound what is in flight, so the container reads of several
// blocks overlap.
func (v *verifier) streamShard(ctx context.Context, sh *SourceShard, segs []segment, check *ShardCheck, cf *containerFiles, done, compared *atomic.Int64) error {
	d := v.o.Deep
	bs := int64(d.BlockSize)
	nb := int((sh.Size + bs - 1) / bs)
	k := max(1, min(d.Prefetch, nb))
	if sh.file != nil && !v.o.KeepCache {
		adviseSequential(sh.file)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Bytes left to compare per container file, so that a shared file is
	// released as soon as this shard is done with it.
	var leftMu sync.Mutex
	left := map[string]int64{}
	for i := range segs {
		left[segs[i].file] += segs[i].n
	}
	finishBytes := func(file string, n int64) {
		leftMu.Lock()
		left[file] -= n
		last := left[file] == 0
		if last {
			delete(left, file)
		}
		leftMu.Unlock()
		if last && cf.share != nil {
			cf.share.release(file)
		}
	}
	defer func() { // what a failure left
		if cf.share != nil {
			for file := range left {
				cf.share.release(file)
			}
		}
	}()

	// Readers: slot i reads blocks i, i+k, i+2k, ... into its own buffers.
	perSlot := 2
	var dr *directReader
	if sh.file != nil {
		perSlot = 4
		if !v.o.KeepCache && bs%directAlign == 0 {
			if dr = openDirect(sh, true); dr != nil {
				defer dr.close() // after the readers: every return waits for them
			}
		}
	}
	slotFree := make([]chan []byte, k)
	out := make([]chan *sblock, k)
	var rwg sync.WaitGroup
	for i := 0; i < k; i++ {
		slotFree[i] = make(chan []byte, perSlot)
		out[i] = make(chan *sblock, perSlot)
		for j := 0; j < perSlot; j++ {
			slotFree[i] <- alignedBuffer(int(bs))
		}
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for b := i; b < nb; b += k {
				var buf []byte
				select {
				case buf = <-slotFree[i]:
				case <-ctx.Done():
					return
				}
				off := int64(b) * bs
				n := min(bs, sh.Size-off)
				var got int
				var err error
				if dr != nil {
					got, err = dr.readAt(buf[:n], off)
				} else {
					got, err = sh.readAt(ctx, buf[:n], off)
					if sh.file != nil && !v.o.KeepCache {
						dropCache(sh.file, off, int64(got))
					}
				}
				if int64(got) == n {
					err = nil
				} else if err == nil || err == io.EOF {
					err = fmt.Errorf("%s: short read at byte %d", sh.Name, off+int64(got))
				}
				if err != nil {
					cancel(fmt.Errorf("source %s: %w", sh.Name, err))
					return
				}
				select {
				case out[i] <- &sblock{buf: buf, off: off, n: got, slot: i}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	release := func(b *sblock) {
		if b.refs.Add(-1) == 0 {
			slotFree[b.slot] <- b.buf
		}
	}

	// Two consumers see every block in order: the hasher and the
	// dispatcher.
	hashCh := make(chan *sblock, k*perSlot)
	cmpCh := make(chan *sblock, k*perSlot)
	var hashers []hash.Hash
	sha := sha256.New()
	hashers = append(hashers, sha)
	var git hash.Hash
	for _, e := range check.Expected {
		if e.Kind == string(hfhub.HashGitSHA1) && git == nil {
			git = sha1.New()
			fmt.Fprintf(git, "blob %d\x00", sh.Size)
			hashers = append(hashers, git)
		}
	}
	// The map was built from the header bytes read first: they must be
	// the bytes the hash covers.
	var hdrCheck *checkpoint.StreamCheck
	if sh.r != nil {
		hdrCheck = sh.r.NewStreamCheck(0)
	}
	var cwg sync.WaitGroup
	cwg.Add(2)
	go func() {
		defer cwg.Done()
		for b := range hashCh {
			for _, h := range hashers {
				h.Write(b.buf[:b.n])
			}
			hdrCheck.Write(b.buf[:b.n])
			done.Add(int64(b.n))
			release(b)
		}
	}()
	ms := newMismatches()
	tasks := make(chan compareTask, 4*compareWorkers)
	var wwg sync.WaitGroup
	for i := 0; i < compareWorkers; i++ {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			scratch := alignedBuffer(comparePiece + 2*directAlign)
			for t := range tasks {
				v.compare(cf, t.s, t.at, t.src, scratch, ms)
				n := int64(len(t.src))
				compared.Add(n)
				release(t.b)
				finishBytes(t.s.file, n)
			}
		}()
	}
	go func() {
		defer cwg.Done()
		defer close(tasks)
		next := 0
		awaited := ""
		failed := false
		for b := range cmpCh {
			bo, be := b.off, b.off+int64(b.n)
			for next < len(segs) && segs[next].end() <= bo {
				next++
			}
			for i := next; !failed && i < len(segs) && segs[i].srcOff < be; i++ {
				s := &segs[i]
				if cf.share != nil && s.file != awaited {
					if err := cf.share.await(ctx, s.file); err != nil {
						cancel(err)
						failed = true
						break
					}
					awaited = s.file
				}
				a, e := max(bo, s.srcOff), min(be, s.end())
				for ; a < e; a += comparePiece {
					n := min(comparePiece, e-a)
					b.refs.Add(1)
					tasks <- compareTask{s, a - s.srcOff, b, b.buf[a-bo : a-bo+n]}
				}
			}
			release(b)
		}
	}()

	var err error
dispatch:
	for b := 0; b < nb; b++ {
		select {
		case blk := <-out[b%k]:
			blk.refs.Store(2)
			hashCh <- blk
			cmpCh <- blk
		case <-ctx.Done():
			err = context.Cause(ctx)
			break dispatch
		}
	}
	close(hashCh)
	close(cmpCh)
	cwg.Wait()
	wwg.Wait()
	if err == nil {
		err = context.Cause(ctx) // a failed wait for the digest pass
	}
	cancel(nil)
	rwg.Wait()
	if err != nil {
		return err
	}

	check.SHA256 = hex.EncodeToString(sha.Sum(nil))
	if err := hdrCheck.Err(); err != nil {
		// The comparisons used a map that is not the hashed source's:
		// they say nothing about the container either way.
		check.Status = "mismatch"
		v.problem(Problem{Scope: ScopeSource, Kind: KindSourceHash, File: sh.Name, Message: err.Error()})
		v.mu.Lock()
		v.headerBad = true
		v.mu.Unlock()
		return nil
	}
	check.Status = "unknown"
	for i := range check.Expected {
		e := &check.Expected[i]
		switch e.Kind {
		case string(hfhub.HashSHA256):
			e.Got = check.SHA256
		case string(hfhub.HashGitSHA1):
			e.Got = hex.EncodeToString(git.Sum(nil))
		}
		if check.Status != "mismatch" {
			check.Status = "ok"
		}
		if e.Got != e.Hex {
			check.Status = "mismatch"
			v.problem(Problem{Scope: ScopeSource, Kind: KindSourceHash, File: sh.Name,
				Message: fmt.Sprintf("%s %s, %s says %s: the source shard is damaged or not the one recorded%s", e.Kind, e.Got, e.From, e.Hex, cacheNote(v.o.Deep.Source, sh))})
		}
	}
	v.reportMismatches(sh.Name, ms, check.Status)
	return nil
}

// deepSample compares the sampled segments by reading only their bytes
// from the source, several at a time.
func (v *verifier) deepSample(ctx context.Context, perShard [][]segment, rep *DeepReport) error {
	src := v.o.Deep.Source
	type item struct {
		shard int
		seg   *segment
	}
	var items []item
	var total int64
	for si := range perShard {
		for i := range perShard[si] {
			items = append(items, item{si, &perShard[si][i]})
			total += perShard[si][i].n
		}
	}
	var done atomic.Int64
	stop := make(chan struct{})
	finished := progressLoop("deep", v.o.Progress, done.Load, total, stop)
	cf := &containerFiles{v: v, files: map[string]*os.File{}, errs: map[string]error{}}
	defer cf.close()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := v.o.Deep.Prefetch * v.o.Deep.Shards
	ch := make(chan item)
	mms := make([]*mismatches, len(perShard))
	for i := range mms {
		mms[i] = newMismatches()
	}
	var wg sync.WaitGroup
	chunk := int64(v.o.Deep.BlockSize)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf, scratch []byte
			for it := range ch {
				sh, s := src.Shards[it.shard], it.seg
				for at := int64(0); at < s.n; at += chunk {
					n := min(chunk, s.n-at)
					if int64(cap(buf)) < n {
						buf, scratch = make([]byte, n), alignedBuffer(int(n)+2*directAlign)
					}
					got, err := sh.readAt(ctx, buf[:n], s.srcOff+at)
					if int64(got) != n {
						if err == nil || err == io.EOF {
							err = io.ErrUnexpectedEOF
						}
						cancel(fmt.Errorf("source %s: byte %d: %w", sh.Name, s.srcOff+at+int64(got), err))
						break
					}
					v.compare(cf, s, at, buf[:n], scratch[:n], mms[it.shard])
					done.Add(n)
				}
			}
		}()
	}
feed:
	for _, it := range items {
		select {
		case ch <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	close(stop)
	<-finished
	rep.SourceBytesRead = done.Load()
	rep.BytesCompared = done.Load()
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("deep check: %w", err)
	}
	for si, mm := range mms {
		v.reportMismatches(src.Shards[si].Name, mm, "unchecked")
	}
	return nil
}
