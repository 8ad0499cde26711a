package hfhub

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DownloadRequest says what to download and where.
type DownloadRequest struct {
	Repo     string
	Revision string   // branch, tag or commit; "" → "main"
	Include  []string // fnmatch globs ('*' crosses '/'; "dir/" means "dir/*"); none → everything
	Exclude  []string

	CacheDir string // official cache root; "" → HubCacheDir()
	LocalDir string // if set, plain files here (with .cache/huggingface/download metadata) instead of the cache

	Connections int   // concurrent range requests across all files (0 → 8)
	ChunkSize   int64 // range size for files (0 → 16 MiB); files up to one chunk take one request

	DryRun  bool // list what would be fetched, write nothing
	Offline bool // resolve from the cache only (also on when HF_HUB_OFFLINE=1)

	Progress Progress // nil → silent
}

// Progress receives download events; its methods are called from several
// goroutines at once.
type Progress interface {
	Plan(files int, bytes int64)                // what will be fetched (cached files excluded)
	FileStart(path string, size, already int64) // already: bytes kept from an earlier run
	Add(path string, n int64)                   // n more bytes written
	FileDone(path string, err error)            // verified and in place, or failed
}

// File statuses in a DownloadResult.
const (
	StatusDownloaded = "downloaded" // fetched (possibly resuming an earlier run) and verified
	StatusCached     = "cached"     // already present
	StatusPlanned    = "planned"    // dry run: would be downloaded
	StatusFailed     = "failed"
)

// FileResult describes one file of a download.
type FileResult struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	LFS       bool   `json:"lfs"`
	SHA256    string `json:"sha256,omitempty"`   // LFS files
	GitSHA1   string `json:"git_sha1,omitempty"` // git blob id (of the pointer for LFS files)
	LocalPath string `json:"local_path,omitempty"`
	BlobPath  string `json:"blob_path,omitempty"`
	Status    string `json:"status"`
	Resumed   int64  `json:"resumed_bytes,omitempty"` // bytes reused from an interrupted run
	Error     string `json:"error,omitempty"`
}

// DownloadResult summarizes a download.
type DownloadResult struct {
	Repo            string       `json:"repo"`
	Revision        string       `json:"revision"`
	Commit          string       `json:"commit"`
	SnapshotDir     string       `json:"snapshot_dir,omitempty"`
	LocalDir        string       `json:"local_dir,omitempty"`
	Offline         bool         `json:"offline,omitempty"`
	DryRun          bool         `json:"dry_run,omitempty"`
	Files           []FileResult `json:"files"`
	TotalBytes      int64        `json:"total_bytes"`
	DownloadedBytes int64        `json:"downloaded_bytes"`
}

// Dir returns where the files are: the snapshot or the local dir.
func (r *DownloadResult) Dir() string {
	if r.LocalDir != "" {
		return r.LocalDir
	}
	return r.SnapshotDir
}

type nopProgress struct{}

func (nopProgress) Plan(int, int64)                {}
func (nopProgress) FileStart(string, int64, int64) {}
func (nopProgress) Add(string, int64)              {}
func (nopProgress) FileDone(string, error)         {}

