package checkpoint

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/qpack-go/qpack/hfhub"
)

// OpenDir opens the checkpoint in a local directory (any directory,
// including a snapshot of the HF cache, whose links into blobs/ give each
// file the digest its blob is named after) and its shards: they stay open
// until Close. A shard or small file that is not a regular file (a FIFO, a
// device, a socket, a link to one) is refused without blocking.
func OpenDir(dir string) (*Source, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("source directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("source directory: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	s := &Source{kind: KindDir, desc: abs, dir: dir, files: map[string]*entry{}}
	for _, de := range ents {
		if de.IsDir() {
			continue
		}
		p := filepath.Join(dir, de.Name())
		e := &entry{path: de.Name(), size: -1, local: p}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			e.size = st.Size()
		}
		if de.Type()&fs.ModeSymlink != 0 {
			e.expect, e.expectFrom = blobDigest(p)
		}
		s.add(e)
	}
	s.sortPaths()
	if err := s.OpenShards(context.Background()); err != nil {
		return nil, err
	}
	return s, nil
}

// blobDigest returns the digest a link into an HF cache blob promises: the
// blob's name, when the link points into a directory called blobs and the
// name is a sha256 or a git blob sha1.
func blobDigest(link string) (hfhub.Digest, string) {
	target, err := os.Readlink(link)
	if err != nil {
		return hfhub.Digest{}, ""
	}
	if filepath.Base(filepath.Dir(filepath.Clean(target))) != "blobs" {
		return hfhub.Digest{}, ""
	}
	if d, ok := hfhub.DigestForETag(filepath.Base(target)); ok {
		return d, "the name of its HF cache blob"
	}
	return hfhub.Digest{}, ""
}
