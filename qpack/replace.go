package qpack

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Replacing a destination: qpack removes only what it wrote. An existing
// destination may be replaced (Overwrite) only when it is a container (its
// manifest.json carries the magic and a version this package reads, and it
// holds nothing the manifest does not list), and a temporary directory may
// be reused or removed only when it carries PartialMarker. Everything else
// is refused before anything is touched, with a *ReplaceError.

// PartialMarker is the empty file Create writes into the temporary
// directory it makes, so that later runs can tell qpack's own partial
// container from a directory that merely has its name. It is a working file
// (a dot name): Finish removes it with the others.
const PartialMarker = ".qpack-partial"

// RecordNames are the files other qpack commands write into a finished
// container (verify-install's receipt): they belong to it, and go with it
// when it is replaced.
var RecordNames = []string{"verified-install.json"}

// maxReplaceScan bounds the entries CheckContainerDir walks.
const maxReplaceScan = MaxFiles + 1024

// ErrNotReplaceable is wrapped by every *ReplaceError.
var ErrNotReplaceable = errors.New("not a container or partial container qpack wrote")

// ReplaceError says why Path is not something qpack may replace or remove.
type ReplaceError struct {
	Path   string
	Reason string
}

func (e *ReplaceError) Error() string {
	return fmt.Sprintf("%s %s; qpack replaces only a container or partial container it wrote: move it away or delete it yourself", e.Path, e.Reason)
}

func (e *ReplaceError) Unwrap() error { return ErrNotReplaceable }

func refuse(path, format string, a ...any) error {
	return &ReplaceError{Path: path, Reason: fmt.Sprintf(format, a...)}
}

// CheckContainerDir returns nil when dir is a qpack container that may be
// replaced: a real directory (not a symlink) whose manifest.json is a
// regular file of at most MaxManifestSize bytes with magic "QPACK" and
// Version, and which, when the manifest parses in full, holds no file or
// entry that the manifest does not list. (A container whose manifest is
// damaged past its identity is still recognised as one.)
func CheckContainerDir(dir string) error {
	if err := realDir(dir, "a container directory"); err != nil {
		return err
	}
	data, err := readSmallRegular(filepath.Join(dir, ManifestName), MaxManifestSize)
	if err != nil {
		return refuse(dir, "is not a qpack container (%v)", err)
	}
	fields, err := objectFields(data)
	if err != nil {
		return refuse(dir, "is not a qpack container (%s is not a JSON object: %v)", ManifestName, err)
	}
	if magic, err := decodeString(fields["magic"]); err != nil || magic != Magic {
		return refuse(dir, "is not a qpack container (%s has magic %s, want %q)", ManifestName, truncate(string(fields["magic"]), 40), Magic)
	}
	if v, err := decodeInt(fields["version"]); err != nil || v != Version {
		return refuse(dir, "is a container of a format version this qpack does not know (%s: version %s, want %d)", ManifestName, truncate(string(fields["version"]), 40), Version)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil // damaged, but a container by its identity
	}
	extra, err := unlisted(dir, m)
	if err != nil {
		return refuse(dir, "cannot be checked: %v", err)
	}
	if len(extra) > 0 {
		more := ""
		if len(extra) > 5 {
			more = fmt.Sprintf(" and %d more", len(extra)-5)
			extra = extra[:5]
		}
		return refuse(dir, "holds files that are not part of the container (%s%s)", strings.Join(extra, ", "), more)
	}
	return nil
}

// CheckPartialDir returns nil when dir is a temporary directory qpack made:
// a real directory holding PartialMarker as a regular file, or a finished
// container (Finish ran, the rename did not).
func CheckPartialDir(dir string) error {
	if err := realDir(dir, "a partial container"); err != nil {
		return err
	}
	if mst, err := os.Lstat(filepath.Join(dir, PartialMarker)); err == nil && mst.Mode().IsRegular() {
		return nil
	}
	if CheckContainerDir(dir) == nil {
		return nil
	}
	return refuse(dir, "is not a partial container qpack made (it has no %s marker)", PartialMarker)
}

