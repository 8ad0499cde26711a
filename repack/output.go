package repack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/qpack"
)

// Output safety. Before anything is written, the output, its partial
// directory and its lock file are checked:
//   - none of them may be the source directory, lie inside it or contain it
//     (nor a directory the source's symlinked shards resolve into, as in a
//     Hugging Face cache snapshot), compared as resolved real paths and, for
//     the same directory reached through links or mounts, with os.SameFile;
//   - an existing output is replaced (--overwrite) only when it is a qpack
//     container (qpack.CheckContainerDir: its manifest.json says QPACK and a
//     version we know, and it holds nothing else);
//   - an existing "<output>.partial" is resumed or removed only when qpack
//     made it (qpack.CheckPartialDir, or it holds a repack journal);
//   - an existing "<output>.lock" must be an empty regular file (qpack's
//     lock), since the lock is removed when the run ends.
// A refusal is an *OutputError (ErrUnsafeOutput): the command exits 2.

// ErrUnsafeOutput is wrapped by every *OutputError.
var ErrUnsafeOutput = errors.New("unsafe output")

// OutputError says why repack refuses to write or replace Path.
type OutputError struct {
	Path   string
	Reason string
	Err    error // the underlying check's error, if any
}

func (e *OutputError) Error() string {
	return fmt.Sprintf("refusing to write %s: %s; move it away or choose another --output", e.Path, e.Reason)
}

func (e *OutputError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUnsafeOutput}
	}
	return []error{ErrUnsafeOutput, e.Err}
}

// sourceDirs returns the local directories o reads from: FromDir, or a
// caller-opened Source's directory when it reports one.
func sourceDirs(o Options) []string {
	var dirs []string
	if o.FromDir != "" {
		dirs = append(dirs, o.FromDir)
	}
	if o.Source != nil && o.Source.Dir() != "" {
		dirs = append(dirs, o.Source.Dir())
	}
	if o.FromHF != "" && !o.NoCache {
		// A Hub repo is read from the cache where the cache has it: its
		// folder there is a source too.
		root := o.CacheDir
		if root == "" {
			root = hfhub.HubCacheDir()
		}
		if root != "" {
			dir := filepath.Join(root, hfhub.RepoFolderName(o.FromHF))
			if st, err := os.Stat(dir); err == nil && st.IsDir() {
				dirs = append(dirs, dir)
			}
		}
	}
	return dirs
}

// checkOutput applies the rules above to output (an absolute, clean path)
// for a run reading the local directories sources.
func checkOutput(output string, overwrite bool, sources ...string) error {
	partial, lock := output+".partial", output+".lock"
	protected, err := protectedDirs(sources)
	if err != nil {
		return err
	}
	for _, p := range protected {
		for _, path := range []string{output, partial, lock} {
			if why := relation(path, p); why != "" {
				return &OutputError{Path: path, Reason: why}
			}
		}
	}
	if _, err := os.Lstat(output); err == nil && overwrite {
		if err := qpack.CheckContainerDir(output); err != nil {
			return &OutputError{Path: output, Reason: "--overwrite replaces only a qpack container, and " + reason(err), Err: err}
		}
	}
	if _, err := os.Lstat(partial); err == nil {
		if err := checkPartial(partial); err != nil {
			return &OutputError{Path: partial, Reason: "a repack would resume into it or remove it, and " + reason(err), Err: err}
		}
	}
	if st, err := os.Lstat(lock); err == nil && (!st.Mode().IsRegular() || st.Size() != 0) {
		return &OutputError{Path: lock, Reason: "the lock file repack takes (and removes when done) exists and is not an empty regular file qpack left"}
	}
	return nil
}

// checkPartial accepts a partial directory qpack made: marked by
// qpack.Create, or holding a journal (a partial from before the marker).
func checkPartial(partial string) error {
	err := qpack.CheckPartialDir(partial)
	if err == nil || !errors.Is(err, qpack.ErrNotReplaceable) {
		return err
	}
	if st, jerr := os.Lstat(journalPath(partial)); jerr == nil && st.Mode().IsRegular() {
		if dst, lerr := os.Lstat(partial); lerr == nil && dst.IsDir() {
			return nil
		}
	}
	return err
}

// reason turns a check's error into the tail of a sentence.
func reason(err error) string {
	var re *qpack.ReplaceError
	if errors.As(err, &re) {
		return "it " + re.Reason
	}
	return err.Error()
}

// dirRef is a protected directory: its resolved path and identity.
type dirRef struct {
	what   string // how messages name it
	real   string
	st     fs.FileInfo
	inside bool // an output inside it is refused too (the source itself, not a link target's directory)
}

// protectedDirs resolves each source directory and the directories its
// symlinked entries point into (an output may lie inside one of those, as
// long as it neither is nor contains it).
func protectedDirs(sources []string) ([]dirRef, error) {
	var out []dirRef
	add := func(what, dir string, inside bool) error {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return fmt.Errorf("source directory: %w", err)
		}
		if real, err = filepath.Abs(real); err != nil {
			return err
		}
		st, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("source directory: %w", err)
		}
		for i, d := range out {
			if os.SameFile(d.st, st) {
				out[i].inside = d.inside || inside
				return nil
			}
		}
		out = append(out, dirRef{what: what, real: real, st: st, inside: inside})
		return nil
	}
	for _, src := range sources {
		if err := add("the source directory "+src, src, true); err != nil {
			return nil, err
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return nil, fmt.Errorf("source directory: %w", err)
		}
		for _, e := range ents {
			if e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			target, err := filepath.EvalSymlinks(filepath.Join(src, e.Name()))
			if err != nil {
				continue // a dangling link: opening the source reports it
			}
			if err := add(fmt.Sprintf("the directory %s (where the source's %s points)", filepath.Dir(target), e.Name()), filepath.Dir(target), false); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// relation says how path (which may not exist) stands to the protected
// directory p: "" when apart.
func relation(path string, p dirRef) string {
	real := resolvePath(path)
	st, statErr := os.Stat(path)
	switch {
	case real == p.real || (statErr == nil && os.SameFile(st, p.st)):
		return "it is " + p.what
	case p.inside && (strings.HasPrefix(real, p.real+string(filepath.Separator)) || ancestorIs(real, p.st)):
		return "it lies inside " + p.what
	case strings.HasPrefix(p.real, real+string(filepath.Separator)) || (statErr == nil && ancestorIs(p.real, st)):
		return "it contains " + p.what
	}
	return ""
}

// resolvePath resolves the symlinks of path, or of its nearest existing
// ancestor when it does not exist, and returns it absolute and clean.
func resolvePath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	rest := ""
	for dir := abs; ; {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// ancestorIs reports whether a proper ancestor of path is the directory st.
func ancestorIs(path string, st fs.FileInfo) bool {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if ast, err := os.Stat(dir); err == nil && os.SameFile(ast, st) {
			return true
		}
		if filepath.Dir(dir) == dir {
			return false
		}
	}
}
