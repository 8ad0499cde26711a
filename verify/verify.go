package verify

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
	"github.com/zeebo/blake3"
)

// DefaultBlockSize is the size of one read: large enough that the per-call
// cost vanishes and the SIMD hasher runs at full speed, small enough that
// two buffers per worker stay modest.
const DefaultBlockSize = 8 << 20

// DefaultMaxProblems caps the problems a report lists (the rest are
// counted in ProblemsOmitted).
const DefaultMaxProblems = 1000

// ReceiptName is the receipt written into a container that verified.
const ReceiptName = "verified-install.json"

// Options tunes Verify. The zero value checks every digest with all cores.
type Options struct {
	// Workers is how many files (or runs of experts) are read and hashed
	// at once; 0 means GOMAXPROCS.
	Workers int
	// BlockSize is the size of each read (0: DefaultBlockSize).
	BlockSize int
	// Full also checks the whole-file digests of layer files (qpack.fileDigests),
	// hashing every layer byte twice, in one read. By default layer files
	// are checked by their expert digests alone, which vouch for every
	// byte; Full adds telling a damaged manifest entry from damaged data
	// (see the package documentation).
	Full bool
	// KeepCache leaves the pages read in the page cache (by default every
	// block is dropped after it is read).
	KeepCache bool
	// MaxProblems caps the problems listed (0: DefaultMaxProblems).
	MaxProblems int
	// Progress, if set, is called from one goroutine at a time, a few times
	// a second and once at the end of each phase.
	Progress func(Progress)
	// Deep, if set, compares the container byte for byte with its source,
	// alongside the digest checks (see DeepOptions.Window) or after them.
	Deep   *DeepOptions
	Logger *slog.Logger
}

// Progress reports how far a phase is.
type Progress struct {
	// Phase is "hash" (the container's digests) or "deep" (against the
	// source). When both run together (DeepOptions.Window) there is one
	// phase, "deep", counting the container bytes hashed and the source
	// bytes streamed.
	Phase string
	Done  int64 // bytes
	Total int64
}