// realDir refuses dir unless it is a directory itself (not a symlink to
// one); what names the kind of directory wanted.
func realDir(dir, what string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(dir)
		return refuse(dir, "is a symbolic link (to %s), not %s", target, what)
	}
	if !st.IsDir() {
		return refuse(dir, "is a %s, not %s", describeMode(st.Mode()), what)
	}
	return nil
}

// MarkPartial creates dir if needed and writes PartialMarker into it.
func MarkPartial(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(dir, PartialMarker)); err == nil {
		return nil
	}
	return WriteFileAtomic(filepath.Join(dir, PartialMarker), nil, 0o644)
}

// ReplaceDir renames the directory tmp to dst. An existing dst is replaced
// only when CheckContainerDir accepts it: it is moved into a fresh hidden
// directory beside it, tmp is renamed into place (the old one is put back
// if that fails), the parent is fsynced, and the old container is removed.
func ReplaceDir(tmp, dst string) error {
	parent := filepath.Dir(dst)
	var aside, old string
	if _, err := os.Lstat(dst); err == nil {
		if err := CheckContainerDir(dst); err != nil {
			return err
		}
		aside, err = os.MkdirTemp(parent, "."+filepath.Base(dst)+".old-")
		if err != nil {
			return fmt.Errorf("qpack: making room to move the old %s aside: %w", dst, err)
		}
		old = filepath.Join(aside, filepath.Base(dst))
		if err := os.Rename(dst, old); err != nil {
			os.Remove(aside)
			return fmt.Errorf("qpack: moving the old %s aside: %w", dst, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("qpack: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if old != "" {
			if os.Rename(old, dst) == nil { // put it back
				os.Remove(aside)
			}
		}
		return fmt.Errorf("qpack: renaming %s to %s: %w", tmp, dst, err)
	}
	if err := syncDir(parent); err != nil {
		return fmt.Errorf("qpack: %w", err)
	}
	if aside != "" {
		if err := os.RemoveAll(aside); err != nil {
			return fmt.Errorf("qpack: removing the replaced container %s: %w", aside, err)
		}
	}
	return nil
}

// unlisted returns the entries under dir that are neither directories nor
// files the manifest lists (manifest.json aside), sorted.
func unlisted(dir string, m *Manifest) ([]string, error) {
	var out []string
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n > maxReplaceScan {
			return fmt.Errorf("more than %d entries", maxReplaceScan)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			return nil
		case rel == ManifestName && d.Type().IsRegular():
			return nil
		}
		if !d.Type().IsRegular() || !ownFile(m, rel) {
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// ownFile reports whether rel is a file qpack put in the container m: one
// it lists, a record (RecordNames), or a temporary file WriteFileAtomic
// left (".<name>.tmp-<digits>") of either or of the manifest.
func ownFile(m *Manifest, rel string) bool {
	own := func(p string) bool {
		_, listed := m.Files[p]
		return listed || p == ManifestName || slices.Contains(RecordNames, p)
	}
	if own(rel) {
		return true
	}
	dir, base := path.Split(rel)
	name, suffix, ok := strings.Cut(strings.TrimPrefix(base, "."), ".tmp-")
	if !ok || !strings.HasPrefix(base, ".") || suffix == "" || strings.Trim(suffix, "0123456789") != "" {
		return false
	}
	return own(dir + name)
}

// readSmallRegular reads path, which must be a regular file (checked
// before opening, so a FIFO never blocks) of at most limit bytes.
func readSmallRegular(path string, limit int64) ([]byte, error) {
	st, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no %s", filepath.Base(path))
		}
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is a %s", filepath.Base(path), describeMode(st.Mode()))
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s has %d bytes, more than %d", filepath.Base(path), st.Size(), limit)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		return nil, fmt.Errorf("%s grew past %d bytes while being read", filepath.Base(path), limit)
	}
	return data, err
}

// describeMode names a file type for messages ("regular file" included).
func describeMode(m fs.FileMode) string {
	if m.IsRegular() {
		return "regular file"
	}
	return modeName(m.Type())
}
