package qpack

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/qpack-go/qpack/safetensors"
)

// CreateOptions tunes Create.
type CreateOptions struct {
	// TempDir is where the container is assembled; Finish renames it to the
	// destination. Default: the destination path + ".partial". It must be on
	// the destination's file system.
	TempDir string
	// Resume reuses a TempDir left by an earlier Create (possibly by another
	// process): existing files are opened, not truncated, so bytes already
	// written stay. Without Resume an existing TempDir is an error.
	Resume bool
	// Overwrite lets Finish replace an existing destination. Without it
	// Create and Finish refuse one.
	Overwrite bool
	// HashProgress, if set, is called during Finish with the bytes hashed so
	// far and the total; calls never overlap.
	HashProgress func(done, total int64)
}

// ManifestInfo is what Finish writes into manifest.json besides the file
// list and digests.
type ManifestInfo struct {
	ModelName        string // Swiftlet writes config.json's model_type
	SourceCheckpoint string // Swiftlet writes the source directory's name
	QuantBits        *int
	QuantGroupSize   *int
	ToolVersion      string
	Source           Source
}

// Writer assembles a container in a temporary directory. Layer files are
// created at their final size up front so that expert bytes can be written
// in any order, from several goroutines, with positional writes (WriteAt
// and the like are safe for concurrent use). A layer whose bytes are all
// written can be sealed (SealLayer): it is hashed in the background while
// the rest is written. Finish hashes everything not yet hashed, writes
// layout.json and manifest.json and renames the directory into place.
type Writer struct {
	dst, tmp string
	layout   *Layout
	opts     CreateOptions

	// mu guards the file handles: readers of the handles (writes, Sync)
	// hold it shared, so a Sync's fsyncs never stall concurrent writes;
	// CreateDense and Close hold it exclusively.
	mu        sync.RWMutex
	layers    []*os.File
	dense     *os.File
	densePlan *safetensors.Plan
	denseIdx  map[string]int
	done      bool

	// layerMu[l] guards sealed[l]: writes to layer l hold it shared,
	// SealLayer exclusively, so no write to a sealed layer can be in
	// flight once SealLayer has set the flag.
	layerMu []sync.RWMutex
	sealed  []bool

	// Background hashing of sealed layers.
	sealMu      sync.Mutex
	seals       map[int]*sealJob // by layer
	sealQ       []*sealJob       // waiting for a worker
	sealRunning int              // workers running
	sealWorkers int              // at most this many
	sealStop    atomic.Bool      // set by Close: workers stop at the next block
	sealWG      sync.WaitGroup
}

// sealJob is the background hashing of one sealed layer file.
type sealJob struct {
	layer   int
	started bool          // a worker took it (guarded by sealMu)
	done    chan struct{} // closed when the fields below are set
	file    string
	experts []string
	err     error
}

// Create starts a container that Finish will place at dst.
func Create(dst string, layout *Layout, opts CreateOptions) (w *Writer, err error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	dst = filepath.Clean(dst)
	tmp := opts.TempDir
	if tmp == "" {
		tmp = dst + ".partial"
	}
	tmp = filepath.Clean(tmp)
	if tmp == dst {
		return nil, fmt.Errorf("qpack: temporary directory %s is the destination", tmp)
	}
	if _, err := os.Lstat(dst); err == nil {
		if !opts.Overwrite {
			return nil, fmt.Errorf("qpack: %s already exists (remove it or allow overwriting)", dst)
		}
		// Only a container is ever replaced: refuse anything else now,
		// before a byte is written.
		if err := CheckContainerDir(dst); err != nil {
			return nil, err
		}
	}
	if _, err := os.Lstat(tmp); err == nil && !opts.Resume {
		return nil, fmt.Errorf("qpack: partial container %s already exists (resume it or remove it)", tmp)
	}
	if err := os.MkdirAll(filepath.Join(tmp, ExpertsDir), 0o755); err != nil {
		return nil, fmt.Errorf("qpack: %w", err)
	}
	if err := MarkPartial(tmp); err != nil {
		return nil, fmt.Errorf("qpack: %w", err)
	}
	w = &Writer{dst: dst, tmp: tmp, layout: layout, opts: opts, layers: make([]*os.File, layout.LayerCount),
		layerMu: make([]sync.RWMutex, layout.LayerCount), sealed: make([]bool, layout.LayerCount),
		seals: make(map[int]*sealJob), sealWorkers: max(1, runtime.GOMAXPROCS(0)/4)}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	size := layout.LayerSize()
	for l := range w.layers {
		p := filepath.Join(tmp, filepath.FromSlash(LayerFile(l)))
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("qpack: %w", err)
		}
		w.layers[l] = f
		if err := f.Truncate(size); err != nil {
			return nil, fmt.Errorf("qpack: %s: pre-sizing to %d bytes: %w", LayerFile(l), size, err)
		}
	}
	if err := syncDir(filepath.Join(tmp, ExpertsDir)); err != nil {
		return nil, fmt.Errorf("qpack: %w", err)
	}
	if err := syncDir(tmp); err != nil {
		return nil, fmt.Errorf("qpack: %w", err)
	}
	return w, nil
}

