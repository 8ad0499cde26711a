package verify

import (
	"context"
	"fmt"
	"os"

	"github.com/qpack-go/qpack/checkpoint"
	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// Source is the checkpoint a container is compared with by a deep check,
// opened by package checkpoint: a local directory (an HF cache snapshot
// included) or a Hub repository at a pinned commit, read through the cache
// where it holds the files. Its shards are read in place; nothing is
// copied.
type Source struct {
	Desc     string // the directory, or "org/name@commit"
	Repo     string // "" for a directory
	Revision string
	Commit   string
	Remote   bool // some bytes come over the network
	Shards   []*SourceShard

	ck *checkpoint.Source
}

// SourceShard is one safetensors file of a source.
type SourceShard struct {
	Name   string
	Size   int64
	Header *safetensors.Header
	// HeaderBytes are the bytes Header was parsed from (the shard's first
	// Header.DataStart bytes): the deep check compares them with the
	// stream its sha256 covers.
	HeaderBytes []byte
	// Expect is the hash the source itself says the bytes have: the Hub
	// listing's sha256 (LFS) or git blob id, or the hash an HF cache blob
	// is named after. Empty when the source says nothing.
	Expect hfhub.Digest
	// ExpectFrom says where Expect came from.
	ExpectFrom string

	r    *checkpoint.Shard
	file *os.File // local shards
	path string   // local shards
}

// readAt reads from the shard, honouring ctx for remote shards.
func (s *SourceShard) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	return s.r.ReadAtContext(ctx, p, off)
}

// Close closes the local files of the source.
func (s *Source) Close() error {
	for _, sh := range s.Shards {
		sh.file = nil
	}
	if s.ck == nil {
		return nil
	}
	return s.ck.Close()
}

// FromCheckpoint makes the deep check's view of an opened checkpoint
// source, opening its shards if that is not done yet. Closing the result
// closes cs.
func FromCheckpoint(ctx context.Context, cs *checkpoint.Source) (*Source, error) {
	if err := cs.OpenShards(ctx); err != nil {
		return nil, err
	}
	s := &Source{Desc: cs.String(), Repo: cs.Repo(), Commit: cs.Commit(), Remote: cs.Remote(), ck: cs}
	if cs.Kind() == checkpoint.KindHub {
		s.Revision = cs.Revision()
	}
	for _, sh := range cs.Shards() {
		s.Shards = append(s.Shards, &SourceShard{Name: sh.Name(), Size: sh.Size(), Header: sh.Header(), HeaderBytes: sh.HeaderBytes(),
			Expect: sh.Expect(), ExpectFrom: sh.ExpectFrom(), r: sh, file: sh.File(), path: sh.Path()})
	}
	return s, nil
}

// OpenDirSource opens the checkpoint in dir (see checkpoint.OpenDir): a
// directory of the official HF cache (snapshots/<commit>/) is recognized,
// each shard being a symlink to blobs/<sha256>, which gives the hash its
// bytes must have.
func OpenDirSource(dir string) (*Source, error) {
	cs, err := checkpoint.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	return FromCheckpoint(context.Background(), cs)
}

// OpenHubSource opens repo at revision ("" means main) through c (see
// checkpoint.OpenHub: files the default cache holds are read from it).
// Each shard's expected hash is the listing's.
func OpenHubSource(ctx context.Context, c *hfhub.Client, repo, revision string, ro hfhub.ReaderOptions) (*Source, error) {
	cs, err := checkpoint.OpenHub(ctx, checkpoint.HubOptions{Client: c, Repo: repo, Revision: revision, Reader: ro})
	if err != nil {
		return nil, err
	}
	return FromCheckpoint(ctx, cs)
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
