package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// Source is the checkpoint a container is compared with by a deep check:
// a local directory or a Hub repository at a pinned commit. Its shards are
// read in place (local files, or HTTP range requests); nothing is copied.
type Source struct {
	Desc     string // the directory, or "org/name@commit"
	Repo     string // "" for a directory
	Revision string
	Commit   string
	Remote   bool
	Shards   []*SourceShard
}

// SourceShard is one safetensors file of a source.
type SourceShard struct {
	Name   string
	Size   int64
	Header *safetensors.Header
	// Expect is the hash the source itself says the bytes have: the Hub
	// listing's sha256 (LFS) or git blob id, or the sha256 an HF cache blob
	// is named after. Empty when the source says nothing.
	Expect hfhub.Digest
	// ExpectFrom says where Expect came from.
	ExpectFrom string

	r    io.ReaderAt
	file *os.File // local shards
	path string   // local shards
}

// ReadAtContext reads from the shard, honouring ctx for remote shards.
func (s *SourceShard) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	if rc, ok := s.r.(interface {
		ReadAtContext(context.Context, []byte, int64) (int, error)
	}); ok {
		return rc.ReadAtContext(ctx, p, off)
	}
	return s.r.ReadAt(p, off)
}

// Close closes the local files of the source.
func (s *Source) Close() error {
	var first error
	for _, sh := range s.Shards {
		if sh.file != nil {
			if err := sh.file.Close(); err != nil && first == nil {
				first = err
			}
			sh.file = nil
		}
	}
	return first
}

// OpenDirSource opens the checkpoint in dir (a single model.safetensors or
// shards listed by model.safetensors.index.json) and reads every shard's
// header. A directory of the official HF cache (snapshots/<commit>/) is
// recognized: each shard is a symlink to blobs/<sha256>, which gives the
// hash its bytes must have.
func OpenDirSource(dir string) (*Source, error) {
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	s := &Source{Desc: abs}
	for _, sh := range ck.Shards {
		f, err := os.Open(sh.Path)
		if err != nil {
			s.Close()
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			s.Close()
			return nil, err
		}
		if st.Size() != sh.Header.FileSize {
			f.Close()
			s.Close()
			return nil, fmt.Errorf("%s: changed while being opened", sh.Path)
		}
		ss := &SourceShard{Name: sh.Name, Size: st.Size(), Header: sh.Header, r: f, file: f, path: sh.Path}
		if target, err := os.Readlink(sh.Path); err == nil {
			if base := path.Base(filepath.ToSlash(target)); isLowerHex(base, 64) {
				ss.Expect = hfhub.Digest{Kind: hfhub.HashSHA256, Hex: base}
				ss.ExpectFrom = "the name of its HF cache blob"
			}
		}
		s.Shards = append(s.Shards, ss)
	}
	return s, nil
}

// OpenHubSource resolves revision ("" means main) to a commit, lists the
// repository at that commit and opens its safetensors shards (the shards
// of model.safetensors.index.json when there is one, else every top-level
// *.safetensors), reading each header with two range requests. Each
// shard's expected hash is the listing's (sha256 for LFS files).
func OpenHubSource(ctx context.Context, c *hfhub.Client, repo, revision string, ro hfhub.ReaderOptions) (*Source, error) {
	if revision == "" {
		revision = "main"
	}
	commit, err := c.Resolve(ctx, repo, revision)
	if err != nil {
		return nil, err
	}
	list, err := c.ListFiles(ctx, repo, commit)
	if err != nil {
		return nil, err
	}
	files := map[string]hfhub.FileInfo{}
	for _, f := range list {
		files[f.Path] = f
	}
	var names []string
	if info, ok := files[safetensors.IndexFile]; ok {
		if info.Size > safetensors.MaxIndexLen {
			return nil, fmt.Errorf("%s@%s: %s is %d bytes, more than the limit of %d", repo, commit, safetensors.IndexFile, info.Size, safetensors.MaxIndexLen)
		}
		rf, err := c.OpenFile(ctx, repo, commit, safetensors.IndexFile, ro)
		if err != nil {
			return nil, err
		}
		if rf.Size() > safetensors.MaxIndexLen {
			return nil, fmt.Errorf("%s@%s: %s is %d bytes, more than the limit of %d", repo, commit, safetensors.IndexFile, rf.Size(), safetensors.MaxIndexLen)
		}
		data := make([]byte, rf.Size())
		if _, err := rf.ReadAtContext(ctx, data, 0); err != nil && !(errors.Is(err, io.EOF) && len(data) == 0) {
			return nil, fmt.Errorf("%s@%s: %s: %w", repo, commit, safetensors.IndexFile, err)
		}
		ix, err := safetensors.ParseIndex(data, safetensors.IndexFile)
		if err != nil {
			return nil, err
		}
		names = ix.Shards()
	} else {
		for _, f := range list {
			if !strings.Contains(f.Path, "/") && strings.HasSuffix(f.Path, ".safetensors") {
				names = append(names, f.Path)
			}
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s@%s: no safetensors files", repo, commit)
	}
	s := &Source{Desc: repo + "@" + commit, Repo: repo, Revision: revision, Commit: commit, Remote: true}
	for _, name := range names {
		info, ok := files[name]
		if !ok {
			return nil, fmt.Errorf("%s@%s: %s names %s, which the repository does not have", repo, commit, safetensors.IndexFile, name)
		}
		rf, err := c.OpenFile(ctx, repo, commit, name, ro)
		if err != nil {
			return nil, err
		}
		if rf.Size() != info.Size {
			return nil, fmt.Errorf("%s@%s: %s: the listing says %d bytes, the file has %d", repo, commit, name, info.Size, rf.Size())
		}
		h, err := safetensors.ReadHeader(rf, rf.Size(), name)
		if err != nil {
			return nil, err
		}
		ss := &SourceShard{Name: name, Size: rf.Size(), Header: h, r: rf, Expect: info.ExpectedDigest()}
		if ss.Expect.Hex != "" {
			if info.LFS != nil {
				ss.ExpectFrom = "the Hub listing (LFS sha256)"
			} else {
				ss.ExpectFrom = "the Hub listing (git blob id)"
			}
		}
		s.Shards = append(s.Shards, ss)
	}
	return s, nil
}

// DefaultSource returns the Hub repository and revision the manifest
// records as the container's source (the pinned commit when known), or an
// error when it records none (a local source, or a Swiftlet container).
func DefaultSource(m *qpack.Manifest) (repo, revision string, err error) {
	if m.Ext == nil || m.Ext.Source.Repo == "" {
		dir := m.SourceCheckpoint
		if m.Ext != nil && m.Ext.Source.Dir != "" {
			dir = m.Ext.Source.Dir
		}
		return "", "", fmt.Errorf("the manifest records no Hub repository as the source (only the directory name %q): give the source with --source", dir)
	}
	rev := m.Ext.Source.Commit
	if rev == "" {
		rev = m.Ext.Source.Revision
	}
	return m.Ext.Source.Repo, rev, nil
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
