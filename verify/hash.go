package verify

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/qpack-go/qpack/qpack"
	"github.com/zeebo/blake3"
)

// runBytes is the size of one job when layer files are checked by expert
// digests alone: a layer file is then split into runs of experts that
// different workers hash at once. (A variable so tests can make runs
// small.)
var runBytes int64 = 128 << 20

// job is a contiguous byte range of one file that one worker reads and
// hashes sequentially.
type job struct {
	file  string
	off   int64
	end   int64
	whole bool // the job covers the whole file and computes its digest
	// Expert blobs: when layer >= 0 the range is expert-aligned and starts
	// at expert firstExpert.
	layer       int
	firstExpert int
	experts     bool // compute one digest per expert
	padding     bool // check the bytes outside the sections are zero
}

func (j *job) size() int64 { return j.end - j.off }

// fileHash collects what the jobs of one file found.
type fileHash struct {
	mu      sync.Mutex
	whole   string
	experts []string // "" where not computed
	failed  bool     // a read error: the digests are incomplete
}

// span is a byte range [a, b) within an expert blob.
type span struct{ a, b int64 }

// gaps returns the parts of a blob outside every section: the holes between
// sections and the padding up to the stride. The format says they are zero.
func gaps(l *qpack.Layout) []span {
	var out []span
	pos := int64(0)
	for _, s := range l.Sections {
		if s.Offset > pos {
			out = append(out, span{pos, s.Offset})
		}
		pos = max(pos, s.Offset+s.Size)
	}
	if pos < l.ExpertStride {
		out = append(out, span{pos, l.ExpertStride})
	}
	return out
}

func (v *verifier) plan() []*job {
	var jobs []*job
	ext := v.man.Ext
	for _, p := range sortedKeys(v.stats) {
		if p == qpack.LayoutName {
			continue // hashed with the inventory
		}
		size := v.man.Files[p]
		layer, isLayer := v.layerOf[p]
		if !isLayer || v.layout == nil {
			jobs = append(jobs, &job{file: p, end: size, whole: true, layer: -1})
			continue
		}
		stride := v.layout.ExpertStride
		switch {
		case ext == nil:
			jobs = append(jobs, &job{file: p, end: size, whole: true, layer: layer, padding: true})
		case v.o.Full:
			jobs = append(jobs, &job{file: p, end: size, whole: true, layer: layer, experts: true, padding: true})
		default:
			per := max(1, int(runBytes/stride))
			for e := 0; e < v.layout.ExpertCount; e += per {
				n := min(per, v.layout.ExpertCount-e)
				jobs = append(jobs, &job{file: p, off: int64(e) * stride, end: int64(e+n) * stride,
					layer: layer, firstExpert: e, experts: true, padding: true})
			}
		}
	}
	// Largest first, so a long sequential file does not start last.
	sort.SliceStable(jobs, func(i, j int) bool { return jobs[i].size() > jobs[j].size() })
	return jobs
}

// hashAll reads every usable file once, on all workers, and compares what
// it computed with the manifest.
func (v *verifier) hashAll(ctx context.Context) error {
	jobs, total := v.hashPrepare()
	var done atomic.Int64
	stop := make(chan struct{})
	finished := progressLoop("hash", v.o.Progress, done.Load, total, stop)
	v.hashRun(ctx, &jobList{jobs: jobs}, &done)
	close(stop)
	<-finished
	v.rep.BytesHashed += done.Load()
	if err := ctx.Err(); err != nil {
		return err
	}
	v.judge()
	return nil
}

// hashPrepare plans the jobs and makes room for their results; it returns
// the bytes they read.
func (v *verifier) hashPrepare() ([]*job, int64) {
	jobs := v.plan()
	v.hashed = map[string]*fileHash{}
	var total int64
	for _, j := range jobs {
		total += j.size()
		if v.hashed[j.file] == nil {
			fh := &fileHash{}
			if j.layer >= 0 && v.layout != nil {
				fh.experts = make([]string, v.layout.ExpertCount)
			}
			v.hashed[j.file] = fh
		}
	}
	return jobs, total
}

// jobQueue hands hash jobs to the workers.
type jobQueue interface {
	// next returns the next job to run, nil when there is none left (or
	// ctx is done). It may block.
	next(ctx context.Context) *job
	// done is called when a job has finished.
	done(j *job)
	// keep reports whether the pages of a file are to stay in the page
	// cache after being hashed (someone reads them again soon).
	keep(file string) bool
}

