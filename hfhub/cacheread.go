package hfhub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Read-only lookups in the official cache, for callers that read a
// repository's files from the cache themselves (the checkpoint package).
// Nothing here writes, locks or deletes.

// DigestForETag derives the digest a file's content must have from the
// name the cache gives its blob (the ETag the Hub served): 64 hex is an LFS
// sha256, 40 hex a git blob sha1; ok is false for anything else.
func DigestForETag(etag string) (Digest, bool) { return digestForETag(etag) }

// CachedBlob returns the path of blobs/<etag> of repo under the cache root
// when it is a regular file of exactly size bytes. Blobs enter the cache
// complete (qpack renames them into place after hashing; the official
// client after checking the size), but their bytes must still be hashed by
// the reader before they shape anything: ok means only "present".
func CachedBlob(root, repo, etag string, size int64) (string, bool) {
	if !isSHA256(etag) && !isSHA1(etag) {
		return "", false
	}
	p := newCacheRepo(root, repo).blobPath(etag)
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Size() != size {
		return "", false
	}
	return p, true
}

// CachedSnapshot is one snapshot of a repository in the cache.
type CachedSnapshot struct {
	Repo     string
	Revision string // as asked
	Commit   string
	Dir      string              // snapshots/<commit>
	Files    []CachedFile        // present in the snapshot, sorted by path
	Listing  map[string]FileInfo // trees/<commit>.json, when the cache has it
	// Missing lists the files the listing names that the snapshot lacks
	// (or whose link is broken, or whose size is not the listed one), sorted.
	Missing []string
}

// CachedFile is a file of a cached snapshot.
type CachedFile struct {
	Path      string // repository path
	LocalPath string // under Dir
	BlobPath  string // the blob the link points to; "" for a plain file (a cache written without symlinks)
	Size      int64
	// Expect is what the content must hash to: the listing's digest when
	// the cache has a listing, else the blob's name; Kind "" when neither
	// says (a plain file with no listing).
	Expect     Digest
	ExpectFrom string
}

// ReadCachedSnapshot finds revision (a commit, or a branch or tag through
// refs/<revision>) of repo under the cache root and lists its files. A
// snapshot link is followed only into the repository's own blobs/
// directory; links elsewhere, broken links and non-regular targets count as
// missing. Errors wrap ErrNotCached when the snapshot is not there.
func ReadCachedSnapshot(root, repo, revision string) (*CachedSnapshot, error) {
	if err := ValidateRepoID(repo); err != nil {
		return nil, err
	}
	if revision == "" {
		revision = "main"
	}
	cr := newCacheRepo(root, repo)
	commit := revision
	if !isCommit(revision) {
		if err := validateRevision(revision); err != nil {
			return nil, err
		}
		c, err := cr.readRef(revision)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%s@%s: %w: no %s (download it once online, or give the commit as the revision)", repo, revision, ErrNotCached, cr.refPath(revision))
			}
			return nil, err
		}
		commit = c
	}
	snap := cr.snapshotDir(commit)
	if st, err := os.Stat(snap); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%s@%s: %w: no snapshot %s", repo, revision, ErrNotCached, snap)
	}
	s := &CachedSnapshot{Repo: repo, Revision: revision, Commit: commit, Dir: snap}
	tree, err := cr.readTreeCache(commit)
	if err != nil {
		return nil, err
	}
	if tree != nil {
		s.Listing = map[string]FileInfo{}
		for _, f := range tree {
			s.Listing[f.Path] = f
		}
	}
	blobs := filepath.Join(cr.dir, "blobs") + string(filepath.Separator)
	err = filepath.WalkDir(snap, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() || strings.Contains(de.Name(), ".qpack-link-") {
			return nil
		}
		rel, err := filepath.Rel(snap, p)
		if err != nil {
			return err
		}
		f := CachedFile{Path: filepath.ToSlash(rel), LocalPath: p}
		if ValidateRepoPath(f.Path) != nil {
			return nil
		}
		if de.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return nil
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			target = filepath.Clean(target)
			if !strings.HasPrefix(target, blobs) || strings.ContainsRune(target[len(blobs):], filepath.Separator) {
				return nil // not one of this repository's blobs
			}
			f.BlobPath = target
		} else if !de.Type().IsRegular() {
			return nil
		}
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			return nil
		}
		f.Size = st.Size()
		if li, ok := s.Listing[f.Path]; ok {
			if li.Size != f.Size {
				return nil // not the listed file: count it as missing
			}
			f.Expect, f.ExpectFrom = li.ExpectedDigest(), "the cached listing trees/"+commit+".json"
		} else if d, ok := digestForETag(filepath.Base(f.BlobPath)); ok && f.BlobPath != "" {
			f.Expect, f.ExpectFrom = d, "the name of its cache blob"
		}
		s.Files = append(s.Files, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading snapshot %s: %w", snap, err)
	}
	sort.Slice(s.Files, func(i, j int) bool { return s.Files[i].Path < s.Files[j].Path })
	have := map[string]bool{}
	for _, f := range s.Files {
		have[f.Path] = true
	}
	for p := range s.Listing {
		if !have[p] {
			s.Missing = append(s.Missing, p)
		}
	}
	sort.Strings(s.Missing)
	return s, nil
}

// CachedSnapshotFile returns snapshots/<commit>/<path> of repo under the
// cache root when it is, or links to, a regular file of exactly size bytes.
// A cache written without symlinks (HF_HUB_DISABLE_SYMLINKS, or a file
// system without them) keeps its files there rather than in blobs/. As with
// CachedBlob, ok means only "present": the bytes must still be hashed.
func CachedSnapshotFile(root, repo, commit, path string, size int64) (string, bool) {
	if !isCommit(commit) || ValidateRepoPath(path) != nil || ValidateRepoID(repo) != nil {
		return "", false
	}
	p := newCacheRepo(root, repo).snapshotPath(commit, path)
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Size() != size {
		return "", false
	}
	return p, true
}
