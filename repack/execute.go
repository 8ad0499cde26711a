package repack

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/blake3"

	"github.com/qpack-go/qpack/qpack"
)

// DefaultTileSize is the buffer each worker streams a range through.
const DefaultTileSize = 2 << 20

// testHooks let tests slow a repack down or stop it at chosen points.
type testHooks struct {
	tileDelay    time.Duration                        // sleep after each tile a worker writes
	afterCommit  func(frontier int)                   // after each journal write
	beforeFinish func() error                         // after the last range, before Finish
	afterRange   func(r srcRange, redo bool)          // after a worker wrote a range
	corrupt      func(shard int, off int64, b []byte) // mutate bytes as read from the source
}

// ShardMismatchError reports a source shard whose bytes did not hash to
// what the source said they must.
type ShardMismatchError struct {
	Shard    string
	Kind     string // "sha256" or "git blob sha1"
	Expected string
	Got      string
}

func (e *ShardMismatchError) Error() string {
	return fmt.Sprintf("source shard %s: %s %s, but the source says it is %s: the bytes received are not the published file (nothing was placed; rerun to fetch this shard again)", e.Shard, e.Kind, e.Got, e.Expected)
}

// executor streams the plan's ranges into a qpack Writer and keeps the
// journal.
type executor struct {
	plan    *Plan
	m       *layoutMap
	shards  []Shard
	w       *qpack.Writer
	partial string
	dense   *os.File // read handle on model.safetensors for re-reads
	j       *journal
	log     *slog.Logger

	workers, window int
	tile            int
	commitBytes     int64
	commitEvery     time.Duration
	hooks           *testHooks
	progress        func(done int64, layer int)

	fetched atomic.Int64 // source bytes streamed by workers
	redone  int
	sealed  []bool // layers handed to Writer.SealLayer

	// streamed counts the bytes of ranges after the frontier that are in
	// place (fetched by this run, or a checked prefix of an earlier one),
	// for progress; inflight records them per range for the journal.
	streamed atomic.Int64
	inflight partialState
	reporter progressReporter
}

// rangeJob is one unit of work: a range, and whether it is a redo of a
// completed range whose bytes were found damaged (its hash is already in
// the shard's sha256).
type rangeJob struct {
	r    srcRange
	redo bool
	done chan error
}

func (x *executor) gapPath(id int) string {
	return filepath.Join(x.partial, gapDir, "r"+strconv.Itoa(id))
}

// writePiece writes b (a part of pc starting at byte off of the piece).
func (x *executor) writePiece(pc piece, off int64, b []byte) error {
	var err error
	if pc.dst == dstDense {
		_, err = x.w.WriteDense(b, pc.dstOff+off)
	} else {
		_, err = x.w.WriteAt(pc.dst, b, pc.dstOff+off)
	}
	return err
}

// readPiece reads len(b) bytes of pc's destination starting at byte off of
// the piece.
func (x *executor) readPiece(pc piece, off int64, b []byte) error {
	var f *os.File
	var name string
	if pc.dst == dstDense {
		f, name = x.dense, qpack.DenseName
	} else {
		var err error
		if f, err = x.w.LayerFile(pc.dst); err != nil {
			return err
		}
		name = qpack.LayerFile(pc.dst)
	}
	if _, err := f.ReadAt(b, pc.dstOff+off); err != nil {
		return fmt.Errorf("re-reading %s at %d: %w", name, pc.dstOff+off, err)
	}
	return nil
}

func (x *executor) pieces(r srcRange) []piece {
	var out []piece
	x.m.forEach(r, func(pc piece) error { out = append(out, pc); return nil })
	return out
}

