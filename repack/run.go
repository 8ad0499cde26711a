package repack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/qpack-go/qpack/checkpoint"
	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/qpack"
)

// Options configures Run. Exactly one of FromHF, FromDir and Source names
// the input.
type Options struct {
	FromHF   string  // Hub repo id "org/name"
	Revision string  // branch, tag or commit for FromHF ("" = main)
	FromDir  string  // local checkpoint directory
	Source   *Source // a source opened by the caller (Run does not close it)

	// Cache use for FromHF (see package checkpoint): files whose blobs the
	// official cache holds are read from it, the rest fetched.
	CacheDir string // the cache root ("" = HF_HUB_CACHE / HF_HOME rules)
	NoCache  bool   // fetch everything from the Hub
	Offline  bool   // read the cache only (also on with HF_HUB_OFFLINE=1)

	Output         string // the .qpack directory to create
	Connections    int    // concurrent range reads (0: 8 for the Hub, 2 for a directory)
	Overwrite      bool   // replace an existing container at Output
	DiscardPartial bool   // throw away a partial repack of Output instead of resuming it

	// Hub client settings (FromHF only).
	Token      string
	Endpoint   string        // "" = HF_ENDPOINT or https://huggingface.co
	HTTPClient *http.Client  // nil = the client's own transport
	Hub        hfhub.Options // further client tuning (retries, stall timeout); Token/Endpoint above win

	RangeSize   int64 // bytes per range read (0 = DefaultRangeSize)
	TileSize    int   // per-worker streaming buffer (0 = DefaultTileSize)
	Reserve     int64 // free space to leave on the output's file system (0 = 1 GiB, < 0 = none)
	ToolVersion string

	// OnProgress, if set, is called with the progress of each phase (from
	// one goroutine at a time).
	OnProgress func(Progress)
	Logger     *slog.Logger

	hooks *testHooks
}

// Progress is one progress report.
type Progress struct {
	Phase string // "check" (re-checking a partial repack), "copy", "finish" (hashing), "download" (prebuilt)
	Done  int64  // bytes
	Total int64
	Layer int // the expert layer being written, -1 when none
}