// Verify checks the container in dir: its structure (FORMAT.md §7), every
// listed file's size, the BLAKE3 digest of every file and every expert blob
// against the manifest, that the bytes between and after an expert's
// sections are zero, and, with Options.Deep, every dense tensor and expert
// section against the source checkpoint. The report names each bad file
// and, for layer files, the layer and expert (and the section, with Deep).
//
// The report is never nil. The error is non-nil when the input could not be
// verified at all (not a container, unreadable, an unsupported version, a
// source that cannot be opened, a cancelled context); report.Status is then
// StatusUnusable and report.Error says why.
func Verify(ctx context.Context, dir string, o Options) (*Report, error) {
	start := time.Now()
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.BlockSize <= 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.BlockSize < 64<<10 {
		o.BlockSize = 64 << 10
	}
	if o.MaxProblems <= 0 {
		o.MaxProblems = DefaultMaxProblems
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	v := &verifier{o: o, dir: abs, rep: &Report{Container: abs, Files: []FileResult{}}, ps: &problems{max: o.MaxProblems}}
	fatal := v.run(ctx)
	if v.root != nil {
		v.root.Close()
	}
	v.rep.Seconds = time.Since(start).Seconds()
	v.rep.finish(v.ps, fatal)
	return v.rep, fatal
}

type verifier struct {
	o   Options
	dir string
	rep *Report
	ps  *problems
	mu  sync.Mutex // guards ps and rep.Notes during parallel phases

	root     *os.Root
	man      *qpack.Manifest
	stats    map[string]fs.FileInfo // listed files present as regular files of the right size
	layout   *qpack.Layout          // nil when unusable
	layerOf  map[string]int         // layer file path -> layer
	dense    *safetensors.Header    // nil when unusable
	denseErr error
	results  map[string]*FileResult
	hashed   map[string]*fileHash

	// Deep check: problems found mapping the container onto the source's
	// headers, held until the headers are checked against the hashed
	// stream (guarded by mu).
	mapPending []Problem
	headerBad  bool
}

func (v *verifier) problem(p Problem) {
	v.mu.Lock()
	v.ps.add(p)
	v.mu.Unlock()
}

func (v *verifier) note(format string, args ...any) {
	v.mu.Lock()
	v.rep.Notes = append(v.rep.Notes, fmt.Sprintf(format, args...))
	v.mu.Unlock()
}

func (v *verifier) run(ctx context.Context) error {
	if err := v.inventory(); err != nil {
		return err
	}
	var dp *deepPlan
	if v.o.Deep != nil {
		var err error
		if dp, err = v.deepPrepare(ctx); err != nil {
			return err
		}
	}
	defer v.markBad()
	if dp != nil && v.o.Deep.Sample == 0 && v.o.Deep.Window >= 0 && (canShare || v.o.KeepCache) {
		return v.hashAndDeep(ctx, dp)
	}
	if err := v.hashAll(ctx); err != nil {
		return err
	}
	v.judgeDense()
	if dp != nil {
		return v.deepRun(ctx, dp)
	}
	return nil
}

// inventory reads the manifest and layout and checks everything that does
// not need the data: the structure, which files exist with which sizes.
func (v *verifier) inventory() error {
	st, err := os.Stat(v.dir)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", v.dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %w: not a directory", v.dir, qpack.ErrNotContainer)
	}
	if v.root, err = os.OpenRoot(v.dir); err != nil {
		return fmt.Errorf("cannot open %s: %w", v.dir, err)
	}
	mst, err := v.root.Lstat(qpack.ManifestName)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w: no %s", v.dir, qpack.ErrNotContainer, qpack.ManifestName)
		}
		return fmt.Errorf("%s: %w", qpack.ManifestName, err)
	}
	if !mst.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", qpack.ManifestName)
	}
	data, err := v.readBounded(qpack.ManifestName, qpack.MaxManifestSize)
	if err != nil {
		return err
	}
	sum := blake3.Sum256(data)
	v.rep.ManifestDigest = hex.EncodeToString(sum[:])
	v.checkReceipt()
	if v.man, err = qpack.ParseManifest(data); err != nil {
		return err
	}
	m := v.man
	v.rep.DigestsRecorded = m.Ext != nil
	if m.Ext != nil {
		v.rep.fileDigests = m.Ext.FileDigests
	}
	if m.Ext == nil {
		v.note("the manifest records no digests (a container written by Swiftlet, or by another tool without the qpack extension): only structure, sizes and zero padding are checked; use --deep to compare every byte with the source")
	}

	if err := v.walk(); err != nil {
		return err
	}

	v.stats = map[string]fs.FileInfo{}
	v.results = map[string]*FileResult{}
	for _, p := range m.SortedFiles() {
		want := m.Files[p]
		v.results[p] = &FileResult{Path: p, Size: want, Check: CheckSize}
		st, err := v.root.Lstat(filepath.FromSlash(p))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			v.problem(Problem{Scope: ScopeContainer, Kind: KindMissing, File: p, Message: fmt.Sprintf("listed in %s (%d bytes) but missing", qpack.ManifestName, want)})
		case err != nil:
			v.problem(Problem{Scope: ScopeContainer, Kind: KindRead, File: p, Message: err.Error()})
		case !st.Mode().IsRegular():
			v.problem(Problem{Scope: ScopeContainer, Kind: KindNotRegular, File: p, Message: fmt.Sprintf("is a %s, not a regular file", modeName(st.Mode()))})
		case st.Size() < want:
			v.problem(Problem{Scope: ScopeContainer, Kind: KindSize, File: p, Offset: int64p(st.Size()),
				Message: fmt.Sprintf("truncated: %d bytes, %s records %d (%d missing)", st.Size(), qpack.ManifestName, want, want-st.Size())})
		case st.Size() > want:
			v.problem(Problem{Scope: ScopeContainer, Kind: KindSize, File: p, Offset: int64p(want),
				Message: fmt.Sprintf("extended: %d bytes, %s records %d (%d extra)", st.Size(), qpack.ManifestName, want, st.Size()-want)})
		default:
			v.stats[p] = st
		}
	}

	v.loadLayout()
	v.loadDense()
	v.checkFacts()
	return nil
}

// maxReceiptSize bounds the receipt read back from a container.
const maxReceiptSize = 16 << 20

// checkReceipt compares the manifest with the one a receipt left by an
// earlier verification recorded: no digest covers manifest.json itself, so
// this is what catches a change to it (any byte) after a first successful
// verification. An unreadable receipt is only noted: it is not part of the
// container.
func (v *verifier) checkReceipt() {
	st, err := v.root.Lstat(ReceiptName)
	if err != nil {
		return
	}
	if !st.Mode().IsRegular() {
		v.note("%s is not a regular file: ignored", ReceiptName)
		return
	}
	data, err := v.readBounded(ReceiptName, maxReceiptSize)
	if err != nil {
		v.note("%s cannot be read (%v): ignored", ReceiptName, err)
		return
	}
	rc, err := parseReceipt(data)
	if err != nil {
		v.note("%s is not a receipt this tool wrote (%v): ignored", ReceiptName, err)
		return
	}
	v.rep.VerifiedBefore = rc.VerifiedAt
	if rc.ManifestDigest != v.rep.ManifestDigest {
		v.problem(Problem{Scope: ScopeContainer, Kind: KindManifest, File: qpack.ManifestName,
			Message: fmt.Sprintf("changed since it was verified (%s): %s records BLAKE3 %s, it now hashes to %s (remove %s if the change was intended)",
				rc.VerifiedAt, ReceiptName, rc.ManifestDigest, v.rep.ManifestDigest, ReceiptName)})
	}
}

