package qpack

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/qpack-go/qpack/safetensors"
)

// maxEntries bounds the directory walk that looks for symlinks.
const maxEntries = 1 << 16

// Container is an open, validated .qpack directory. Its methods are safe for
// concurrent use.
type Container struct {
	Dir      string
	Manifest *Manifest
	Layout   *Layout
	Dense    *safetensors.Header // header of model.safetensors (offsets are absolute)

	root  *os.Root
	stats map[string]fs.FileInfo // Lstat of every listed file at Open

	mu     sync.Mutex
	layers []*os.File // opened on first use
	closed bool
}

// Open validates the container in dir and returns it. Everything is checked
// before it is trusted: manifest.json (see ParseManifest), no symlink or
// special file anywhere inside dir, every listed file present as a regular
// file of exactly the recorded size, packed_experts/layout.json (see
// ParseLayout), one listed layer file per layer of ExpertCount x stride
// bytes and no other file listed under packed_experts/, the header of
// model.safetensors, and, when the "qpack" extension is present, one file
// digest per listed file and one expert digest per expert of every layer.
// Open reads manifest.json, layout.json and the safetensors header; it does
// not read or hash the data.
//
// dir itself may be reached through a symlink; nothing inside it may be one.
func Open(dir string) (*Container, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("qpack: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("qpack: %s: %w: not a directory", dir, ErrNotContainer)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("qpack: %w", err)
	}
	c := &Container{Dir: dir, root: root}
	if err := c.load(); err != nil {
		root.Close()
		return nil, err
	}
	return c, nil
}

func (c *Container) load() error {
	// The manifest first, so that a directory that is not a container at
	// all is reported as such.
	mst, err := c.root.Lstat(ManifestName)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &Error{File: ManifestName, Err: fmt.Errorf("%w: %s has no %s", ErrNotContainer, c.Dir, ManifestName)}
		}
		return &Error{File: ManifestName, Err: err}
	}
	if !mst.Mode().IsRegular() {
		return errf(ManifestName, "", "is a %s, not a regular file", modeName(mst.Mode().Type()))
	}
	data, err := c.readBounded(ManifestName, MaxManifestSize)
	if err != nil {
		return err
	}
	m, err := ParseManifest(data)
	if err != nil {
		return err
	}
	c.Manifest = m

	if err := c.checkTree(); err != nil {
		return err
	}

	c.stats = make(map[string]fs.FileInfo, len(m.Files))
	for _, p := range m.SortedFiles() {
		st, err := c.root.Lstat(filepath.FromSlash(p))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return errf(p, "", "listed in %s but missing", ManifestName)
			}
			return &Error{File: p, Err: err}
		}
		if !st.Mode().IsRegular() {
			return errf(p, "", "is a %s, not a regular file", modeName(st.Mode().Type()))
		}
		if st.Size() != m.Files[p] {
			return errf(p, "", "size is %d bytes, %s records %d", st.Size(), ManifestName, m.Files[p])
		}
		c.stats[p] = st
	}

	if m.Files[LayoutName] > MaxLayoutSize {
		return errf(LayoutName, "", "%d bytes, more than the limit of %d", m.Files[LayoutName], MaxLayoutSize)
	}
	data, err = c.readBounded(LayoutName, MaxLayoutSize)
	if err != nil {
		return err
	}
	if c.Layout, err = ParseLayout(data); err != nil {
		return err
	}
	if err := checkLayerFiles(m, c.Layout); err != nil {
		return err
	}

	f, err := c.OpenFile(DenseName)
	if err != nil {
		return err
	}
	defer f.Close()
	if c.Dense, err = safetensors.ReadHeader(f, m.Files[DenseName], DenseName); err != nil {
		return denseErr(err)
	}
	c.layers = make([]*os.File, c.Layout.LayerCount)
	return nil
}

// checkLayerFiles checks the manifest against the layout: every layer file
// listed with size ExpertCount x stride, nothing else listed under
// packed_experts/, and expert digests (if any) for every layer and expert.
func checkLayerFiles(m *Manifest, l *Layout) error {
	want := l.LayerSize() // Validate checked it does not overflow
	for i := 0; i < l.LayerCount; i++ {
		p := LayerFile(i)
		size, ok := m.Files[p]
		if !ok {
			return errf(ManifestName, "files", "layer %d: %q is not listed (layout has %d layers)", i, p, l.LayerCount)
		}
		if size != want {
			return errf(p, "", "layer %d: size %d, want expertCount %d x stride %d = %d", i, size, l.ExpertCount, l.ExpertStride, want)
		}
	}
	for _, p := range m.SortedFiles() {
		if !strings.HasPrefix(p, ExpertsDir+"/") || p == LayoutName {
			continue
		}
		if n, ok := parseLayerFile(p); !ok || n >= l.LayerCount {
			return errf(ManifestName, "files", "%q is not one of the layout's %d layer files", p, l.LayerCount)
		}
	}
	if e := m.Ext; e != nil {
		if len(e.ExpertDigests) != l.LayerCount {
			return errf(ManifestName, "qpack.expertDigests", "has %d entries, want one per layer (%d)", len(e.ExpertDigests), l.LayerCount)
		}
		for i := 0; i < l.LayerCount; i++ {
			p := LayerFile(i)
			list, ok := e.ExpertDigests[p]
			if !ok {
				return errf(ManifestName, "qpack.expertDigests", "no entry for %q", p)
			}
			if len(list) != l.ExpertCount {
				return errf(ManifestName, "qpack.expertDigests", "%q has %d digests, want one per expert (%d)", p, len(list), l.ExpertCount)
			}
		}
	}
	return nil
}