// jobList hands out jobs in order.
type jobList struct {
	mu   sync.Mutex
	jobs []*job
}

func (q *jobList) next(ctx context.Context) *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs) == 0 || ctx.Err() != nil {
		return nil
	}
	j := q.jobs[0]
	q.jobs = q.jobs[1:]
	return j
}

func (q *jobList) done(*job)        {}
func (q *jobList) keep(string) bool { return false }

// hashRun runs the jobs of q on v.o.Workers workers and returns when they
// are all done.
func (v *verifier) hashRun(ctx context.Context, q jobQueue, done *atomic.Int64) {
	var gapList []span
	if v.layout != nil {
		gapList = gaps(v.layout)
	}
	var wg sync.WaitGroup
	for w := 0; w < v.o.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var bufs [][]byte
			for {
				j := q.next(ctx)
				if j == nil {
					return
				}
				if bufs == nil {
					bufs = make([][]byte, buffersPerWorker)
					for i := range bufs {
						bufs[i] = make([]byte, v.o.BlockSize)
					}
				}
				v.runJob(ctx, j, bufs, gapList, q.keep(j.file), done)
				q.done(j)
			}
		}()
	}
	wg.Wait()
}

type block struct {
	buf  []byte
	off  int64
	n    int
	err  error
	refs atomic.Int32
}

// buffersPerWorker lets the reader run ahead of the hashers.
const buffersPerWorker = 4