// Download fetches a repository snapshot (or the files matching the
// filters) into the official cache or a local dir. The revision is pinned to
// its commit first and every request uses that commit. Each file is hashed
// (sha256 for LFS files, git blob sha1 otherwise) and enters blobs/ or the
// local dir only if the hash matches. Large files are fetched as parallel
// ranges into a temp file with a resume record, so an interrupted download
// continues where it stopped on the next run.
func (c *Client) Download(ctx context.Context, req DownloadRequest) (*DownloadResult, error) {
	if req.Revision == "" {
		req.Revision = "main"
	}
	if err := checkRepoRev(req.Repo, req.Revision); err != nil {
		return nil, err
	}
	if req.Connections <= 0 {
		req.Connections = 8
	}
	if req.ChunkSize <= 0 {
		req.ChunkSize = 16 << 20
	}
	if req.Progress == nil {
		req.Progress = nopProgress{}
	}
	if req.CacheDir == "" {
		req.CacheDir = HubCacheDir()
	}
	if req.LocalDir != "" {
		abs, err := filepath.Abs(req.LocalDir)
		if err != nil {
			return nil, err
		}
		req.LocalDir = abs
		if err := checkLocalDirPlace(req.LocalDir, req.CacheDir); err != nil {
			return nil, err
		}
	}
	if req.Offline || EnvOffline() {
		return downloadOffline(req)
	}

	info, err := c.ModelInfo(ctx, req.Repo, req.Revision)
	if err != nil {
		return nil, err
	}
	commit := info.SHA
	if isCommit(req.Revision) && commit != req.Revision {
		return nil, fmt.Errorf("%s@%s: %w: the Hub answered commit %s", req.Repo, req.Revision, ErrBadResponse, commit)
	}
	all, err := c.ListFilesOf(ctx, req.Repo, info)
	if err != nil {
		return nil, err
	}
	files := selectFiles(all, req.Include, req.Exclude)

	d := &downloader{c: c, req: req, commit: commit, cache: newCacheRepo(req.CacheDir, req.Repo),
		slots: make(chan struct{}, req.Connections)}
	res := &DownloadResult{Repo: req.Repo, Revision: req.Revision, Commit: commit, DryRun: req.DryRun}
	if req.LocalDir != "" {
		res.LocalDir = req.LocalDir
	} else {
		res.SnapshotDir = d.cache.snapshotDir(commit)
	}
	res.Files = make([]FileResult, len(files))
	var todo []int
	var todoBytes int64
	for i, f := range files {
		res.Files[i] = d.describe(f)
		res.TotalBytes += f.Size
		if d.present(f, &res.Files[i]) {
			res.Files[i].Status = StatusCached
			continue
		}
		res.Files[i].Status = StatusPlanned
		todo = append(todo, i)
		todoBytes += f.Size
	}
	if req.DryRun {
		return res, nil
	}

	if req.LocalDir != "" {
		if err := prepareLocalDir(req.LocalDir); err != nil {
			return nil, fmt.Errorf("local dir %s: %w", req.LocalDir, err)
		}
		if err := writeTreeCacheFile(filepath.Join(req.LocalDir, ".cache", "huggingface", "trees", commit+".json"), all); err != nil {
			c.log.Debug("hub tree cache not written", "err", err.Error())
		}
	} else {
		if err := os.MkdirAll(res.SnapshotDir, 0o755); err != nil {
			return nil, fmt.Errorf("cache %s: %w", req.CacheDir, err)
		}
		writeCacheDirTag(req.CacheDir)
		if err := d.cache.writeTreeCache(commit, all); err != nil {
			c.log.Debug("hub tree cache not written", "err", err.Error())
		}
	}
	req.Progress.Plan(len(todo), todoBytes)

	// Link or adopt what is already there, then fetch the rest with a pool
	// of file workers sharing one pool of connection slots.
	ferrs := make([]error, len(files))
	fail := func(i int, err error) {
		if !strings.Contains(err.Error(), files[i].Path) {
			err = fmt.Errorf("%s: %w", files[i].Path, err)
		}
		ferrs[i] = err
		res.Files[i].Status, res.Files[i].Error = StatusFailed, err.Error()
	}
	for i, f := range files {
		if res.Files[i].Status == StatusCached {
			if err := d.finishPresent(f, &res.Files[i]); err != nil {
				fail(i, err)
			}
		}
	}
	sort.SliceStable(todo, func(a, b int) bool { return files[todo[a]].Size > files[todo[b]].Size })
	work := make(chan int)
	var wg sync.WaitGroup
	workers := min(req.Connections, len(todo))
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				fr := &res.Files[i]
				if err := ctx.Err(); err != nil {
					fail(i, err)
					continue
				}
				err := d.fetch(ctx, files[i], fr)
				req.Progress.FileDone(files[i].Path, err)
				if err != nil {
					fail(i, err)
					continue
				}
				fr.Status = StatusDownloaded
			}
		}()
	}
	for _, i := range todo {
		work <- i
	}
	close(work)
	wg.Wait()
	res.DownloadedBytes = d.downloaded.Load()

	var errs []error
	for _, err := range ferrs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if req.LocalDir == "" && len(errs) == 0 {
		// The ref goes last, pointing at a snapshot that is complete; then
		// what earlier runs left of these files at other commits goes.
		if err := d.cache.writeRef(req.Revision, commit); err != nil {
			errs = append(errs, fmt.Errorf("writing refs/%s: %w", req.Revision, err))
		}
		for _, p := range d.removeStaleParts(files) {
			c.log.Debug("hub removed a stale partial download", "path", p)
		}
	}
	if len(errs) > 0 {
		if ctx.Err() != nil {
			return res, fmt.Errorf("download of %s interrupted: %w", req.Repo, context.Cause(ctx))
		}
		if len(errs) > 5 {
			errs = append(errs[:5], fmt.Errorf("… and %d more files failed", len(errs)-5))
		}
		return res, fmt.Errorf("download of %s incomplete: %w", req.Repo, errors.Join(errs...))
	}
	return res, nil
}