// checkTree walks the whole container and refuses symlinks and anything
// that is neither a regular file nor a directory, wherever it is.
func (c *Container) checkTree() error {
	n := 0
	return fs.WalkDir(c.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &Error{File: p, Err: err}
		}
		if n++; n > maxEntries {
			return errf(".", "", "more than %d entries in the container directory", maxEntries)
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			return errf(p, "", "is a symlink; a container must not contain symlinks")
		case t.IsDir() || t.IsRegular():
			return nil
		default:
			return errf(p, "", "is a %s; a container holds only regular files and directories", modeName(t))
		}
	})
}

func (c *Container) readBounded(name string, limit int64) ([]byte, error) {
	f, err := c.root.Open(filepath.FromSlash(name))
	if err != nil {
		return nil, &Error{File: name, Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &Error{File: name, Err: err}
	}
	if int64(len(data)) > limit {
		return nil, errf(name, "", "larger than the limit of %d bytes", limit)
	}
	return data, nil
}

// Close closes the layer files opened so far.
func (c *Container) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var first error
	for i, f := range c.layers {
		if f != nil {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
			c.layers[i] = nil
		}
	}
	if err := c.root.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// Path returns the OS path of a container-relative name.
func (c *Container) Path(rel string) string {
	return filepath.Join(c.Dir, filepath.FromSlash(rel))
}

// LayerPath returns the OS path of layer l's expert file.
func (c *Container) LayerPath(l int) string { return c.Path(LayerFile(l)) }

// Section returns the section called name (see Layout.Section).
func (c *Container) Section(name string) (Section, bool) { return c.Layout.Section(name) }

// ExpertOffset returns the byte offset of expert e in layer l's file.
func (c *Container) ExpertOffset(l, e int) (int64, error) {
	if l < 0 || l >= c.Layout.LayerCount {
		return 0, fmt.Errorf("qpack: layer %d out of range [0, %d)", l, c.Layout.LayerCount)
	}
	return c.Layout.ExpertOffset(e)
}

// OpenFile opens a listed file for reading. It refuses a file that was
// replaced (a different inode, a symlink) or changed size since Open. The
// caller closes it.
func (c *Container) OpenFile(rel string) (*os.File, error) {
	want, ok := c.stats[rel]
	if !ok {
		return nil, errf(rel, "", "not listed in %s", ManifestName)
	}
	f, err := c.root.Open(filepath.FromSlash(rel))
	if err != nil {
		return nil, &Error{File: rel, Err: err}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, &Error{File: rel, Err: err}
	}
	if !st.Mode().IsRegular() || !os.SameFile(st, want) || st.Size() != want.Size() {
		f.Close()
		return nil, errf(rel, "", "changed since the container was opened")
	}
	return f, nil
}

// LayerFile returns the shared, lazily opened file of layer l, for callers
// that issue their own positional reads. The caller must not close it.
func (c *Container) LayerFile(l int) (*os.File, error) {
	if l < 0 || l >= c.Layout.LayerCount {
		return nil, fmt.Errorf("qpack: layer %d out of range [0, %d)", l, c.Layout.LayerCount)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("qpack: %s: container is closed", c.Dir)
	}
	if f := c.layers[l]; f != nil {
		return f, nil
	}
	f, err := c.OpenFile(LayerFile(l))
	if err != nil {
		return nil, err
	}
	c.layers[l] = f
	return f, nil
}

// ReadExpert reads expert e of layer l, its whole stride (padding
// included), into buf[:ExpertStride] with one positional read. buf must hold
// at least ExpertStride bytes.
func (c *Container) ReadExpert(l, e int, buf []byte) error {
	off, err := c.ExpertOffset(l, e)
	if err != nil {
		return err
	}
	stride := c.Layout.ExpertStride
	if int64(len(buf)) < stride {
		return fmt.Errorf("qpack: ReadExpert: buffer of %d bytes, need the stride (%d)", len(buf), stride)
	}
	f, err := c.LayerFile(l)
	if err != nil {
		return err
	}
	if _, err := f.ReadAt(buf[:stride], off); err != nil {
		return fmt.Errorf("qpack: %s: layer %d expert %d: %w", LayerFile(l), l, e, err)
	}
	return nil
}

// Slice returns the bytes of section s within one expert's blob (as read by
// ReadExpert).
func (s Section) Slice(blob []byte) []byte {
	return blob[s.Offset : s.Offset+s.Size]
}

// ExtraFiles lists regular files present in the container directory that
// the manifest does not list (other than manifest.json), sorted.
func (c *Container) ExtraFiles() ([]string, error) {
	var out []string
	err := fs.WalkDir(c.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && p != ManifestName {
			if _, ok := c.Manifest.Files[p]; !ok {
				out = append(out, p)
			}
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