// runJob reads j's range in blocks with a reader goroutine that keeps the
// next blocks coming, and hashes them as they arrive. When a layer file
// gets both its whole-file digest and its expert digests, a second
// goroutine computes the whole-file digest from the same buffers, so even
// a single file keeps two cores busy.
//
// With keep the pages read stay in the page cache (the deep check reads
// them next); otherwise each block is dropped once read.
func (v *verifier) runJob(ctx context.Context, j *job, bufs [][]byte, gapList []span, keep bool, done *atomic.Int64) {
	fh := v.hashed[j.file]
	fail := func(pr Problem) {
		fh.mu.Lock()
		fh.failed = true
		fh.mu.Unlock()
		v.problem(pr)
	}
	f, err := v.open(j.file)
	if err != nil {
		fail(Problem{Scope: ScopeContainer, Kind: KindRead, File: j.file, Message: err.Error()})
		return
	}
	defer f.Close()
	drop := !v.o.KeepCache && !keep
	switch {
	case drop:
		adviseSequential(f)
	case keep:
		adviseReadAhead(f)
	}

	free := make(chan []byte, len(bufs))
	for _, b := range bufs {
		free <- b
	}
	filled := make(chan *block, len(bufs))
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		defer close(filled)
		bs := int64(len(bufs[0]))
		for off := j.off; off < j.end; off += bs {
			var buf []byte
			select {
			case buf = <-free:
			case <-quit:
				return
			}
			n := min(bs, j.end-off)
			got, err := f.ReadAt(buf[:n], off)
			if drop {
				dropCache(f, off, int64(got))
			}
			if err == io.EOF && int64(got) == n {
				err = nil
			}
			select {
			case filled <- &block{buf: buf, off: off, n: got, err: err}:
			case <-quit:
				return
			}
			if err != nil || ctx.Err() != nil {
				return
			}
		}
	}()
	release := func(b *block) {
		if b.refs.Add(-1) == 0 {
			free <- b.buf
		}
	}

	var whole, eh *blake3.Hasher
	var wholeCh chan *block
	var wholeDone chan struct{}
	if j.whole {
		whole = blake3.New()
		if j.experts || j.padding {
			wholeCh, wholeDone = make(chan *block, len(bufs)), make(chan struct{})
			go func() {
				defer close(wholeDone)
				for b := range wholeCh {
					whole.Write(b.buf[:b.n])
					release(b)
				}
			}()
		}
	}
	if j.experts {
		eh = blake3.New()
	}
	var stride int64
	if v.layout != nil {
		stride = v.layout.ExpertStride
	}
	var expDigests []string
	padReported := map[int]bool{}
	pos := j.off
	failed := false
	for b := range filled {
		data := b.buf[:b.n]
		if wholeCh != nil {
			b.refs.Store(2)
			wholeCh <- b
		} else {
			b.refs.Store(1)
			if whole != nil {
				whole.Write(data)
			}
		}
		if j.padding || eh != nil {
			// Walk the block expert by expert.
			for p := data; len(p) > 0; {
				e := int(pos / stride)
				in := pos - int64(e)*stride // offset inside the blob
				n := min(int64(len(p)), stride-in)
				piece := p[:n]
				if eh != nil {
					eh.Write(piece)
				}
				if j.padding && !padReported[e] {
					if off, ok := firstNonZeroGap(piece, in, gapList); ok {
						padReported[e] = true
						v.problem(Problem{Scope: ScopeContainer, Kind: KindPadding, File: j.file, Layer: intp(j.layer), Expert: intp(e),
							Offset:  int64p(int64(e)*stride + off),
							Message: fmt.Sprintf("byte %d of the expert's blob lies outside every section and must be zero, is 0x%02x", off, piece[off-in])})
					}
				}
				if in+n == stride && eh != nil {
					expDigests = append(expDigests, hex.EncodeToString(eh.Sum(nil)))
					eh.Reset()
				}
				pos += n
				p = p[n:]
			}
		} else {
			pos += int64(len(data))
		}
		done.Add(int64(len(data)))
		berr := b.err
		release(b)
		if berr != nil {
			msg := berr.Error()
			kind := KindRead
			if errors.Is(berr, io.EOF) || errors.Is(berr, io.ErrUnexpectedEOF) {
				kind, msg = KindSize, fmt.Sprintf("ends at byte %d while being verified (%d bytes expected)", b.off+int64(b.n), v.man.Files[j.file])
			}
			pr := Problem{Scope: ScopeContainer, Kind: kind, File: j.file, Offset: int64p(b.off + int64(b.n)), Message: msg}
			if j.layer >= 0 && stride > 0 {
				e := int((b.off + int64(b.n)) / stride)
				if e < v.layout.ExpertCount {
					pr.Layer, pr.Expert = intp(j.layer), intp(e)
				}
			}
			fail(pr)
			failed = true
			break
		}
		if ctx.Err() != nil {
			fail(Problem{Scope: ScopeContainer, Kind: KindRead, File: j.file, Message: ctx.Err().Error()})
			failed = true
			break
		}
	}
	if wholeCh != nil {
		close(wholeCh)
		<-wholeDone
	}
	if failed {
		return
	}
	fh.mu.Lock()
	defer fh.mu.Unlock()
	if whole != nil {
		fh.whole = hex.EncodeToString(whole.Sum(nil))
	}
	for i, d := range expDigests {
		fh.experts[j.firstExpert+i] = d
	}
}

// firstNonZeroGap looks at piece, which holds blob bytes [in, in+len), and
// returns the blob offset of the first non-zero byte inside a gap.
func firstNonZeroGap(piece []byte, in int64, gapList []span) (int64, bool) {
	end := in + int64(len(piece))
	for _, g := range gapList {
		a, b := max(g.a, in), min(g.b, end)
		if a >= b {
			continue
		}
		for i, c := range piece[a-in : b-in] {
			if c != 0 {
				return a + int64(i), true
			}
		}
	}
	return 0, false
}

// judge compares what was hashed with the manifest and fills rep.Files.
func (v *verifier) judge() {
	ext := v.man.Ext
	v.rep.LayerFileDigests = ext != nil && v.o.Full && v.layout != nil
	if ext != nil && !v.o.Full && v.layout != nil {
		v.note("layer files were checked by their expert digests, which cover every byte; their whole-file digests in the manifest were not (--full checks them too)")
	}
	for _, p := range v.man.SortedFiles() {
		res := v.results[p]
		fh := v.hashed[p]
		if p == qpack.LayoutName || fh == nil {
			v.rep.Files = append(v.rep.Files, *res)
			continue
		}
		if fh.failed {
			res.Check = CheckSize
			v.rep.Files = append(v.rep.Files, *res)
			continue
		}
		res.Digest = fh.whole
		layer, isLayer := v.layerOf[p]
		switch {
		case ext == nil:
			res.Check, res.OK = CheckComputed, true
		case !isLayer || v.layout == nil:
			res.Check = CheckFileDigest
			res.OK = v.checkFileDigest(p, fh.whole)
		default:
			res.OK = v.judgeLayer(p, layer, fh)
			res.Check = CheckExpertDigests
			if fh.whole != "" {
				res.Check = CheckBoth
			}
		}
		v.rep.Files = append(v.rep.Files, *res)
	}
}

