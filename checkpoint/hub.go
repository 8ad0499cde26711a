package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/qpack-go/qpack/hfhub"
)

// HubOptions says which Hub repository to open and how.
type HubOptions struct {
	Repo     string
	Revision string // branch, tag or commit; "" means main

	// Client talks to the Hub; when nil, one is made from ClientOptions
	// (not at all offline).
	Client        *hfhub.Client
	ClientOptions hfhub.Options
	// Reader tunes the shards' range reads.
	Reader hfhub.ReaderOptions

	// CacheDir is the official cache root ("" means hfhub.HubCacheDir()).
	CacheDir string
	// NoCache reads everything from the Hub.
	NoCache bool
	// Offline reads the cache only; HF_HUB_OFFLINE=1 turns it on too.
	Offline bool

	Logger *slog.Logger
}

// ErrOfflineNoCache is returned for an offline open with NoCache set.
var ErrOfflineNoCache = errors.New("offline and told not to use the cache: nothing to read")

// OpenHub opens a Hub repository at a pinned commit. Online, the revision
// is resolved and the repository listed on the Hub, and every file whose
// blob the cache holds (named after its ETag, at the listed size) is read
// from the cache, the rest from the Hub; offline, everything comes from the
// cached snapshot. Nothing is written to the cache. The shards are opened
// by OpenShards.
func OpenHub(ctx context.Context, o HubOptions) (*Source, error) {
	if err := hfhub.ValidateRepoID(o.Repo); err != nil {
		return nil, err
	}
	if o.Revision == "" {
		o.Revision = "main"
	}
	if o.CacheDir == "" {
		o.CacheDir = hfhub.HubCacheDir()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Offline || hfhub.EnvOffline() {
		if o.NoCache {
			return nil, ErrOfflineNoCache
		}
		return openCached(o)
	}
	c := o.Client
	if c == nil {
		co := o.ClientOptions
		if co.Logger == nil {
			co.Logger = o.Logger
		}
		var err error
		if c, err = hfhub.NewClient(co); err != nil {
			return nil, err
		}
	}
	commit, err := c.Resolve(ctx, o.Repo, o.Revision)
	if err != nil {
		return nil, err
	}
	list, err := c.ListFiles(ctx, o.Repo, commit)
	if err != nil {
		return nil, err
	}
	s := &Source{kind: KindHub, desc: o.Repo + "@" + commit, repo: o.Repo, revision: o.Revision, commit: commit,
		files: map[string]*entry{}, client: c, ro: o.Reader, log: o.Logger}
	for _, f := range list {
		e := &entry{path: f.Path, size: f.Size, remote: true, expect: f.ExpectedDigest()}
		e.expectFrom = "the Hub listing (git blob id)"
		if f.LFS != nil {
			e.expectFrom = "the Hub listing (LFS sha256)"
		}
		if !o.NoCache {
			if p, ok := hfhub.CachedBlob(o.CacheDir, o.Repo, f.ETag(), f.Size); ok {
				e.local = p
			} else if p, ok := hfhub.CachedSnapshotFile(o.CacheDir, o.Repo, commit, f.Path, f.Size); ok {
				e.local = p // a cache written without symlinks
			}
		}
		s.add(e)
	}
	s.sortPaths()
	return s, nil
}

// openCached opens the cached snapshot of o.Repo at o.Revision.
func openCached(o HubOptions) (*Source, error) {
	snap, err := hfhub.ReadCachedSnapshot(o.CacheDir, o.Repo, o.Revision)
	if err != nil {
		return nil, fmt.Errorf("offline: %w", err)
	}
	s := &Source{kind: KindHub, desc: o.Repo + "@" + snap.Commit, repo: o.Repo, revision: o.Revision, commit: snap.Commit,
		offline: true, files: map[string]*entry{}, log: o.Logger}
	for _, f := range snap.Files {
		s.add(&entry{path: f.Path, size: f.Size, local: f.LocalPath, expect: f.Expect, expectFrom: f.ExpectFrom})
	}
	for _, p := range snap.Missing {
		li := snap.Listing[p]
		s.add(&entry{path: p, size: li.Size, missing: true})
	}
	s.sortPaths()
	return s, nil
}