// walk looks at every entry of the container directory: symlinks and
// special files are refused wherever they are, unlisted files are reported.
func (v *verifier) walk() error {
	n := 0
	return fs.WalkDir(v.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if n++; n > qpack.MaxFiles+1024 {
			return fmt.Errorf("%s: more than %d entries in the container directory", v.dir, qpack.MaxFiles+1024)
		}
		if p == "." || p == qpack.ManifestName {
			return nil
		}
		_, listed := v.man.Files[p]
		t := d.Type()
		switch {
		case t.IsDir():
			if listed {
				return nil // reported as not-regular below
			}
		case t.IsRegular():
			if !listed && p != ReceiptName && !isReceiptTemp(p) {
				v.rep.ExtraFiles = append(v.rep.ExtraFiles, p)
			}
		default:
			if !listed { // listed ones are reported with their file
				v.problem(Problem{Scope: ScopeContainer, Kind: KindStructure, File: p,
					Message: fmt.Sprintf("is a %s; a container holds only regular files and directories", modeName(t))})
			}
		}
		return nil
	})
}

func isReceiptTemp(p string) bool {
	return strings.HasPrefix(p, "."+ReceiptName+".tmp-")
}

func modeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	default:
		return "special file"
	}
}

func (v *verifier) readBounded(name string, limit int64) ([]byte, error) {
	f, err := v.root.Open(filepath.FromSlash(name))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than the limit of %d bytes", name, limit)
	}
	return data, nil
}

// loadLayout reads, checks the digest of, and parses layout.json, then
// checks the manifest's layer files and expert digests against it. On any
// failure v.layout stays nil and layer files are checked as plain files.
func (v *verifier) loadLayout() {
	m := v.man
	const p = qpack.LayoutName
	if _, ok := v.stats[p]; !ok {
		v.note("%s is not usable: layer files are checked by whole-file digest only", p)
		return
	}
	if m.Files[p] > qpack.MaxLayoutSize {
		v.problem(Problem{Scope: ScopeContainer, Kind: KindStructure, File: p, Message: fmt.Sprintf("%d bytes, more than the limit of %d", m.Files[p], qpack.MaxLayoutSize)})
		return
	}
	data, err := v.readBounded(p, qpack.MaxLayoutSize)
	if err != nil {
		v.problem(Problem{Scope: ScopeContainer, Kind: KindRead, File: p, Message: err.Error()})
		return
	}
	res := v.results[p]
	damaged := false
	if int64(len(data)) != m.Files[p] {
		v.problem(Problem{Scope: ScopeContainer, Kind: KindSize, File: p, Message: fmt.Sprintf("changed while being read: %d bytes, %s records %d", len(data), qpack.ManifestName, m.Files[p])})
		return
	}
	sum := blake3.Sum256(data)
	res.Digest = hex.EncodeToString(sum[:])
	v.rep.BytesHashed += int64(len(data))
	if m.Ext != nil {
		res.Check = CheckFileDigest
		if want := m.Ext.FileDigests[p]; want != res.Digest {
			damaged = true
			v.problem(Problem{Scope: ScopeContainer, Kind: KindDigest, File: p, Key: "qpack.fileDigests",
				Message: fmt.Sprintf("BLAKE3 %s, %s records %s", res.Digest, qpack.ManifestName, want)})
		} else {
			res.OK = true
		}
	} else {
		res.Check = CheckComputed
		res.OK = true
	}
	if damaged {
		// Nothing it says can be trusted, even if it still parses.
		v.note("%s is damaged: layer files are checked by whole-file digest only", p)
		return
	}
	l, err := qpack.ParseLayout(data)
	if err != nil {
		v.problem(Problem{Scope: ScopeContainer, Kind: KindStructure, File: p, Message: err.Error()})
		return
	}
	if msg := layoutMismatch(m, l); msg != nil {
		for _, pr := range msg {
			v.problem(pr)
		}
		return
	}
	v.layout = l
	v.layerOf = map[string]int{}
	for i := 0; i < l.LayerCount; i++ {
		v.layerOf[qpack.LayerFile(i)] = i
	}
}