// markBad marks the files that a problem names as bad: a padding problem
// makes a file bad even when its digests match, and so does a difference
// from the source.
func (v *verifier) markBad() {
	v.mu.Lock()
	defer v.mu.Unlock()
	bad := map[string]bool{}
	for _, pr := range v.ps.list {
		if pr.Scope == ScopeContainer && pr.Kind != KindStructure && pr.File != "" {
			bad[pr.File] = true
		}
	}
	for i := range v.rep.Files {
		if bad[v.rep.Files[i].Path] {
			v.rep.Files[i].OK = false
		}
	}
}

func (v *verifier) checkFileDigest(p, got string) bool {
	want := v.man.Ext.FileDigests[p]
	if got == want {
		return true
	}
	msg := fmt.Sprintf("BLAKE3 %s, %s records %s", got, qpack.ManifestName, want)
	if p == qpack.DenseName {
		msg += " (use --deep to find the tensor)"
	}
	v.problem(Problem{Scope: ScopeContainer, Kind: KindDigest, File: p, Key: "qpack.fileDigests", Message: msg})
	return false
}

// judgeLayer compares a layer file's expert digests (and its whole-file
// digest, when computed) with the manifest. With both digests a damaged
// manifest entry can be told from damaged data: if the whole file matches,
// an expert digest that does not is a bad manifest entry, and the other way
// round.
func (v *verifier) judgeLayer(p string, layer int, fh *fileHash) bool {
	ext := v.man.Ext
	wantExp := ext.ExpertDigests[p]
	var bad []int
	for e, got := range fh.experts {
		if got != wantExp[e] {
			bad = append(bad, e)
		}
	}
	fileOK := true
	if fh.whole != "" {
		fileOK = fh.whole == ext.FileDigests[p]
	}
	switch {
	case len(bad) == 0 && fileOK:
		return true
	case len(bad) == 0 && !fileOK:
		// Every blob is as recorded, so the file is: the manifest's
		// file digest is what is wrong.
		v.problem(Problem{Scope: ScopeContainer, Kind: KindManifest, File: qpack.ManifestName, Key: "qpack.fileDigests[" + p + "]",
			Message: fmt.Sprintf("records %s for %s, but the file hashes to %s and every one of its %d expert blobs matches its own digest: %s is damaged", ext.FileDigests[p], p, fh.whole, len(fh.experts), qpack.ManifestName)})
		return true
	case fh.whole != "" && fileOK:
		for _, e := range bad {
			v.problem(Problem{Scope: ScopeContainer, Kind: KindManifest, File: qpack.ManifestName, Key: fmt.Sprintf("qpack.expertDigests[%s][%d]", p, e),
				Layer: intp(layer), Expert: intp(e),
				Message: fmt.Sprintf("records %s, but the blob hashes to %s while the whole file matches its digest: %s is damaged", wantExp[e], fh.experts[e], qpack.ManifestName)})
		}
		return true
	default:
		for _, e := range bad {
			v.problem(Problem{Scope: ScopeContainer, Kind: KindExpertDigest, File: p, Layer: intp(layer), Expert: intp(e),
				Offset: int64p(int64(e) * v.layout.ExpertStride),
				Message: fmt.Sprintf("expert blob [%d, %d) hashes to %s, %s records %s (section unknown without --deep)",
					int64(e)*v.layout.ExpertStride, int64(e+1)*v.layout.ExpertStride, fh.experts[e], qpack.ManifestName, wantExp[e])})
		}
		if fh.whole != "" {
			v.problem(Problem{Scope: ScopeContainer, Kind: KindDigest, File: p, Key: "qpack.fileDigests", Layer: intp(layer),
				Message: fmt.Sprintf("BLAKE3 %s, %s records %s (%d of %d expert blobs differ)", fh.whole, qpack.ManifestName, ext.FileDigests[p], len(bad), len(fh.experts))})
		}
		return false
	}
}