// fetch streams range r from its shard and writes every piece to its
// destination; gap bytes go to the range's spill file unless it is a redo
// (whose bytes are already hashed).
func (x *executor) fetch(ctx context.Context, job *rangeJob, buf []byte) error {
	r := job.r
	pcs := x.pieces(r)
	sh := x.shards[r.shard]
	fb, isFile := sh.(fileBacked)
	isFile = isFile && kernelCopy
	// A range an earlier run began: keep its checked prefix (streamed
	// ranges only: a local copy is fast to redo).
	start := r.off
	var pfx *blake3.Hasher
	if !job.redo && !isFile {
		var done int64
		done, pfx = x.resumePrefix(r, buf)
		start += done
	}
	var gap *os.File
	var gapLen int64
	if !job.redo {
		for _, pc := range pcs {
			if pc.dst == dstGap {
				gapLen += pc.n
			}
		}
		if gapLen > 0 {
			flags := os.O_CREATE | os.O_WRONLY
			if start == r.off {
				flags |= os.O_TRUNC
			}
			f, err := os.OpenFile(x.gapPath(r.id), flags, 0o644)
			if err != nil {
				return err
			}
			defer f.Close()
			gap = f
		}
	}
	if isFile {
		if err := x.copyPieces(ctx, r, pcs, gap, fb.file(), !job.redo); err != nil {
			return fmt.Errorf("source shard %s, bytes %d-%d: %w", sh.Name(), r.off, r.end, err)
		}
		if x.hooks != nil && x.hooks.afterRange != nil {
			x.hooks.afterRange(r, job.redo)
		}
		return nil
	}
	consume := func(body io.Reader) error {
		if !job.redo {
			body = &countingReader{r: body, x: x, layer: r.firstLayer}
		}
		pos := start
		pi := 0          // current piece
		var gapOff int64 // where the current gap piece's bytes go in the spill file
		for pos < r.end {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(int64(len(buf)), r.end-pos)
			b := buf[:n]
			if _, err := io.ReadFull(body, b); err != nil {
				return fmt.Errorf("reading bytes %d-%d: %w", pos, pos+n, err)
			}
			x.fetched.Add(n)
			// Dispatch [pos, pos+n) to the pieces it covers.
			for cur := pos; cur < pos+n; {
				for pi < len(pcs) && pcs[pi].srcOff+pcs[pi].n <= cur {
					if pcs[pi].dst == dstGap {
						gapOff += pcs[pi].n
					}
					pi++
				}
				if pi >= len(pcs) {
					return fmt.Errorf("internal error: byte %d is in no piece of range %d", cur, r.id)
				}
				pc := pcs[pi]
				end := min(pc.srcOff+pc.n, pos+n)
				chunk := b[cur-pos : end-pos]
				within := cur - pc.srcOff
				if pc.dst == dstGap {
					if gap != nil {
						if _, err := gap.WriteAt(chunk, gapOff+within); err != nil {
							return fmt.Errorf("spilling gap bytes: %w", err)
						}
					}
				} else if err := x.writePiece(pc, within, chunk); err != nil {
					return err
				}
				cur = end
			}
			pos += n
			if pfx != nil {
				// The tile is in place: record the range's progress.
				pfx.Write(b)
				x.inflight.set(partialRange{Range: r.id, Done: pos - r.off, Digest: hexSum(pfx)})
			}
			if x.hooks != nil && x.hooks.tileDelay > 0 {
				select {
				case <-time.After(x.hooks.tileDelay):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}
	var err error
	switch rs, ok := sh.(RangeStreamer); {
	case start == r.end:
		// Every byte was fetched by an earlier run and is still in place.
	case ok:
		err = rs.StreamRange(ctx, start, r.end-start, consume)
	default:
		err = consume(io.NewSectionReader(sh, start, r.end-start))
	}
	if err != nil {
		return fmt.Errorf("source shard %s, bytes %d-%d: %w", sh.Name(), r.off, r.end, err)
	}
	if x.hooks != nil && x.hooks.afterRange != nil {
		x.hooks.afterRange(r, job.redo)
	}
	return nil
}

// fileBacked is implemented by shards that are local files: their pieces
// are copied inside the kernel rather than through a buffer (the
// committer re-reads what landed either way).
type fileBacked interface {
	file() *os.File
}

// kernelCopy says whether Writer.CopyFrom copies inside the kernel here;
// elsewhere streaming through a tile is as good.
const kernelCopy = runtime.GOOS == "linux"

// copyPieces copies the pieces of range r from the source file src to
// their destinations; gap bytes go to the spill file gap when it is not
// nil; count says the bytes are new progress (not a redo).
func (x *executor) copyPieces(ctx context.Context, r srcRange, pcs []piece, gap *os.File, src *os.File, count bool) error {
	var gapOff int64
	for _, pc := range pcs {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		switch {
		case pc.dst == dstGap:
			if gap != nil {
				if err = qpack.CopyFileRange(gap, gapOff, src, pc.srcOff, pc.n); err != nil {
					err = fmt.Errorf("spilling gap bytes: %w", err)
				}
			}
			gapOff += pc.n
		case pc.dst == dstDense:
			err = x.w.CopyDenseFrom(src, pc.srcOff, pc.dstOff, pc.n)
		default:
			err = x.w.CopyFrom(pc.dst, src, pc.srcOff, pc.dstOff, pc.n)
		}
		if err != nil {
			return err
		}
		x.fetched.Add(pc.n)
		if count {
			x.streamed.Add(pc.n)
			x.report(r.firstLayer, false)
		}
	}
	return nil
}

// digestRange re-reads what range r wrote (in source order). When withB3
// is set it returns the BLAKE3 range digest of those bytes (else ""). When
// sha is not nil it is fed every byte of the range in source order:
// written bytes re-read from the destinations, gap bytes from the range's
// spill file. Consecutive written pieces are gathered into buf and each
// full buffer is hashed by both hashes at once.
func (x *executor) digestRange(r srcRange, sha io.Writer, buf []byte, withB3 bool) (string, error) {
	var b3 *blake3.Hasher
	if withB3 {
		b3 = blake3.New()
		var hdr [32]byte
		copy(hdr[:8], "qpackrng")
		binary.LittleEndian.PutUint64(hdr[8:], uint64(r.id))
		binary.LittleEndian.PutUint64(hdr[16:], uint64(r.off))
		binary.LittleEndian.PutUint64(hdr[24:], uint64(r.end))
		b3.Write(hdr[:])
	}
	var gap *os.File
	var gapOff int64
	defer func() {
		if gap != nil {
			gap.Close()
		}
	}()
	fill := 0 // bytes of buf holding written bytes not yet hashed
	flush := func() {
		if fill == 0 {
			return
		}
		b := buf[:fill]
		if sha != nil && b3 != nil && fill >= 64<<10 {
			done := make(chan struct{})
			go func() { b3.Write(b); close(done) }()
			sha.Write(b)
			<-done
		} else {
			if b3 != nil {
				b3.Write(b)
			}
			if sha != nil {
				sha.Write(b)
			}
		}
		fill = 0
	}
	err := x.m.forEach(r, func(pc piece) error {
		if pc.dst == dstGap {
			if sha == nil {
				return nil
			}
			flush()
			if gap == nil {
				f, err := os.Open(x.gapPath(r.id))
				if err != nil {
					return fmt.Errorf("gap bytes of range %d: %w", r.id, err)
				}
				gap = f
			}
			for done := int64(0); done < pc.n; {
				n := min(int64(len(buf)), pc.n-done)
				if _, err := gap.ReadAt(buf[:n], gapOff+done); err != nil {
					return fmt.Errorf("gap bytes of range %d: %w", r.id, err)
				}
				sha.Write(buf[:n])
				done += n
			}
			gapOff += pc.n
			return nil
		}
		for done := int64(0); done < pc.n; {
			if fill == len(buf) {
				flush()
			}
			n := min(int64(len(buf)-fill), pc.n-done)
			if err := x.readPiece(pc, done, buf[fill:fill+int(n)]); err != nil {
				return err
			}
			fill += int(n)
			done += n
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	flush()
	if b3 == nil {
		return "", nil
	}
	return hex.EncodeToString(b3.Sum(nil)), nil
}

// verifyRange reports whether the bytes completed range r wrote are still
// on disk: its BLAKE3 digest, or for a gapless range its sha256 from the
// chain state before it, must match the journal.
func (x *executor) verifyRange(r srcRange, buf []byte) (bool, error) {
	if want := x.j.Digests[r.id]; want != "" || !r.gapless() {
		d, err := x.digestRange(r, nil, buf, true)
		return err == nil && d == want, err
	}
	h, err := x.j.chainStart(r)
	if err != nil {
		return false, err
	}
	if _, err := x.digestRange(r, h, buf, false); err != nil {
		return false, err
	}
	st, err := marshalState(h)
	return err == nil && st == x.j.Chain[r.id], err
}

// checkCompleted re-checks every completed range and returns those whose
// bytes on disk no longer match the journal.
func (x *executor) checkCompleted(ctx context.Context, progress func(done int64)) ([]srcRange, error) {
	var (
		mu      sync.Mutex
		damaged []srcRange
		first   error
		next    atomic.Int64
		done    atomic.Int64
		wg      sync.WaitGroup
	)
	for w := 0; w < max(1, min(x.workers, 4)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, x.tile)
			for {
				k := int(next.Add(1) - 1)
				if k >= x.j.Frontier || ctx.Err() != nil {
					return
				}
				r := x.m.ranges[k]
				ok, err := x.verifyRange(r, buf)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if err == nil && !ok {
					damaged = append(damaged, r)
				}
				mu.Unlock()
				if progress != nil {
					progress(done.Add(r.copied))
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sortRanges(damaged)
	return damaged, nil
}

func sortRanges(rs []srcRange) {
	for i := 1; i < len(rs); i++ {
		for k := i; k > 0 && rs[k].id < rs[k-1].id; k-- {
			rs[k], rs[k-1] = rs[k-1], rs[k]
		}
	}
}

// run executes the redo ranges and every range from the frontier on, with
// x.workers concurrent fetches; one committer re-reads each range in order,
// hashes it, and records it in the journal.
func (x *executor) run(ctx context.Context, redo []srcRange) error {
	var jobs []*rangeJob
	for _, r := range redo {
		jobs = append(jobs, &rangeJob{r: r, redo: true, done: make(chan error, 1)})
	}
	for k := x.j.Frontier; k < len(x.m.ranges); k++ {
		jobs = append(jobs, &rangeJob{r: x.m.ranges[k], done: make(chan error, 1)})
	}
	if len(jobs) == 0 {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(x.partial, gapDir), 0o755); err != nil {
		return err
	}
	x.inflight.init(x.j.Partial)
	if n := len(x.j.Partial); n > 0 {
		var b int64
		for _, p := range x.j.Partial {
			b += p.Done
		}
		x.log.Info("resuming ranges in flight", "ranges", n, "bytes", b)
		// Counted as in place from the start (a prefix found damaged is
		// taken back), so progress shows them as resumed, not as speed.
		x.streamed.Add(b)
	}
	x.j.Partial = nil // commits take the records from x.inflight
	if x.reporter.interval == 0 {
		x.reporter.interval = 100 * time.Millisecond
	}
	x.reporter.lastLayer = -1
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// window bounds how far the workers run ahead of the committer.
	window := make(chan struct{}, x.window)
	feed := make(chan *rangeJob)
	var wg sync.WaitGroup
	go func() {
		defer close(feed)
		for _, jb := range jobs {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case feed <- jb:
			case <-ctx.Done():
				return
			}
		}
	}()
	for w := 0; w < x.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, x.tile)
			for jb := range feed {
				jb.done <- x.fetch(ctx, jb, buf)
			}
		}()
	}
	err := x.commitLoop(ctx, jobs, window)
	cancel()
	wg.Wait()
	return err
}

func (x *executor) commitLoop(ctx context.Context, jobs []*rangeJob, window chan struct{}) error {
	buf := make([]byte, x.tile)
	var sha *shardHash
	if x.j.Frontier < len(x.m.ranges) {
		var err error
		if sha, err = x.j.hashAtFrontier(x.shards[x.m.ranges[x.j.Frontier].shard]); err != nil {
			return err
		}
	}
	jw := newJournalWriter(x)
	defer jw.close()
	var (
		dirty       bool
		sinceCommit int64
		lastCommit  = time.Now()
		pendingRedo int
	)
	for _, jb := range jobs {
		if jb.redo {
			pendingRedo++
		}
	}
	if pendingRedo == 0 {
		if err := x.sealComplete(); err != nil {
			return err
		}
	}
	// commit hands a snapshot of the journal to the writer, which fsyncs
	// the container's files and then replaces the journal, while the
	// ranges after it go on.
	savedGen := x.inflight.gen.Load() // the in-flight records as last saved
	commit := func() {
		gen := x.inflight.gen.Load()
		if !dirty && gen == savedGen {
			return
		}
		snap := x.j.snapshot()
		snap.Partial = x.inflight.list(snap.Frontier)
		if x.hooks != nil {
			// Tests stop at exact frontiers: commit in line.
			jw.writeNow(snap)
		} else {
			jw.submit(snap)
		}
		dirty, sinceCommit, lastCommit, savedGen = false, 0, time.Now(), gen
	}
	// While a range is slow to arrive, the progress inside the ranges in
	// flight is saved every commitEvery.
	var tick <-chan time.Time
	if x.commitEvery > 0 {
		t := time.NewTicker(x.commitEvery)
		defer t.Stop()
		tick = t.C
	}
	defer x.report(-1, true)
	for _, jb := range jobs {
		var ferr error
	wait:
		for {
			select {
			case ferr = <-jb.done:
				break wait
			case <-ctx.Done():
				ferr = ctx.Err()
				break wait
			case <-tick:
				if time.Since(lastCommit) >= x.commitEvery {
					commit()
				}
			}
		}
		if err := jw.error(); err != nil && ferr == nil {
			ferr = err
		}
		if ferr != nil {
			// Keep what is complete.
			commit()
			if cerr := jw.close(); cerr != nil {
				x.log.Warn("could not save the journal", "err", cerr)
			}
			return ferr
		}
		r := jb.r
		if jb.redo {
			ok, err := x.verifyRange(r, buf)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("source shard %s, bytes %d-%d: fetched again after damage on disk, the bytes differ from those fetched before: the source changed under the journal (rerun with --discard-partial to start over)", x.shards[r.shard].Name(), r.off, r.end)
			}
			x.redone++
			pendingRedo--
		} else {
			if r.id != x.j.Frontier {
				return fmt.Errorf("internal error: committing range %d at frontier %d", r.id, x.j.Frontier)
			}
			// A gapless range is checked later through the sha256 chain;
			// only a range with gap bytes needs a digest of its own.
			hw, headerErr := x.guardHeader(r, sha)
			d, err := x.digestRange(r, hw, buf, !r.gapless())
			if err == nil {
				err = headerErr()
			}
			if err != nil {
				return err
			}
			st, err := marshalState(sha.sha)
			if err != nil {
				return err
			}
			os.Remove(x.gapPath(r.id))
			x.inflight.drop(r.id)
			x.j.Digests = append(x.j.Digests, d)
			x.j.Chain = append(x.j.Chain, st)
			x.j.Frontier++
			last := x.j.Frontier == len(x.m.ranges) || x.m.ranges[x.j.Frontier].shard != r.shard
			if last {
				sh := x.shards[r.shard]
				got := hex.EncodeToString(sha.sha.Sum(nil))
				kind, want, gotW := "sha256", sh.SHA256(), got
				if sha.blob != nil {
					kind, want, gotW = "git blob sha1", sh.(gitBlobShard).GitBlobSHA1(), hex.EncodeToString(sha.blob.Sum(nil))
				}
				if want != "" && gotW != want {
					// Forget this shard so a rerun fetches it again.
					jw.close()
					x.resetShard(r.shard)
					if err := x.j.write(x.partial); err != nil {
						x.log.Warn("could not save the journal", "err", err)
					}
					return &ShardMismatchError{Shard: sh.Name(), Kind: kind, Expected: want, Got: gotW}
				}
				x.j.ShardSHA256 = append(x.j.ShardSHA256, got)
				if err := x.j.setHashState(nil); err != nil {
					return err
				}
				if x.j.Frontier < len(x.m.ranges) {
					sha = newShardHash(x.shards[x.m.ranges[x.j.Frontier].shard])
				}
			} else if err := x.j.setHashState(sha); err != nil {
				return err
			}
		}
		if pendingRedo == 0 {
			if err := x.sealComplete(); err != nil {
				return err
			}
		}
		<-window
		dirty = true
		sinceCommit += r.end - r.off
		if sinceCommit >= x.commitBytes || time.Since(lastCommit) >= x.commitEvery {
			commit()
		}
	}
	commit()
	return jw.close()
}

// sealComplete seals every layer whose ranges are all complete (before the
// frontier), so that the Writer hashes its file in the background while
// the copy goes on. It is called only when no redo range is pending: then
// no worker writes to a layer whose last range is before the frontier.
func (x *executor) sealComplete() error {
	if x.sealed == nil {
		x.sealed = make([]bool, len(x.m.layerLast))
	}
	for l, last := range x.m.layerLast {
		if !x.sealed[l] && last < x.j.Frontier {
			if err := x.w.SealLayer(l); err != nil {
				return err
			}
			x.sealed[l] = true
		}
	}
	return nil
}

// journalWriter makes journal commits in the background: each fsyncs the
// container's files, then atomically replaces the journal with a snapshot
// taken after the ranges it records were written. A snapshot still waiting
// when a newer one arrives is dropped.
type journalWriter struct {
	x       *executor
	wmu     sync.Mutex // serializes writes
	mu      sync.Mutex
	cond    *sync.Cond
	pending *journal
	closed  bool
	err     error
	done    chan struct{}
}

func newJournalWriter(x *executor) *journalWriter {
	jw := &journalWriter{x: x, done: make(chan struct{})}
	jw.cond = sync.NewCond(&jw.mu)
	go jw.loop()
	return jw
}

func (jw *journalWriter) loop() {
	defer close(jw.done)
	for {
		jw.mu.Lock()
		for jw.pending == nil && !jw.closed {
			jw.cond.Wait()
		}
		snap := jw.pending
		jw.pending = nil
		closed := jw.closed
		jw.mu.Unlock()
		if snap == nil && closed {
			return
		}
		jw.write(snap)
	}
}

func (jw *journalWriter) write(snap *journal) {
	jw.wmu.Lock()
	defer jw.wmu.Unlock()
	err := jw.x.w.Sync()
	if err == nil {
		err = snap.write(jw.x.partial)
	}
	jw.mu.Lock()
	if err != nil && jw.err == nil {
		jw.err = err
	}
	jw.mu.Unlock()
	if err == nil && jw.x.hooks != nil && jw.x.hooks.afterCommit != nil {
		jw.x.hooks.afterCommit(snap.Frontier)
	}
}

// writeNow commits snap before returning.
func (jw *journalWriter) writeNow(snap *journal) {
	jw.mu.Lock()
	jw.pending = nil
	jw.mu.Unlock()
	jw.write(snap)
}

func (jw *journalWriter) submit(j *journal) {
	jw.mu.Lock()
	jw.pending = j
	jw.cond.Signal()
	jw.mu.Unlock()
}

func (jw *journalWriter) error() error {
	jw.mu.Lock()
	defer jw.mu.Unlock()
	return jw.err
}

// close writes what is pending, stops the writer and returns its first
// error. It may be called more than once.
func (jw *journalWriter) close() error {
	jw.mu.Lock()
	jw.closed = true
	jw.cond.Signal()
	jw.mu.Unlock()
	<-jw.done
	return jw.error()
}

// resetShard drops the journal's record of shard s (all its ranges are
// before or at the frontier), so that it is fetched again.
func (x *executor) resetShard(s int) {
	first := -1
	for _, r := range x.m.ranges {
		if r.shard == s {
			first = r.id
			break
		}
	}
	if first < 0 || first > x.j.Frontier {
		return
	}
	x.j.Frontier = first
	x.j.Digests = x.j.Digests[:first]
	x.j.Chain = x.j.Chain[:first]
	if len(x.j.ShardSHA256) > s {
		x.j.ShardSHA256 = x.j.ShardSHA256[:s]
	}
	x.j.HashState, x.j.BlobState = "", ""
}