// ShardResult describes one source shard.
type ShardResult struct {
	Name     string `json:"name"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
	Verified bool   `json:"verified"` // checked against a hash the source published
}

// Result summarizes a repack.
type Result struct {
	Output          string          `json:"output"`
	Mode            string          `json:"mode"` // "repack" or "prebuilt"
	AlreadyComplete bool            `json:"already_complete,omitempty"`
	Resumed         bool            `json:"resumed,omitempty"`
	Source          qpack.Source    `json:"-"`
	Repo            string          `json:"repo,omitempty"`
	Revision        string          `json:"revision,omitempty"`
	Commit          string          `json:"commit,omitempty"`
	SourceDir       string          `json:"source_dir,omitempty"`
	Shards          []ShardResult   `json:"shards"`
	Skipped         []SkippedTensor `json:"skipped_tensors"`
	SkippedBytes    int64           `json:"skipped_bytes"`
	SourceBytes     int64           `json:"source_bytes"`  // all shards
	FetchedBytes    int64           `json:"fetched_bytes"` // read from the source by this run
	OutputBytes     int64           `json:"output_bytes"`  // the container's files
	Ranges          int             `json:"ranges"`
	RangesReused    int             `json:"ranges_reused"` // complete from an earlier run, checked on disk
	RangesRedone    int             `json:"ranges_redone"` // found damaged on disk and fetched again
	Seconds         float64         `json:"seconds"`
	Throughput      float64         `json:"bytes_per_second"` // FetchedBytes / Seconds
	Manifest        *qpack.Manifest `json:"-"`
}

// ErrExists is returned when Output already exists and Overwrite is off.
var ErrExists = errors.New("output already exists")

// Run repacks a checkpoint into a .qpack container (or downloads a Hub repo
// that already holds one). It is safe to kill at any point: run it again
// with the same options to resume.
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Output == "" {
		return nil, errors.New("no output path")
	}
	n := 0
	for _, s := range []bool{o.FromHF != "", o.FromDir != "", o.Source != nil} {
		if s {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("give exactly one source: a Hub repo or a local directory")
	}
	out, err := filepath.Abs(o.Output)
	if err != nil {
		return nil, err
	}
	o.Output = filepath.Clean(out)
	if st, err := os.Stat(filepath.Dir(o.Output)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("the directory of the output, %s, does not exist", filepath.Dir(o.Output))
	}
	if err := checkOutput(o.Output, o.Overwrite, sourceDirs(o)...); err != nil {
		return nil, err // before anything is written (output.go)
	}
	res, err := run(ctx, o, start)
	if err != nil && ctx.Err() != nil {
		return res, fmt.Errorf("interrupted (%w); run the same command again to resume", err)
	}
	return res, err
}

func run(ctx context.Context, o Options, start time.Time) (*Result, error) {
	if o.Connections > 64 {
		o.Connections = 64
	}
	src := o.Source
	switch {
	case o.FromDir != "":
		ds, err := OpenDir(o.FromDir)
		if err != nil {
			return nil, err
		}
		defer ds.Close()
		src = ds
		if o.Connections <= 0 {
			o.Connections = 2
		}
	case o.FromHF != "":
		hs, err := openHub(ctx, o)
		if err != nil {
			return nil, err
		}
		defer hs.Close()
		if o.Connections <= 0 {
			o.Connections = 8
		}
		if pre, err := isPrebuilt(ctx, hs); err != nil {
			return nil, err
		} else if pre {
			if hs.Client() == nil {
				return nil, fmt.Errorf("%s holds a prebuilt container, which is downloaded, not read from the cache: run online", hs)
			}
			return runPrebuilt(ctx, o, hs.Client(), hs, start)
		}
		src = hs
	}
	if o.Connections <= 0 {
		o.Connections = 2
	}
	if _, err := CheckConfig(ctx, src); err != nil { // before any shard byte
		return nil, err
	}
	if err := src.OpenShards(ctx); err != nil {
		return nil, err
	}
	return repack(ctx, o, src, start)
}

// PlanSource reads config.json and every shard header of src and builds the
// plan; any inconsistency is an error that names the file and tensor.
func PlanSource(ctx context.Context, src *Source) (*Plan, error) {
	cfg, err := CheckConfig(ctx, src)
	if err != nil {
		return nil, err
	}
	if err := src.OpenShards(ctx); err != nil {
		return nil, err
	}
	shards := sourceShards(src)
	if err := cfg.checkTensors(shards); err != nil {
		return nil, err
	}
	return BuildPlan(cfg, shards)
}

func repack(ctx context.Context, o Options, src *Source, start time.Time) (*Result, error) {
	log := o.Logger
	plan, err := PlanSource(ctx, src)
	if err != nil {
		return nil, err
	}
	rangeSize := o.RangeSize
	if rangeSize == 0 {
		rangeSize = DefaultRangeSize
	}
	tile := o.TileSize
	if tile <= 0 {
		tile = DefaultTileSize
	}
	tile = int(min(int64(tile), rangeSize))
	m, err := newLayoutMap(plan, rangeSize)
	if err != nil {
		return nil, err
	}
	// Read the side files now: a missing config or a bad tokenizer file is
	// an error before anything is written.
	aux := map[string][]byte{}
	for _, name := range AuxFiles {
		data, err := src.ReadFile(ctx, name, maxAuxSize)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		aux[name] = data
	}

	res := &Result{Output: o.Output, Mode: "repack", Source: src.Info(), Skipped: plan.Skipped, SkippedBytes: plan.SkippedBytes(),
		SourceBytes: plan.SourceBytes(), Ranges: len(m.ranges)}
	info := src.Info()
	res.Repo, res.Revision, res.Commit = info.Repo, info.Revision, info.Commit
	if info.Repo == "" {
		res.SourceDir = info.Dir
	}
	if res.Skipped == nil {
		res.Skipped = []SkippedTensor{}
	}

	unlock, err := lockOutput(o.Output)
	if err != nil {
		return nil, err
	}
	defer unlock()

	partial := o.Output + ".partial"
	fp := plan.Fingerprint()
	ident := src.Identity()

	// An existing container.
	if _, err := os.Lstat(o.Output); err == nil && !o.Overwrite {
		if done, m := completeMatch(o.Output, plan, src); done {
			log.Info("the container is already complete", "output", o.Output)
			res.AlreadyComplete = true
			res.Manifest = m
			fillShardResults(res, plan, m.Ext.Source.Shards, nil)
			res.OutputBytes = filesBytes(m)
			res.Seconds = time.Since(start).Seconds()
			if _, err := os.Lstat(partial); err == nil {
				os.RemoveAll(partial)
			}
			return res, nil
		}
		return nil, fmt.Errorf("%s: %w (use --overwrite to replace it)", o.Output, ErrExists)
	}

	// A partial one.
	var j *journal
	resume := false
	if _, err := os.Lstat(partial); err == nil {
		if o.DiscardPartial {
			log.Info("discarding the partial repack", "dir", partial)
			if err := os.RemoveAll(partial); err != nil {
				return nil, err
			}
		} else {
			j, err = readJournal(partial)
			switch {
			case errors.Is(err, errNoJournal):
				if _, merr := os.Lstat(filepath.Join(partial, qpack.ManifestName)); merr == nil {
					// Killed after Finish wrote the manifest and removed
					// its working files, before the rename.
					r, err := placeFinished(partial, o, plan, src, res, start)
					if err == nil || !errors.Is(err, errStale) {
						return r, err
					}
					log.Warn("the finished partial container does not check out; starting over", "dir", partial, "err", err)
				}
				// Killed before the first journal write: nothing to keep.
				if err := os.RemoveAll(partial); err != nil {
					return nil, err
				}
			case err != nil:
				return nil, fmt.Errorf("%w; rerun with --discard-partial to start over", err)
			default:
				if why := j.mismatch(fp, rangeSize, ident); why != "" {
					return nil, fmt.Errorf("%s holds a partial repack of %s; rerun with --discard-partial to throw it away and start over", partial, why)
				}
				if err := j.check(m, shardsOf(src)); err != nil {
					return nil, fmt.Errorf("resume journal %s is inconsistent (%v); rerun with --discard-partial to start over", journalPath(partial), err)
				}
				resume = true
			}
		}
	}
	if j == nil {
		j = newJournal(fp, rangeSize, ident, len(m.ranges))
	}
	res.Resumed = resume

	// Free space: what is left to write, the gap spill window, a reserve.
	var doneCopied int64
	for k := 0; k < j.Frontier; k++ {
		doneCopied += m.ranges[k].copied
	}
	var auxBytes int64
	for _, d := range aux {
		auxBytes += int64(len(d))
	}
	total := plan.DenseBytes() + plan.ExpertBytes() + auxBytes
	window := 2*o.Connections + 2
	need := total - doneCopied + int64(window)*rangeSize
	if err := checkFreeSpace(filepath.Dir(o.Output), need, o.Reserve); err != nil {
		return nil, err
	}

	w, err := qpack.Create(o.Output, plan.Layout, qpack.CreateOptions{TempDir: partial, Resume: resume, Overwrite: o.Overwrite,
		HashProgress: func(done, total int64) {
			if o.OnProgress != nil {
				o.OnProgress(Progress{Phase: "finish", Done: done, Total: total, Layer: -1})
			}
		}})
	if err != nil {
		return nil, err
	}
	closeW := true
	defer func() {
		if closeW {
			w.Close()
		}
	}()
	if _, err := w.CreateDense(plan.DenseSpecs, plan.DenseMeta); err != nil {
		return nil, err
	}
	if !resume {
		if err := j.write(partial); err != nil {
			return nil, err
		}
	}
	dense, err := os.Open(filepath.Join(partial, qpack.DenseName))
	if err != nil {
		return nil, err
	}
	defer dense.Close()
	for _, name := range AuxFiles {
		if data, ok := aux[name]; ok {
			if err := w.AddFile(name, bytes.NewReader(data)); err != nil {
				return nil, err
			}
		}
	}

	x := &executor{plan: plan, m: m, shards: shardsOf(src), w: w, partial: partial, dense: dense, j: j, log: log,
		workers: o.Connections, window: window, tile: tile, commitBytes: 256 << 20, commitEvery: 2 * time.Second, hooks: o.hooks}
	if o.hooks != nil {
		x.commitBytes, x.commitEvery = 0, 0
	}

	var redo []srcRange
	if resume && j.Frontier > 0 {
		res.RangesReused = j.Frontier
		var totalDone int64
		for k := 0; k < j.Frontier; k++ {
			totalDone += m.ranges[k].copied
		}
		redo, err = x.checkCompleted(ctx, func(done int64) {
			if o.OnProgress != nil {
				o.OnProgress(Progress{Phase: "check", Done: done, Total: totalDone, Layer: -1})
			}
		})
		if err != nil {
			return nil, err
		}
		if len(redo) > 0 {
			log.Warn("damaged ranges found in the partial repack; fetching them again", "ranges", len(redo))
			res.RangesReused -= len(redo)
		}
		log.Info("resuming", "output", o.Output, "complete", j.Frontier, "of", len(m.ranges))
	}
	var srcTotal, srcDone int64
	for _, r := range m.ranges {
		srcTotal += r.end - r.off
	}
	for k := 0; k < j.Frontier; k++ {
		srcDone += m.ranges[k].end - m.ranges[k].off
	}
	x.progress = func(done int64, layer int) {
		if o.OnProgress != nil {
			o.OnProgress(Progress{Phase: "copy", Done: srcDone + done, Total: srcTotal, Layer: layer})
		}
	}
	copyStart := time.Now()
	if err := x.run(ctx, redo); err != nil {
		res.FetchedBytes = x.fetched.Load()
		err = blameCache(err, src)
		var hm *checkpoint.HeaderMismatchError
		if errors.As(err, &hm) {
			// Everything in the partial directory was laid out by a plan
			// from a header that is not the source's: none of it is kept.
			closeW = false
			w.Close()
			dense.Close()
			if rerr := os.RemoveAll(partial); rerr == nil {
				err = fmt.Errorf("%w; the partial repack planned from it was discarded", err)
			}
		}
		return nil, err
	}
	res.FetchedBytes = x.fetched.Load()
	res.RangesRedone = x.redone
	if o.hooks != nil && o.hooks.beforeFinish != nil {
		if err := o.hooks.beforeFinish(); err != nil {
			return nil, err
		}
	}
	if j.Frontier != len(m.ranges) {
		return nil, fmt.Errorf("internal error: %d of %d ranges complete after the run", j.Frontier, len(m.ranges))
	}
	os.RemoveAll(filepath.Join(partial, gapDir))

	info.Shards = make([]qpack.Shard, len(plan.Shards))
	for i, s := range plan.Shards {
		info.Shards[i] = qpack.Shard{Name: s.Name, Size: s.Size, SHA256: j.ShardSHA256[i]}
	}
	log.Debug("ranges copied", "seconds", time.Since(copyStart).Seconds(), "bytes", x.fetched.Load())
	closeW = false
	finishStart := time.Now()
	man, err := w.Finish(manifestInfo(plan, info, o.ToolVersion))
	if err != nil {
		return nil, err
	}
	log.Debug("container finished", "seconds", time.Since(finishStart).Seconds())
	res.Manifest = man
	fillShardResults(res, plan, info.Shards, shardsOf(src))
	res.OutputBytes = filesBytes(man)
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.Throughput = float64(res.FetchedBytes) / res.Seconds
	}
	return res, nil
}

func manifestInfo(plan *Plan, info qpack.Source, tool string) qpack.ManifestInfo {
	mi := qpack.ManifestInfo{ModelName: plan.Config.ModelType, SourceCheckpoint: info.Dir, ToolVersion: tool, Source: info}
	if plan.QuantBits > 0 {
		b, g := plan.QuantBits, plan.QuantGroup
		mi.QuantBits, mi.QuantGroupSize = &b, &g
	}
	return mi
}

// fillShardResults reports the shards; src (nil when nothing was streamed)
// says which had a published hash that their bytes were checked against.
func fillShardResults(res *Result, plan *Plan, shards []qpack.Shard, src []Shard) {
	res.Shards = make([]ShardResult, len(shards))
	for i, s := range shards {
		res.Shards[i] = ShardResult{Name: s.Name, Size: s.Size, SHA256: s.SHA256}
		if i < len(plan.Shards) && plan.Shards[i].SHA256 != "" && plan.Shards[i].SHA256 == s.SHA256 {
			res.Shards[i].Verified = true
		}
		if i < len(src) {
			if g, ok := src[i].(gitBlobShard); ok && g.GitBlobSHA1() != "" {
				res.Shards[i].Verified = true
			}
		}
	}
}

func filesBytes(m *qpack.Manifest) int64 {
	var n int64
	for _, s := range m.Files {
		n += s
	}
	return n
}

// mismatch says how a journal's identity differs from this run's, or "".
func (j *journal) mismatch(fp string, rangeSize int64, ident string) string {
	switch {
	case j.Source != ident:
		return fmt.Sprintf("another source (%s, now %s)", j.Source, ident)
	case j.Plan != fp:
		return fmt.Sprintf("another plan (fingerprint %.12s, now %.12s: the checkpoint's headers or this tool changed)", j.Plan, fp)
	case j.RangeSize != rangeSize:
		return fmt.Sprintf("another range size (%d, now %d)", j.RangeSize, rangeSize)
	}
	return ""
}

// completeMatch reports whether dir is a complete container made from the
// same source with the same plan. Only a Hub source (pinned commit, shards
// with published sha256) is trusted this way.
func completeMatch(dir string, plan *Plan, src *Source) (bool, *qpack.Manifest) {
	if src.Kind() != checkpoint.KindHub {
		return false, nil
	}
	c, err := qpack.Open(dir)
	if err != nil {
		return false, nil
	}
	defer c.Close()
	m := c.Manifest
	if m.Ext == nil || m.Ext.Source.Repo != src.Repo() || m.Ext.Source.Commit != src.Commit() || len(m.Ext.Source.Shards) != len(plan.Shards) {
		return false, nil
	}
	for i, s := range plan.Shards {
		g := m.Ext.Source.Shards[i]
		if g.Name != s.Name || g.Size != s.Size || s.SHA256 == "" || g.SHA256 != s.SHA256 {
			return false, nil
		}
	}
	a, _ := c.Layout.Marshal()
	b, _ := plan.Layout.Marshal()
	if !bytes.Equal(a, b) || m.Files[qpack.DenseName] != plan.DenseBytes() {
		return false, nil
	}
	return true, m
}

var errStale = errors.New("stale partial container")

// placeFinished completes a partial directory whose manifest was written
// (a run killed between Finish's last steps): it checks that the manifest
// is this plan's and that every file still hashes to its digest, then
// renames it into place.
func placeFinished(partial string, o Options, plan *Plan, src *Source, res *Result, start time.Time) (*Result, error) {
	c, err := qpack.Open(partial)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errStale, err)
	}
	m := c.Manifest
	c.Close()
	info := src.Info()
	if m.Ext == nil || m.Ext.Source.Repo != info.Repo || m.Ext.Source.Commit != info.Commit || len(m.Ext.Source.Shards) != len(plan.Shards) {
		return nil, fmt.Errorf("%w: made from another source", errStale)
	}
	for i, s := range plan.Shards {
		g := m.Ext.Source.Shards[i]
		if g.Name != s.Name || g.Size != s.Size || (s.SHA256 != "" && g.SHA256 != s.SHA256) {
			return nil, fmt.Errorf("%w: made from another source", errStale)
		}
	}
	if m.Ext.Source.Repo == "" && m.Ext.Source.Dir != info.Dir {
		return nil, fmt.Errorf("%w: made from another source", errStale)
	}
	lb, _ := plan.Layout.Marshal()
	got, err := os.ReadFile(filepath.Join(partial, filepath.FromSlash(qpack.LayoutName)))
	if err != nil || !bytes.Equal(got, lb) {
		return nil, fmt.Errorf("%w: another layout", errStale)
	}
	if err := verifyDigests(partial, m, o.OnProgress); err != nil {
		return nil, fmt.Errorf("%w: %v", errStale, err)
	}
	if err := placeDir(partial, o.Output, o.Overwrite); err != nil {
		return nil, err
	}
	res.Manifest = m
	res.Resumed = true
	fillShardResults(res, plan, m.Ext.Source.Shards, nil)
	res.OutputBytes = filesBytes(m)
	res.RangesReused = res.Ranges
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// verifyDigests hashes every file of the container in dir and compares it
// with the manifest's digests.
func verifyDigests(dir string, m *qpack.Manifest, onProgress func(Progress)) error {
	if m.Ext == nil || m.Ext.FileDigests == nil {
		return errors.New("the manifest has no digests")
	}
	var total, done int64
	for _, n := range m.Files {
		total += n
	}
	for _, p := range m.SortedFiles() {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		d, err := qpack.DigestFile(f, func(n int64) {
			done += n
			if onProgress != nil {
				onProgress(Progress{Phase: "check", Done: done, Total: total, Layer: -1})
			}
		})
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if d != m.Ext.FileDigests[p] {
			return fmt.Errorf("%s: digest %s, the manifest says %s", p, d, m.Ext.FileDigests[p])
		}
	}
	return nil
}

// placeDir renames tmp to dst, replacing dst (only a container: see
// qpack.ReplaceDir) when overwrite is set, and fsyncs the parent directory.
func placeDir(tmp, dst string, overwrite bool) error {
	if _, err := os.Lstat(dst); err == nil && !overwrite {
		return fmt.Errorf("%s: %w", dst, ErrExists)
	}
	return qpack.ReplaceDir(tmp, dst)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// isPrebuilt reports whether the repo's top-level manifest.json is a qpack
// manifest (magic "QPACK").
func isPrebuilt(ctx context.Context, hs *Source) (bool, error) {
	if !hs.Has(qpack.ManifestName) {
		return false, nil
	}
	data, err := hs.ReadFile(ctx, qpack.ManifestName, qpack.MaxManifestSize)
	if err != nil {
		return false, err
	}
	var probe struct {
		Magic string `json:"magic"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.Magic != qpack.Magic {
		return false, nil
	}
	return true, nil
}