func selectFiles(all []FileInfo, include, exclude []string) []FileInfo {
	paths := make([]string, len(all))
	for i, f := range all {
		paths[i] = f.Path
	}
	keep := map[string]bool{}
	for _, p := range FilterPaths(paths, include, exclude) {
		keep[p] = true
	}
	var out []FileInfo
	for _, f := range all {
		if keep[f.Path] {
			out = append(out, f)
		}
	}
	return out
}

type downloader struct {
	c          *Client
	req        DownloadRequest
	commit     string
	cache      cacheRepo
	slots      chan struct{}
	downloaded atomic.Int64
}

func (d *downloader) describe(f FileInfo) FileResult {
	fr := FileResult{Path: f.Path, Size: f.Size, LFS: f.LFS != nil, GitSHA1: f.BlobID}
	if f.LFS != nil {
		fr.SHA256 = f.LFS.SHA256
	}
	if d.req.LocalDir != "" {
		fr.LocalPath = localPaths(d.req.LocalDir, f.Path).file
	} else {
		fr.LocalPath = d.cache.snapshotPath(d.commit, f.Path)
		fr.BlobPath = d.cache.blobPath(f.ETag())
	}
	return fr
}

// present reports whether f is already in place: in cache mode a blob of
// the right size (the official client trusts blobs it wrote after a size
// check; we only write verified ones); in local-dir mode a file whose
// metadata vouches for this ETag.
func (d *downloader) present(f FileInfo, fr *FileResult) bool {
	if d.req.LocalDir != "" {
		p := localPaths(d.req.LocalDir, f.Path)
		st, err := os.Stat(p.file)
		if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
			return false
		}
		m, ok := readLocalMetadata(p)
		return ok && m.ETag == f.ETag()
	}
	st, err := os.Stat(fr.BlobPath)
	return err == nil && st.Mode().IsRegular() && st.Size() == f.Size
}

// finishPresent makes sure a present file is linked (cache) or its metadata
// names this commit (local dir).
func (d *downloader) finishPresent(f FileInfo, fr *FileResult) error {
	if d.req.LocalDir != "" {
		p := localPaths(d.req.LocalDir, f.Path)
		if m, ok := readLocalMetadata(p); ok && m.Commit == d.commit {
			return nil
		}
		return writeLocalMetadata(p, d.commit, f.ETag(), nowUnix())
	}
	return linkSnapshot(fr.BlobPath, fr.LocalPath)
}