// Dir returns the temporary directory being written.
func (w *Writer) Dir() string { return w.tmp }

// Layout returns the layout the container is written with.
func (w *Writer) Layout() *Layout { return w.layout }

// LayerFile returns layer l's open file (pre-sized, read-write), for
// reading back what was written. The caller must not close it, nor write
// through it: WriteAt checks bounds and refuses writes to a sealed layer,
// whose digests may already be computed.
func (w *Writer) LayerFile(l int) (*os.File, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if l < 0 || l >= len(w.layers) {
		return nil, fmt.Errorf("qpack: layer %d out of range [0, %d)", l, len(w.layers))
	}
	if w.layers[l] == nil {
		return nil, fmt.Errorf("qpack: writer is closed")
	}
	return w.layers[l], nil
}

// WriteAt writes p at byte off of layer l's file; the range must lie
// within the file (ExpertCount x stride bytes), and the layer must not be
// sealed.
func (w *Writer) WriteAt(l int, p []byte, off int64) (int, error) {
	f, done, err := w.layerForWrite(l, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer done()
	n, err := f.WriteAt(p, off)
	if err != nil {
		err = fmt.Errorf("qpack: %s: %w", LayerFile(l), err)
	}
	return n, err
}

// CopyFrom copies n bytes of src, from its byte srcOff, to byte off of
// layer l's file, with the checks of WriteAt. On Linux the bytes are
// copied inside the kernel (copy_file_range) and never pass through user
// memory.
func (w *Writer) CopyFrom(l int, src *os.File, srcOff, off, n int64) error {
	f, done, err := w.layerForWrite(l, off, n)
	if err != nil {
		return err
	}
	defer done()
	if srcOff < 0 {
		return fmt.Errorf("qpack: %s: copy from negative offset %d of %s", LayerFile(l), srcOff, src.Name())
	}
	if err := copyRange(f, off, src, srcOff, n); err != nil {
		return fmt.Errorf("qpack: %s: copying %d bytes from %s at %d: %w", LayerFile(l), n, src.Name(), srcOff, err)
	}
	return nil
}

// layerForWrite checks a write of n bytes at off of layer l and returns
// the file; done must be called once the write is over (a concurrent
// SealLayer waits for it).
func (w *Writer) layerForWrite(l int, off, n int64) (f *os.File, done func(), err error) {
	if f, err = w.LayerFile(l); err != nil {
		return nil, nil, err
	}
	if n < 0 || off < 0 || off > w.layout.LayerSize() || n > w.layout.LayerSize()-off {
		return nil, nil, fmt.Errorf("qpack: %s: write of %d bytes at %d is outside the file (%d bytes)", LayerFile(l), n, off, w.layout.LayerSize())
	}
	w.layerMu[l].RLock()
	if w.sealed[l] {
		w.layerMu[l].RUnlock()
		return nil, nil, fmt.Errorf("qpack: %s: write of %d bytes at %d after the layer was sealed", LayerFile(l), n, off)
	}
	return f, w.layerMu[l].RUnlock, nil
}

// LayerWriterAt returns an io.WriterAt over layer l's file (see WriteAt).
func (w *Writer) LayerWriterAt(l int) io.WriterAt { return layerWriterAt{w, l} }

type layerWriterAt struct {
	w *Writer
	l int
}

func (x layerWriterAt) WriteAt(p []byte, off int64) (int, error) { return x.w.WriteAt(x.l, p, off) }

// WriteSection writes p at byte off within section name of expert e of
// layer l; the range must lie within the section.
func (w *Writer) WriteSection(l, e int, name string, p []byte, off int64) error {
	s, ok := w.layout.Section(name)
	if !ok {
		return fmt.Errorf("qpack: no section %q in the layout", name)
	}
	base, err := w.layout.ExpertOffset(e)
	if err != nil {
		return err
	}
	if off < 0 || off > s.Size || int64(len(p)) > s.Size-off {
		return fmt.Errorf("qpack: layer %d expert %d section %s: write of %d bytes at %d is outside the section (%d bytes)", l, e, name, len(p), off, s.Size)
	}
	_, err = w.WriteAt(l, p, base+s.Offset+off)
	return err
}

// WriteExpert writes expert e of layer l whole: blob holds the payload
// (Layout.Payload bytes) or the full stride.
func (w *Writer) WriteExpert(l, e int, blob []byte) error {
	if n := int64(len(blob)); n != w.layout.Payload() && n != w.layout.ExpertStride {
		return fmt.Errorf("qpack: layer %d expert %d: blob of %d bytes, want the payload (%d) or the stride (%d)", l, e, n, w.layout.Payload(), w.layout.ExpertStride)
	}
	off, err := w.layout.ExpertOffset(e)
	if err != nil {
		return err
	}
	_, err = w.WriteAt(l, blob, off)
	return err
}

// CreateDense creates model.safetensors for the dense tensors, sorted by
// name, writes its header and pre-sizes it; tensor bytes are then written
// with WriteDense or WriteDenseTensor. On resume it may be called again with
// the same specs: the header is rewritten identically and the data kept.
func (w *Writer) CreateDense(specs []safetensors.Spec, metadata map[string]string) (*safetensors.Plan, error) {
	sorted := append([]safetensors.Spec(nil), specs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	plan, err := safetensors.PlanFile(sorted, metadata)
	if err != nil {
		return nil, denseErr(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil, fmt.Errorf("qpack: writer is closed")
	}
	if w.dense != nil {
		return nil, fmt.Errorf("qpack: %s already created", DenseName)
	}
	f, err := os.OpenFile(filepath.Join(w.tmp, DenseName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("qpack: %w", err)
	}
	if err := f.Truncate(plan.Size); err != nil {
		f.Close()
		return nil, fmt.Errorf("qpack: %s: pre-sizing to %d bytes: %w", DenseName, plan.Size, err)
	}
	if _, err := f.WriteAt(plan.Header, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("qpack: %s: %w", DenseName, err)
	}
	w.dense, w.densePlan = f, plan
	w.denseIdx = make(map[string]int, len(plan.Tensors))
	for i, t := range plan.Tensors {
		w.denseIdx[t.Name] = i
	}
	return plan, nil
}

// WriteDense writes p at absolute byte off of model.safetensors; the range
// must lie in the data area (after the header).
func (w *Writer) WriteDense(p []byte, off int64) (int, error) {
	f, err := w.denseForWrite(off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	n, err := f.WriteAt(p, off)
	if err != nil {
		err = fmt.Errorf("qpack: %s: %w", DenseName, err)
	}
	return n, err
}

// CopyDenseFrom copies n bytes of src, from its byte srcOff, to absolute
// byte off of model.safetensors, with the checks of WriteDense (and
// inside the kernel, as CopyFrom).
func (w *Writer) CopyDenseFrom(src *os.File, srcOff, off, n int64) error {
	f, err := w.denseForWrite(off, n)
	if err != nil {
		return err
	}
	if srcOff < 0 {
		return fmt.Errorf("qpack: %s: copy from negative offset %d of %s", DenseName, srcOff, src.Name())
	}
	if err := copyRange(f, off, src, srcOff, n); err != nil {
		return fmt.Errorf("qpack: %s: copying %d bytes from %s at %d: %w", DenseName, n, src.Name(), srcOff, err)
	}
	return nil
}

func (w *Writer) denseForWrite(off, n int64) (*os.File, error) {
	w.mu.RLock()
	f, plan := w.dense, w.densePlan
	w.mu.RUnlock()
	if f == nil {
		return nil, fmt.Errorf("qpack: %s: CreateDense has not been called", DenseName)
	}
	start := int64(len(plan.Header))
	if n < 0 || off < start || off > plan.Size || n > plan.Size-off {
		return nil, fmt.Errorf("qpack: %s: write of %d bytes at %d is outside the data area [%d, %d)", DenseName, n, off, start, plan.Size)
	}
	return f, nil
}

// WriteDenseTensor writes p at byte off within tensor name of
// model.safetensors; the range must lie within the tensor.
func (w *Writer) WriteDenseTensor(name string, p []byte, off int64) error {
	w.mu.RLock()
	plan, idx := w.densePlan, w.denseIdx
	w.mu.RUnlock()
	if plan == nil {
		return fmt.Errorf("qpack: %s: CreateDense has not been called", DenseName)
	}
	i, ok := idx[name]
	if !ok {
		return fmt.Errorf("qpack: %s: no tensor %q in the plan", DenseName, name)
	}
	t := plan.Tensors[i]
	if off < 0 || off > t.Size || int64(len(p)) > t.Size-off {
		return fmt.Errorf("qpack: %s: tensor %s: write of %d bytes at %d is outside the tensor (%d bytes)", DenseName, name, len(p), off, t.Size)
	}
	_, err := w.WriteDense(p, t.Offset+off)
	return err
}

// reserved reports whether rel is a name the writer manages itself.
func reserved(rel string) bool {
	return rel == ManifestName || rel == DenseName || rel == ExpertsDir || strings.HasPrefix(rel, ExpertsDir+"/")
}

// AddFile copies r into the container as rel (config.json, tokenizer
// files, ...), streaming through a working file that is renamed into place,
// so a resumed run never sees half a file.
func (w *Writer) AddFile(rel string, r io.Reader) error {
	if err := CheckPath(rel); err != nil {
		return fmt.Errorf("qpack: AddFile: %w", err)
	}
	if reserved(rel) {
		return fmt.Errorf("qpack: AddFile: %q is managed by the writer", rel)
	}
	p := filepath.Join(w.tmp, filepath.FromSlash(rel))
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("qpack: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return fmt.Errorf("qpack: AddFile %s: %w", rel, err)
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("qpack: AddFile %s: %w", rel, err)
	}
	return nil
}

// Sync flushes the layer files and model.safetensors to stable storage (a
// resumable writer calls it before recording progress). Writes may go on
// while it runs; those that completed before Sync was called are durable
// when it returns.
func (w *Writer) Sync() error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	for l, f := range w.layers {
		if f == nil {
			continue
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("qpack: %s: %w", LayerFile(l), err)
		}
	}
	if w.dense != nil {
		if err := w.dense.Sync(); err != nil {
			return fmt.Errorf("qpack: %s: %w", DenseName, err)
		}
	}
	return nil
}

// SealLayer declares that every byte of layer l's file is written: later
// writes to it are refused, and the file is fsynced and hashed (its digest
// and its experts' digests) by a background goroutine while other layers
// are written, so that Finish does not hash it again. Sealing a layer
// twice does nothing. Reads through LayerFile stay allowed.
func (w *Writer) SealLayer(l int) error {
	if l < 0 || l >= len(w.layers) {
		return fmt.Errorf("qpack: layer %d out of range [0, %d)", l, len(w.layers))
	}
	if w.sealStop.Load() {
		return fmt.Errorf("qpack: writer is closed")
	}
	w.layerMu[l].Lock()
	already := w.sealed[l]
	w.sealed[l] = true
	w.layerMu[l].Unlock()
	if already {
		return nil
	}
	w.sealMu.Lock()
	defer w.sealMu.Unlock()
	if w.sealStop.Load() {
		return fmt.Errorf("qpack: writer is closed")
	}
	j := &sealJob{layer: l, done: make(chan struct{})}
	w.seals[l] = j
	w.sealQ = append(w.sealQ, j)
	if w.sealRunning < w.sealWorkers {
		w.sealRunning++
		w.sealWG.Add(1)
		go w.sealLoop()
	}
	return nil
}

// sealLoop hashes sealed layers until none is waiting.
func (w *Writer) sealLoop() {
	defer w.sealWG.Done()
	for {
		w.sealMu.Lock()
		if len(w.sealQ) == 0 || w.sealStop.Load() {
			w.sealRunning--
			w.sealMu.Unlock()
			return
		}
		j := w.sealQ[0]
		w.sealQ = w.sealQ[1:]
		j.started = true
		w.sealMu.Unlock()
		j.file, j.experts, j.err = w.hashOne(LayerFile(j.layer), w.layout.LayerSize(), nil, w.sealStop.Load)
		close(j.done)
	}
}

// takeSeals ends background hashing: layers still waiting are dropped
// from the queue (the caller hashes them), and the jobs that started are
// returned by file path.
func (w *Writer) takeSeals() map[string]*sealJob {
	w.sealMu.Lock()
	defer w.sealMu.Unlock()
	w.sealQ = nil
	out := make(map[string]*sealJob)
	for l, j := range w.seals {
		if j.started {
			out[LayerFile(l)] = j
		}
	}
	return out
}

// stopSeals stops background hashing and waits for its goroutines.
func (w *Writer) stopSeals() {
	w.sealMu.Lock()
	w.sealStop.Store(true)
	w.sealQ = nil
	w.sealMu.Unlock()
	w.sealWG.Wait()
}

// Close stops background hashing, closes the open files and leaves the
// temporary directory in place (to be resumed, finished by another Writer,
// or removed with Discard).
func (w *Writer) Close() error {
	w.stopSeals()
	return w.closeFiles()
}

func (w *Writer) closeFiles() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	var first error
	for l, f := range w.layers {
		if f != nil {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
			w.layers[l] = nil
		}
	}
	if w.dense != nil {
		if err := w.dense.Close(); err != nil && first == nil {
			first = err
		}
		w.dense = nil
	}
	return first
}

// Discard closes the writer and removes its temporary directory.
func (w *Writer) Discard() error {
	w.Close()
	return os.RemoveAll(w.tmp)
}

// Finish completes the container: it checks what was written (every layer
// file at its size, a valid model.safetensors, no symlinks or special
// files), writes packed_experts/layout.json, hashes every file with BLAKE3
// (layer files in one pass that also digests each expert's stride; a layer
// sealed with SealLayer was hashed, after its last write, in the
// background), fsyncs every file, writes manifest.json, removes working
// files (names starting with "."), renames the temporary directory to the
// destination and fsyncs the parent directory. It works on a directory
// written by an earlier process as long as this Writer was created on it
// with Resume. The Writer is closed afterwards, whatever the outcome.
func (w *Writer) Finish(info ManifestInfo) (*Manifest, error) {
	defer w.stopSeals()
	if err := w.Sync(); err != nil {
		return nil, err
	}
	if err := w.closeFiles(); err != nil {
		return nil, fmt.Errorf("qpack: %w", err)
	}
	if !w.opts.Overwrite {
		if _, err := os.Lstat(w.dst); err == nil {
			return nil, fmt.Errorf("qpack: %s already exists (remove it or allow overwriting)", w.dst)
		}
	}
	lb, err := w.layout.Marshal()
	if err != nil {
		return nil, err
	}
	if err := WriteFileAtomic(filepath.Join(w.tmp, filepath.FromSlash(LayoutName)), lb, 0o644); err != nil {
		return nil, fmt.Errorf("qpack: %s: %w", LayoutName, err)
	}

	files, dirs, working, err := scanTemp(w.tmp)
	if err != nil {
		return nil, err
	}
	for l := 0; l < w.layout.LayerCount; l++ {
		p := LayerFile(l)
		if size, ok := files[p]; !ok {
			return nil, errf(p, "", "missing from %s", w.tmp)
		} else if size != w.layout.LayerSize() {
			return nil, errf(p, "", "size %d, want %d", size, w.layout.LayerSize())
		}
	}
	for p := range files {
		if strings.HasPrefix(p, ExpertsDir+"/") && p != LayoutName {
			if n, ok := parseLayerFile(p); !ok || n >= w.layout.LayerCount {
				return nil, errf(p, "", "unexpected file in %s (the layout has %d layers)", ExpertsDir, w.layout.LayerCount)
			}
		}
	}
	if _, ok := files[DenseName]; !ok {
		return nil, errf(DenseName, "", "missing from %s (call CreateDense)", w.tmp)
	}
	if _, err := safetensors.ReadFileHeader(filepath.Join(w.tmp, DenseName)); err != nil {
		return nil, denseErr(err)
	}

	fileDigests, expertDigests, err := w.hashAll(files, w.takeSeals())
	if err != nil {
		return nil, err
	}

	m := &Manifest{
		Magic: Magic, Version: Version,
		ModelName: info.ModelName, SourceCheckpoint: info.SourceCheckpoint,
		QuantBits: info.QuantBits, QuantGroupSize: info.QuantGroupSize,
		Files: files,
		Ext: &Extension{
			ToolVersion: info.ToolVersion, FormatMinor: FormatMinor, Source: info.Source,
			DigestAlgorithm: DigestBLAKE3, FileDigests: fileDigests, ExpertDigests: expertDigests,
		},
	}
	mb, err := m.Marshal()
	if err != nil {
		return nil, err
	}
	// Check what a reader will check before making it visible.
	m2, err := ParseManifest(mb)
	if err != nil {
		return nil, fmt.Errorf("qpack: internal error: written manifest does not parse: %w", err)
	}
	if err := checkLayerFiles(m2, w.layout); err != nil {
		return nil, err
	}
	if err := WriteFileAtomic(filepath.Join(w.tmp, ManifestName), mb, 0o644); err != nil {
		return nil, fmt.Errorf("qpack: %s: %w", ManifestName, err)
	}
	for _, p := range working {
		if err := os.RemoveAll(filepath.Join(w.tmp, filepath.FromSlash(p))); err != nil {
			return nil, fmt.Errorf("qpack: removing working file: %w", err)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(dirs))) // deepest first
	for _, d := range dirs {
		if err := syncDir(filepath.Join(w.tmp, filepath.FromSlash(d))); err != nil {
			return nil, fmt.Errorf("qpack: %w", err)
		}
	}
	if err := w.place(); err != nil {
		return nil, err
	}
	return m, nil
}

// scanTemp lists the regular files of dir (slash paths -> sizes), excluding
// manifest.json and working entries (any component starting with "."),
// which it returns separately; it also returns every directory (including
// ".") for fsync. Symlinks and special files are errors.
func scanTemp(dir string) (files map[string]int64, dirs, working []string, err error) {
	files = make(map[string]int64)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." && strings.HasPrefix(d.Name(), ".") {
			working = append(working, rel)
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		t := d.Type()
		switch {
		case t.IsDir():
			dirs = append(dirs, rel)
			return nil
		case !t.IsRegular():
			return errf(rel, "", "is a %s; a container holds only regular files and directories", modeName(t))
		case rel == ManifestName:
			return nil
		}
		if err := CheckPath(rel); err != nil {
			return errf(rel, "", "%v", err)
		}
		if len(files) >= MaxFiles {
			return errf(rel, "", "more than %d files", MaxFiles)
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		files[rel] = st.Size()
		return nil
	})
	if err != nil {
		return nil, nil, nil, wrapErr(dir, "", err)
	}
	folded := make(map[string]string)
	for p := range files {
		if other, ok := folded[foldKey(p)]; ok {
			return nil, nil, nil, errf(p, "", "%q and %q name the same file on a case-insensitive file system", other, p)
		}
		folded[foldKey(p)] = p
	}
	return files, dirs, working, nil
}

// hashAll digests every file (largest first, several at once), fsyncing
// each, and returns file and expert digests; the digests of the files in
// pre come from their background jobs.
func (w *Writer) hashAll(files map[string]int64, pre map[string]*sealJob) (map[string]string, map[string][]string, error) {
	paths := make([]string, 0, len(files))
	var total int64
	for p, n := range files {
		total += n
		if pre[p] == nil {
			paths = append(paths, p)
		}
	}
	sort.Slice(paths, func(i, j int) bool {
		if files[paths[i]] != files[paths[j]] {
			return files[paths[i]] > files[paths[j]]
		}
		return paths[i] < paths[j]
	})

	var (
		mu            sync.Mutex
		done          int64
		fileDigests   = make(map[string]string, len(files))
		expertDigests = make(map[string][]string, w.layout.LayerCount)
		firstErr      error
	)
	progress := func(n int64) {
		if w.opts.HashProgress == nil {
			return
		}
		mu.Lock()
		done += n
		w.opts.HashProgress(done, total)
		mu.Unlock()
	}
	work := make(chan string)
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), len(paths), 8)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				fd, eds, err := w.hashOne(p, files[p], progress, nil)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				fileDigests[p] = fd
				if eds != nil {
					expertDigests[p] = eds
				}
				mu.Unlock()
			}
		}()
	}
	for _, p := range paths {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		work <- p
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return nil, nil, firstErr
	}
	pres := make([]string, 0, len(pre))
	for p := range pre {
		pres = append(pres, p)
	}
	sort.Strings(pres)
	for _, p := range pres {
		j := pre[p]
		<-j.done
		if j.err != nil {
			return nil, nil, j.err
		}
		fileDigests[p], expertDigests[p] = j.file, j.experts
		progress(files[p])
	}
	return fileDigests, expertDigests, nil
}