// layoutMismatch checks the manifest against the layout (FORMAT.md §7.6,
// §7.8): every layer file listed with size ExpertCount x stride, nothing
// else under packed_experts/, one expert digest per expert.
func layoutMismatch(m *qpack.Manifest, l *qpack.Layout) []Problem {
	var out []Problem
	bad := func(file, key, format string, args ...any) {
		out = append(out, Problem{Scope: ScopeContainer, Kind: KindStructure, File: file, Key: key, Message: fmt.Sprintf(format, args...)})
	}
	want := l.LayerSize()
	for i := 0; i < l.LayerCount; i++ {
		p := qpack.LayerFile(i)
		size, ok := m.Files[p]
		if !ok {
			bad(qpack.ManifestName, "files", "layer %d: %q is not listed (the layout has %d layers)", i, p, l.LayerCount)
			continue
		}
		if size != want {
			bad(p, "", "layer %d: %s records %d bytes, the layout needs expertCount %d x stride %d = %d", i, qpack.ManifestName, size, l.ExpertCount, l.ExpertStride, want)
		}
	}
	for _, p := range m.SortedFiles() {
		if !strings.HasPrefix(p, qpack.ExpertsDir+"/") || p == qpack.LayoutName {
			continue
		}
		if n, ok := parseLayerFile(p); !ok || n >= l.LayerCount {
			bad(qpack.ManifestName, "files", "%q is not one of the layout's %d layer files", p, l.LayerCount)
		}
	}
	if e := m.Ext; e != nil {
		if len(e.ExpertDigests) != l.LayerCount {
			bad(qpack.ManifestName, "qpack.expertDigests", "has %d entries, want one per layer (%d)", len(e.ExpertDigests), l.LayerCount)
		}
		for i := 0; i < l.LayerCount; i++ {
			p := qpack.LayerFile(i)
			list, ok := e.ExpertDigests[p]
			if !ok {
				bad(qpack.ManifestName, "qpack.expertDigests", "no entry for %q", p)
			} else if len(list) != l.ExpertCount {
				bad(qpack.ManifestName, "qpack.expertDigests", "%q has %d digests, want one per expert (%d)", p, len(list), l.ExpertCount)
			}
		}
	}
	return out
}

// parseLayerFile returns n for "packed_experts/layer_NN.bin" spelled the
// way LayerFile spells it.
func parseLayerFile(p string) (int, bool) {
	s, ok := strings.CutPrefix(p, qpack.ExpertsDir+"/layer_")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, ".bin")
	if !ok || len(s) < 2 || len(s) > 4 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || qpack.LayerFile(n) != p {
		return 0, false
	}
	return n, true
}

func (v *verifier) loadDense() {
	const p = qpack.DenseName
	if _, ok := v.stats[p]; !ok {
		return
	}
	f, err := v.open(p)
	if err != nil {
		v.denseErr = err
		return
	}
	defer f.Close()
	v.dense, v.denseErr = safetensors.ReadHeader(f, v.man.Files[p], p)
}

// judgeDense reports an unreadable dense header once the digests have said
// whether the file is damaged.
func (v *verifier) judgeDense() {
	if v.denseErr == nil {
		return
	}
	if r := v.results[qpack.DenseName]; r != nil && !r.OK && v.man.Ext != nil && r.Check != CheckSize {
		v.note("%s: its header cannot be read (%v); the file is damaged (see its digest)", qpack.DenseName, v.denseErr)
		return
	}
	v.problem(Problem{Scope: ScopeContainer, Kind: KindStructure, File: qpack.DenseName, Message: v.denseErr.Error()})
}

// open opens a listed file and makes sure it is the one the inventory saw.
func (v *verifier) open(p string) (*os.File, error) {
	want, ok := v.stats[p]
	if !ok {
		return nil, fmt.Errorf("%s: not available", p)
	}
	f, err := v.root.Open(filepath.FromSlash(p))
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() || !os.SameFile(st, want) || st.Size() != want.Size() {
		f.Close()
		return nil, fmt.Errorf("%s: changed while being verified", p)
	}
	return f, nil
}

// sortedKeys returns the keys of a map in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// progressLoop calls fn with the counter every tick until stop is closed,
// then once more.
func progressLoop(phase string, fn func(Progress), done func() int64, total int64, stop <-chan struct{}) <-chan struct{} {
	finished := make(chan struct{})
	if fn == nil {
		close(finished)
		return finished
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fn(Progress{Phase: phase, Done: done(), Total: total})
			case <-stop:
				fn(Progress{Phase: phase, Done: done(), Total: total})
				return
			}
		}
	}()
	return finished
}