func nowUnix() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// fetch downloads one file under its lock and puts it in place.
func (d *downloader) fetch(ctx context.Context, f FileInfo, fr *FileResult) error {
	var lockPath, part, final string
	if d.req.LocalDir != "" {
		p := localPaths(d.req.LocalDir, f.Path)
		lockPath, part, final = p.lock, p.part, p.file
	} else {
		lockPath, part, final = d.cache.lockPath(f.ETag()), d.cache.partPath(f.ETag()), fr.BlobPath
	}
	lock, err := acquireLock(ctx, lockPath, func() {
		d.c.log.Info("hub waiting for another download of the same file to finish", "file", f.Path, "lock", lockPath)
	})
	if err != nil {
		return fmt.Errorf("locking %s: %w", lockPath, err)
	}
	defer lock.Unlock()

	// Someone else may have finished it while we waited for the lock.
	if d.present(f, fr) {
		return d.finishPresent(f, fr)
	}
	if d.req.LocalDir != "" {
		// What is in the way: ours, the right bytes (adopted), or a user's
		// file that is refused before anything is fetched.
		p := localPaths(d.req.LocalDir, f.Path)
		state, err := inspectLocal(p, f)
		if err != nil {
			return err
		}
		if state == localCurrent || state == localAdopt {
			return writeLocalMetadata(p, d.commit, f.ETag(), nowUnix())
		}
	}

	resumed, err := d.fetchVerified(ctx, f, part)
	if err != nil && resumed > 0 && errors.Is(err, ErrHashMismatch) {
		// What an earlier run left may have been damaged: start over once.
		d.c.log.Debug("hub refetching after a mismatch on resumed data", "file", f.Path)
		resumed, err = d.fetchVerified(ctx, f, part)
	}
	fr.Resumed = resumed
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return err
	}
	if d.req.LocalDir != "" {
		p := localPaths(d.req.LocalDir, f.Path)
		if err := placeLocal(part, p, f); err != nil {
			os.Remove(part) // verified bytes, but they may not go where a user's file is
			os.Remove(part + ".json")
			return err
		}
		os.Remove(part + ".json")
		return writeLocalMetadata(p, d.commit, f.ETag(), nowUnix())
	}
	if err := os.Rename(part, final); err != nil {
		return err
	}
	os.Remove(part + ".json")
	return linkSnapshot(final, fr.LocalPath)
}

// fileHasDigest hashes a whole file.
func fileHasDigest(path string, want Digest, size int64) (bool, error) {
	fh, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer fh.Close()
	h := newHasher(want.Kind, size)
	n, err := io.Copy(h, fh)
	if err != nil {
		return false, err
	}
	return n == size && hex.EncodeToString(h.Sum(nil)) == want.Hex, nil
}

// fetchVerified fills part with f's bytes and checks its hash; on success
// part is synced and complete. It returns how many bytes an earlier run had
// already fetched.
func (d *downloader) fetchVerified(ctx context.Context, f FileInfo, part string) (int64, error) {
	want := f.ExpectedDigest()
	if err := os.MkdirAll(filepath.Dir(part), 0o755); err != nil {
		return 0, err
	}
	if f.Size == 0 {
		if h := hex.EncodeToString(newHasher(want.Kind, 0).Sum(nil)); h != want.Hex {
			return 0, fmt.Errorf("%s: %w: the listing says an empty file has %s %s (empty is %s)", f.Path, ErrHashMismatch, want.Kind, want.Hex, h)
		}
		d.req.Progress.FileStart(f.Path, 0, 0)
		return 0, os.WriteFile(part, nil, 0o644)
	}
	rf, err := d.c.OpenFile(ctx, d.req.Repo, d.commit, f.Path, ReaderOptions{})
	if err != nil {
		return 0, err
	}
	if rf.ETag() != f.ETag() || rf.Size() != f.Size {
		return 0, fmt.Errorf("%s: %w: the listing says %s %s size %d, the resolve answer says ETag %s size %d",
			f.Path, ErrBadResponse, want.Kind, want.Hex, f.Size, rf.ETag(), rf.Size())
	}

	chunk := d.req.ChunkSize
	rec, fh, err := openPart(part, f, d.commit, chunk)
	if err != nil {
		return 0, err
	}
	chunk = rec.ChunkSize
	nChunks := int((f.Size + chunk - 1) / chunk)
	done := make([]bool, nChunks)
	var already int64
	for _, i := range rec.Done {
		done[i] = true
		already += min(chunk, f.Size-int64(i)*chunk)
	}
	d.req.Progress.FileStart(f.Path, f.Size, already)

	hz := newOrderedHasher(fh, want.Kind, f.Size, chunk, nChunks)
	var recorder *resumeWriter
	if nChunks > 1 {
		recorder = newResumeWriter(part+".json", fh, rec, done)
	}
	for i, ok := range done {
		if ok {
			hz.ready(i)
		}
	}
	var ranges []Range
	for i, ok := range done {
		if !ok {
			off := int64(i) * chunk
			ranges = append(ranges, Range{Off: off, Len: min(chunk, f.Size-off)})
		}
	}
	bufs := sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
	err = rf.readRanges(ctx, ranges, d.req.Connections, chunk, 0, d.slots, func(r Range, body io.Reader) error {
		bp := bufs.Get().(*[]byte)
		defer bufs.Put(bp)
		buf := *bp
		pos := r.Off
		for pos < r.End() {
			n, rerr := body.Read(buf[:min(int64(len(buf)), r.End()-pos)])
			if n > 0 {
				if _, werr := fh.WriteAt(buf[:n], pos); werr != nil {
					return fmt.Errorf("writing %s: %w", part, werr)
				}
				pos += int64(n)
				d.downloaded.Add(int64(n))
				d.req.Progress.Add(f.Path, int64(n))
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return rerr
			}
		}
		if pos != r.End() {
			return fmt.Errorf("%s: bytes %d-%d: %w", f.Path, r.Off, r.End()-1, io.ErrUnexpectedEOF)
		}
		idx := int(r.Off / chunk)
		if recorder != nil {
			recorder.markDone(idx)
		}
		hz.ready(idx)
		return nil
	})
	if recorder != nil {
		if rerr := recorder.close(); rerr != nil && err == nil {
			err = rerr
		}
	}
	sum, herr := hz.finish(err != nil)
	if err != nil {
		fh.Close()
		return already, err
	}
	if herr != nil {
		fh.Close()
		return already, fmt.Errorf("hashing %s: %w", part, herr)
	}
	if sum != want.Hex {
		fh.Close()
		os.Remove(part)
		os.Remove(part + ".json")
		return already, fmt.Errorf("%s: %w: %s of the downloaded bytes is %s, the Hub lists %s; the download was discarded",
			f.Path, ErrHashMismatch, want.Kind, sum, want.Hex)
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return already, err
	}
	return already, fh.Close()
}