// hashOne fsyncs and digests the file rel of size bytes (a layer file also
// per expert); stop, if not nil, is polled between blocks.
func (w *Writer) hashOne(rel string, size int64, progress func(int64), stop func() bool) (string, []string, error) {
	f, err := os.Open(filepath.Join(w.tmp, filepath.FromSlash(rel)))
	if err != nil {
		return "", nil, &Error{File: rel, Err: err}
	}
	defer f.Close()
	// Flush to stable storage before the manifest that vouches for it exists.
	if err := f.Sync(); err != nil {
		return "", nil, &Error{File: rel, Key: "fsync", Err: err}
	}
	experts, stride := 0, int64(0)
	if _, isLayer := parseLayerFile(rel); isLayer {
		experts, stride = w.layout.ExpertCount, w.layout.ExpertStride
	}
	fd, eds, err := digestOpenFile(f, size, experts, stride, progress, stop)
	if err != nil {
		return "", nil, &Error{File: rel, Err: err}
	}
	return fd, eds, nil
}

// place renames the finished temporary directory to the destination
// (ReplaceDir: an existing destination is replaced only if it is a
// container, and only with Overwrite).
func (w *Writer) place() error {
	if _, err := os.Lstat(w.dst); err == nil && !w.opts.Overwrite {
		return fmt.Errorf("qpack: %s already exists (remove it or allow overwriting)", w.dst)
	}
	return ReplaceDir(w.tmp, w.dst)
}

// modeName names a file type for messages.
func modeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeSymlink != 0:
		return "symlink"
	case t.IsDir():
		return "directory"
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	case t.IsRegular():
		return "regular file"
	}
	return "special file"
}
