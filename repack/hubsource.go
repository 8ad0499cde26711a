package repack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// HubSource is a checkpoint in a Hub repository, pinned to one commit. Its
// shards are read with HTTP range requests; nothing is stored locally.
type HubSource struct {
	client   *hfhub.Client
	repo     string
	revision string
	commit   string
	files    map[string]hfhub.FileInfo
	paths    []string
	shards   []Shard
}

type hubShard struct {
	f      *hfhub.RemoteFile
	name   string
	sha256 string
	blobID string // for a regular (non-LFS) file: its git blob sha1
}

// GitBlobSHA1 returns the git blob id a non-LFS shard must hash to.
func (s *hubShard) GitBlobSHA1() string { return s.blobID }

func (s *hubShard) ReadAt(p []byte, off int64) (int, error) { return s.f.ReadAt(p, off) }
func (s *hubShard) Name() string                            { return s.name }
func (s *hubShard) Size() int64                             { return s.f.Size() }
func (s *hubShard) SHA256() string                          { return s.sha256 }

// StreamRange implements RangeStreamer with one validated range request
// (resumed by the client after cuts and stalls).
func (s *hubShard) StreamRange(ctx context.Context, off, n int64, fn func(io.Reader) error) error {
	return s.f.ReadRanges(ctx, []hfhub.Range{{Off: off, Len: n}}, 1, func(_ hfhub.Range, body io.Reader) error {
		return fn(body)
	})
}

// OpenHub resolves revision ("" means main) to a commit, lists the
// repository and opens its safetensors shards (one HEAD each). Shards are
// checked against the listing's LFS sha256 while they stream.
func OpenHub(ctx context.Context, c *hfhub.Client, repo, revision string) (*HubSource, error) {
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
	s := &HubSource{client: c, repo: repo, revision: revision, commit: commit, files: map[string]hfhub.FileInfo{}}
	for _, f := range list {
		s.files[f.Path] = f
		s.paths = append(s.paths, f.Path)
	}
	return s, nil
}

// openShards picks and opens the weight files; a prebuilt container does
// not need them, so OpenHub leaves this to the repack.
func (s *HubSource) openShards(ctx context.Context) error {
	if s.shards != nil {
		return nil
	}
	names, _, err := shardNames(s.paths, func() ([]byte, error) {
		return s.ReadFile(ctx, safetensors.IndexFile, safetensors.MaxIndexLen)
	})
	if err != nil {
		return fmt.Errorf("%s@%s: %w", s.repo, short(s.commit), err)
	}
	for _, n := range names {
		fi := s.files[n]
		f, err := s.client.OpenFile(ctx, s.repo, s.commit, n, hfhub.ReaderOptions{})
		if err != nil {
			return err
		}
		if f.Size() != fi.Size {
			return fmt.Errorf("%s: the Hub lists %d bytes but serves %d", n, fi.Size, f.Size())
		}
		sh := &hubShard{f: f, name: n}
		if fi.LFS != nil {
			sh.sha256 = fi.LFS.SHA256
		} else {
			sh.blobID = fi.BlobID
		}
		s.shards = append(s.shards, sh)
	}
	return nil
}

// Repo returns the repository id.
func (s *HubSource) Repo() string { return s.repo }

// Commit returns the commit the revision resolved to.
func (s *HubSource) Commit() string { return s.commit }

// Info implements Source.
func (s *HubSource) Info() qpack.Source {
	return qpack.Source{Repo: s.repo, Revision: s.revision, Commit: s.commit, Dir: path.Base(s.repo)}
}

// Identity implements Source.
func (s *HubSource) Identity() string { return "hub:" + s.repo + "@" + s.commit }

// Shards implements Source (after openShards).
func (s *HubSource) Shards() []Shard { return s.shards }

// Has reports whether the repository has a file at p.
func (s *HubSource) Has(p string) bool { _, ok := s.files[p]; return ok }

// ReadFile implements Source: the file is fetched whole and checked against
// the listing's hash (sha256 for LFS files, the git blob id otherwise).
func (s *HubSource) ReadFile(ctx context.Context, name string, max int64) ([]byte, error) {
	fi, ok := s.files[name]
	if !ok {
		return nil, fmt.Errorf("%s@%s: %s: %w", s.repo, short(s.commit), name, fs.ErrNotExist)
	}
	if fi.Size > max {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d allowed", name, fi.Size, max)
	}
	f, err := s.client.OpenFile(ctx, s.repo, s.commit, name, hfhub.ReaderOptions{Connections: 1})
	if err != nil {
		return nil, err
	}
	if f.Size() != fi.Size {
		return nil, fmt.Errorf("%s: the Hub lists %d bytes but serves %d", name, fi.Size, f.Size())
	}
	data := make([]byte, fi.Size)
	if fi.Size > 0 {
		if _, err := f.ReadAtContext(ctx, data, 0); err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	want := fi.ExpectedDigest()
	var got string
	switch want.Kind {
	case hfhub.HashSHA256:
		sum := sha256.Sum256(data)
		got = hex.EncodeToString(sum[:])
	default:
		got = hfhub.GitBlobSHA1(data)
	}
	if want.Hex != "" && got != want.Hex {
		return nil, fmt.Errorf("%s: %s %s, but the Hub lists %s: the bytes received are not the published file", name, want.Kind, got, want.Hex)
	}
	return data, nil
}

// Close implements Source.
func (s *HubSource) Close() error { return nil }

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