// openPart opens (or creates) the temp file and its resume record. A record
// that does not match the file (other ETag or size, a missing or resized
// temp file, bad JSON) is discarded along with the temp file. A new record
// is written at once (naming the file's path and commit), so a later run can
// tell whose part this is.
func openPart(part string, f FileInfo, commit string, chunk int64) (*resumeRecord, *os.File, error) {
	etag, size := f.ETag(), f.Size
	if rec, err := readResumeRecord(part + ".json"); err == nil && rec.ETag == etag && rec.Size == size {
		if fh, err := os.OpenFile(part, os.O_RDWR, 0); err == nil {
			if st, err := fh.Stat(); err == nil && st.Size() == size {
				rec.Path, rec.Commit = f.Path, commit
				return rec, fh, nil
			}
			fh.Close()
		}
	}
	os.Remove(part + ".json")
	fh, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, err
	}
	if err := preallocate(fh, size); err != nil {
		fh.Close()
		os.Remove(part)
		return nil, nil, fmt.Errorf("allocating %d bytes for %s: %w", size, part, err)
	}
	rec := &resumeRecord{Version: 1, ETag: etag, Size: size, ChunkSize: chunk, Path: f.Path, Commit: commit}
	if size > 0 {
		b, _ := json.Marshal(rec)
		if err := writeFileAtomic(part+".json", b, 0o644); err != nil {
			fh.Close()
			os.Remove(part)
			return nil, nil, err
		}
	}
	return rec, fh, nil
}

