package hfhub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// LocalFileError is a file in a Download's LocalDir that qpack did not
// create (no .cache/huggingface/download metadata vouches for it) and whose
// content is not the file to download. It is never overwritten or deleted;
// the download of that file fails with this error. It unwraps to
// ErrLocalFileConflict.
type LocalFileError struct {
	Path   string // repository path
	File   string // the file on disk
	Reason string
}

func (e *LocalFileError) Error() string {
	return fmt.Sprintf("refusing to overwrite %s: %s; it was left unchanged (move it away or choose another --local-dir)", e.File, e.Reason)
}

func (e *LocalFileError) Unwrap() error { return ErrLocalFileConflict }

// localState is what is at a local dir's target path.
type localState int

const (
	localAbsent  localState = iota // nothing there
	localCurrent                   // the file, vouched for by its metadata with this ETag
	localOurs                      // a file the metadata vouches for, of another ETag: ours to replace
	localAdopt                     // a file without valid metadata whose content is the file: adopt it
)

// inspectLocal classifies the target of f in a local dir, deciding
// ownership by the .cache/huggingface/download metadata as huggingface_hub
// does: a file with metadata was downloaded there and may be replaced; one
// without is the user's: adopted if its content is the file's (hashed),
// else a LocalFileError. Symlinks, directories and other non-regular files
// in the way are always refused.
func inspectLocal(p localDirPaths, f FileInfo) (localState, error) {
	st, err := os.Lstat(p.file)
	if errors.Is(err, fs.ErrNotExist) {
		return localAbsent, nil
	}
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		what := "a directory"
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			what = "a symbolic link"
		case !st.IsDir():
			what = "not a regular file (" + st.Mode().Type().String() + ")"
		}
		return 0, &LocalFileError{Path: f.Path, File: p.file, Reason: "it is " + what + " that qpack did not create"}
	}
	m, vouched := readLocalMetadata(p)
	if vouched && m.ETag == f.ETag() && st.Size() == f.Size {
		return localCurrent, nil
	}
	if st.Size() == f.Size {
		if ok, err := fileHasDigest(p.file, f.ExpectedDigest(), f.Size); err != nil {
			return 0, err
		} else if ok {
			return localAdopt, nil
		}
	}
	if m != nil {
		// Downloaded here before (by qpack or huggingface_hub): another
		// revision of it, or edited since; replaced, as huggingface_hub does.
		return localOurs, nil
	}
	return 0, &LocalFileError{Path: f.Path, File: p.file,
		Reason: "it has other content and no download metadata in " + filepath.Join(".cache", "huggingface", "download") + " (qpack did not create it)"}
}

// placeLocal moves a verified part into a local dir. The target is checked
// again right before: a file that appeared meanwhile is not replaced unless
// it is ours (localOurs).
func placeLocal(part string, p localDirPaths, f FileInfo) error {
	state, err := inspectLocal(p, f)
	if err != nil {
		return err
	}
	switch state {
	case localCurrent, localAdopt:
		os.Remove(part) // the same bytes are already there
		return nil
	case localOurs:
		return os.Rename(part, p.file)
	}
	// Absent: do not replace what may appear between the check and now.
	if err := os.Link(part, p.file); err == nil {
		os.Remove(part)
		return nil
	} else if errors.Is(err, fs.ErrExist) {
		return placeLocal(part, p, f)
	}
	if _, err := os.Lstat(p.file); err == nil {
		return placeLocal(part, p, f)
	}
	return os.Rename(part, p.file) // no hard links on this file system
}

// checkLocalDirPlace refuses a local dir that is the cache root or lies
// inside it: plain files written into the cache's layout (blobs/,
// snapshots/) would corrupt it for every client. Paths are compared after
// resolving symlinks of the parts that exist.
func checkLocalDirPlace(localDir, cacheDir string) error {
	ld, cd := resolveExisting(localDir), resolveExisting(cacheDir)
	if rel, err := filepath.Rel(cd, ld); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return badInput("local dir %s lies inside the Hugging Face cache %s: choose a directory outside it (or download into the cache without --local-dir)", localDir, cacheDir)
	}
	return nil
}

// resolveExisting makes p absolute and resolves symlinks in its longest
// existing prefix.
func resolveExisting(p string) string {
	p, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	rest := ""
	for q := p; ; {
		if r, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(q)
		if parent == q {
			return p
		}
		rest = filepath.Join(filepath.Base(q), rest)
		q = parent
	}
}