// downloadOffline answers from the cache (or local dir) with no network.
func downloadOffline(req DownloadRequest) (*DownloadResult, error) {
	res := &DownloadResult{Repo: req.Repo, Revision: req.Revision, Offline: true, DryRun: req.DryRun}
	if req.LocalDir != "" {
		return localDirOffline(req, res)
	}
	cr := newCacheRepo(req.CacheDir, req.Repo)
	commit := req.Revision
	if !isCommit(commit) {
		c, err := cr.readRef(req.Revision)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%s@%s: %w: no %s (download it once online, or pass the commit as --revision)", req.Repo, req.Revision, ErrNotCached, cr.refPath(req.Revision))
			}
			return nil, err
		}
		commit = c
	}
	res.Commit = commit
	snap := cr.snapshotDir(commit)
	if st, err := os.Stat(snap); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%s@%s: %w: no snapshot %s", req.Repo, req.Revision, ErrNotCached, snap)
	}
	res.SnapshotDir = snap
	tree, err := cr.readTreeCache(commit)
	if err != nil {
		return nil, err
	}
	var present []string
	err = filepath.WalkDir(snap, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(snap, p)
		if err != nil {
			return err
		}
		if strings.Contains(de.Name(), ".qpack-link-") {
			return nil
		}
		present = append(present, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading snapshot %s: %w", snap, err)
	}
	byPath := map[string]FileInfo{}
	for _, f := range tree {
		byPath[f.Path] = f
	}
	selected := FilterPaths(present, req.Include, req.Exclude)
	if tree != nil {
		have := map[string]bool{}
		for _, p := range present {
			have[p] = true
		}
		var missing []string
		for _, f := range selectFiles(tree, req.Include, req.Exclude) {
			if !have[f.Path] {
				missing = append(missing, f.Path)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			more := ""
			if len(missing) > 5 {
				more = fmt.Sprintf(" and %d more", len(missing)-5)
				missing = missing[:5]
			}
			return nil, fmt.Errorf("%s@%s: %w: the cached snapshot %s lacks %s%s", req.Repo, req.Revision, ErrNotCached, commit, strings.Join(missing, ", "), more)
		}
	}
	for _, p := range selected {
		lp := filepath.Join(snap, filepath.FromSlash(p))
		st, err := os.Stat(lp)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %s is a broken link (blob missing)", req.Repo, ErrNotCached, lp)
		}
		fr := FileResult{Path: p, Size: st.Size(), LocalPath: lp, Status: StatusCached}
		if target, err := filepath.EvalSymlinks(lp); err == nil && target != lp {
			fr.BlobPath = target
			name := filepath.Base(target)
			if isSHA256(name) {
				fr.SHA256, fr.LFS = name, true
			} else if isSHA1(name) {
				fr.GitSHA1 = name
			}
		}
		if f, ok := byPath[p]; ok {
			if f.Size != st.Size() {
				return nil, fmt.Errorf("%s: %s has %d bytes, the cached listing says %d", req.Repo, lp, st.Size(), f.Size)
			}
			fr.GitSHA1, fr.LFS = f.BlobID, f.LFS != nil
			if f.LFS != nil {
				fr.SHA256 = f.LFS.SHA256
			}
		}
		res.Files = append(res.Files, fr)
		res.TotalBytes += fr.Size
	}
	return res, nil
}

func localDirOffline(req DownloadRequest, res *DownloadResult) (*DownloadResult, error) {
	res.LocalDir = req.LocalDir
	meta := filepath.Join(req.LocalDir, ".cache", "huggingface", "download")
	var paths []string
	err := filepath.WalkDir(meta, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !de.IsDir() && strings.HasSuffix(p, ".metadata") {
			rel, err := filepath.Rel(meta, strings.TrimSuffix(p, ".metadata"))
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", req.LocalDir, ErrNotCached, err)
	}
	sort.Strings(paths)
	for _, p := range FilterPaths(paths, req.Include, req.Exclude) {
		lp := localPaths(req.LocalDir, p)
		m, ok := readLocalMetadata(lp)
		if !ok {
			return nil, fmt.Errorf("%s: %w: %s is missing or changed since it was downloaded", req.LocalDir, ErrNotCached, lp.file)
		}
		if res.Commit == "" {
			res.Commit = m.Commit
		}
		st, _ := os.Stat(lp.file)
		fr := FileResult{Path: p, Size: st.Size(), LocalPath: lp.file, Status: StatusCached}
		if isSHA256(m.ETag) {
			fr.SHA256, fr.LFS = m.ETag, true
		} else {
			fr.GitSHA1 = m.ETag
		}
		res.Files = append(res.Files, fr)
		res.TotalBytes += fr.Size
	}
	return res, nil
}
