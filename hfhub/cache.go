package hfhub

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// RepoFolderName is the official cache's directory for a model repository:
// "models--" + the id with every "/" replaced by "--".
func RepoFolderName(repo string) string {
	return "models--" + strings.ReplaceAll(repo, "/", "--")
}

// cacheRepo locates one repository inside a cache root.
type cacheRepo struct {
	root string // the cache root (…/hub)
	dir  string // root/models--org--name
	name string // models--org--name
}

func newCacheRepo(root, repo string) cacheRepo {
	n := RepoFolderName(repo)
	return cacheRepo{root: root, dir: filepath.Join(root, n), name: n}
}

func (c cacheRepo) blobPath(etag string) string { return filepath.Join(c.dir, "blobs", etag) }

// partPath is our temp file for a blob being downloaded. It must not be
// "<etag>.incomplete": official clients up to 1.17 would append to (or, at
// full size, promote) a file of that name.
func (c cacheRepo) partPath(etag string) string {
	return filepath.Join(c.dir, "blobs", etag+".qpack-part")
}
func (c cacheRepo) snapshotDir(commit string) string {
	return filepath.Join(c.dir, "snapshots", commit)
}
func (c cacheRepo) snapshotPath(commit, path string) string {
	return filepath.Join(c.snapshotDir(commit), filepath.FromSlash(path))
}
func (c cacheRepo) refPath(rev string) string {
	return filepath.Join(c.dir, "refs", filepath.FromSlash(rev))
}
func (c cacheRepo) lockPath(etag string) string {
	return filepath.Join(c.root, ".locks", c.name, etag+".lock")
}
func (c cacheRepo) treePath(commit string) string {
	return filepath.Join(c.dir, "trees", commit+".json")
}

const cacheDirTag = "Signature: 8a477f597d28d172789f06886806bc55\n" +
	"# This file is a cache directory tag created by huggingface_hub.\n" +
	"# For information about cache directory tags, see:\n" +
	"#\thttps://bford.info/cachedir/\n"

// writeCacheDirTag writes CACHEDIR.TAG in dir unless one is there.
func writeCacheDirTag(dir string) {
	p := filepath.Join(dir, "CACHEDIR.TAG")
	if _, err := os.Lstat(p); err == nil {
		return
	}
	writeFileAtomic(p, []byte(cacheDirTag), 0o644)
}

// writeFileAtomic writes data to a temp file next to path and renames it
// into place.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp-" + randHex(4)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// writeRef records rev → commit: the 40 hex digits, no newline.
func (c cacheRepo) writeRef(rev, commit string) error {
	if rev == commit {
		return nil
	}
	p := c.refPath(rev)
	if b, err := os.ReadFile(p); err == nil && string(b) == commit {
		return nil
	}
	return writeFileAtomic(p, []byte(commit), 0o644)
}

// readRef returns the commit a ref points to in the cache.
func (c cacheRepo) readRef(rev string) (string, error) {
	f, err := os.Open(c.refPath(rev))
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return "", err
	}
	s := string(b)
	if !isCommit(s) {
		return "", fmt.Errorf("%s: %q is not a 40-hex commit (a trailing newline is not allowed either)", c.refPath(rev), strings.TrimSpace(s))
	}
	return s, nil
}

// linkSnapshot points snapshots/<commit>/<path> at blob with a relative
// symlink, replacing whatever is there atomically. Where symlinks are not
// available the blob is copied.
func linkSnapshot(blob, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	target, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		target = blob
	}
	if cur, err := os.Readlink(link); err == nil && cur == target {
		return nil
	}
	tmp := link + ".qpack-link-" + randHex(4)
	if err := os.Symlink(target, tmp); err != nil {
		if !errors.Is(err, fs.ErrPermission) && !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
		if err := copyFile(blob, tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	return out.Close()
}

// treeCacheEntry mirrors the official client's trees/<commit>.json entries.
type treeCacheEntry struct {
	Size      int64   `json:"size"`
	BlobID    string  `json:"blob_id"`
	LFSSHA256 *string `json:"lfs_sha256,omitempty"`
	LFSSize   *int64  `json:"lfs_size,omitempty"`
}

type treeCacheFile struct {
	FormatVersion int                       `json:"format_version"`
	Files         map[string]treeCacheEntry `json:"files"`
}

// writeTreeCache stores the full listing of a commit (immutable) once, as
// trees/<commit>.json in the repository's cache directory.
func (c cacheRepo) writeTreeCache(commit string, files []FileInfo) error {
	return writeTreeCacheFile(c.treePath(commit), files)
}

// writeTreeCacheFile writes the official client's tree cache file (used by
// its offline completeness checks); local dirs keep theirs under
// .cache/huggingface/trees/.
func writeTreeCacheFile(p string, files []FileInfo) error {
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	b, err := encodeTreeCache(files)
	if err != nil {
		return err
	}
	return writeFileAtomic(p, b, 0o644)
}

// encodeTreeCache renders a listing as a tree cache file.
func encodeTreeCache(files []FileInfo) ([]byte, error) {
	t := treeCacheFile{FormatVersion: 1, Files: make(map[string]treeCacheEntry, len(files))}
	for _, f := range files {
		e := treeCacheEntry{Size: f.Size, BlobID: f.BlobID}
		if f.LFS != nil {
			h, s := f.LFS.SHA256, f.LFS.Size
			e.LFSSHA256, e.LFSSize = &h, &s
		}
		t.Files[f.Path] = e
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(t); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// readTreeCache loads trees/<commit>.json if present (nil, nil if not).
func (c cacheRepo) readTreeCache(commit string) ([]FileInfo, error) {
	p := c.treePath(commit)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxJSONBytes*4+1))
	if err != nil {
		return nil, err
	}
	return parseTreeCache(p, b)
}

// parseTreeCache checks a tree cache file read from name (the official
// client writes them too): every path a valid repository path, every size
// in [0, maxFileSize], every blob id a SHA-1 and every lfs_sha256 a SHA-256.
// An unknown format_version gives nil, nil (ignored, as the official client
// does). The listing comes back sorted by path.
func parseTreeCache(name string, b []byte) ([]FileInfo, error) {
	if len(b) > maxJSONBytes*4 {
		return nil, fmt.Errorf("%s: larger than %d MiB", name, maxJSONBytes*4>>20)
	}
	var t treeCacheFile
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if t.FormatVersion != 1 {
		return nil, nil // unknown format: ignore, as the official client does
	}
	out := make([]FileInfo, 0, len(t.Files))
	for path, e := range t.Files {
		if err := ValidateRepoPath(path); err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		if e.Size < 0 || e.Size > maxFileSize || !isSHA1(e.BlobID) {
			return nil, fmt.Errorf("%s: entry %q: bad size or blob_id", name, path)
		}
		fi := FileInfo{Path: path, Size: e.Size, BlobID: e.BlobID}
		if e.LFSSHA256 != nil {
			if !isSHA256(*e.LFSSHA256) {
				return nil, fmt.Errorf("%s: entry %q: bad lfs_sha256", name, path)
			}
			fi.LFS = &LFSInfo{SHA256: *e.LFSSHA256, Size: e.Size}
		}
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// localDirPaths locates the official local-dir bookkeeping for one file:
// <local>/.cache/huggingface/download/<path>.{metadata,lock}.
type localDirPaths struct {
	file, metadata, lock, part string
}

func localPaths(localDir, path string) localDirPaths {
	base := filepath.Join(localDir, ".cache", "huggingface", "download", filepath.FromSlash(path))
	return localDirPaths{
		file:     filepath.Join(localDir, filepath.FromSlash(path)),
		metadata: base + ".metadata",
		lock:     base + ".lock",
		part:     base + ".qpack-part",
	}
}

// prepareLocalDir writes .cache/huggingface/{.gitignore,CACHEDIR.TAG}.
func prepareLocalDir(localDir string) error {
	hf := filepath.Join(localDir, ".cache", "huggingface")
	if err := os.MkdirAll(hf, 0o755); err != nil {
		return err
	}
	gi := filepath.Join(hf, ".gitignore")
	if _, err := os.Lstat(gi); err != nil {
		if err := writeFileAtomic(gi, []byte("*"), 0o644); err != nil {
			return err
		}
	}
	writeCacheDirTag(hf)
	return nil
}

// localMetadata is <path>.metadata: commit, etag and a unix timestamp, one a
// line. It vouches for the file only if the file's mtime-1 <= timestamp.
type localMetadata struct {
	Commit, ETag string
	Timestamp    float64
}

func readLocalMetadata(p localDirPaths) (*localMetadata, bool) {
	b, err := os.ReadFile(p.metadata)
	if err != nil || len(b) > 4096 {
		return nil, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 3 {
		return nil, false
	}
	ts, err := strconv.ParseFloat(strings.TrimSpace(lines[2]), 64)
	if err != nil {
		return nil, false
	}
	m := &localMetadata{Commit: strings.TrimSpace(lines[0]), ETag: strings.TrimSpace(lines[1]), Timestamp: ts}
	st, err := os.Stat(p.file)
	if err != nil {
		return m, false
	}
	mtime := float64(st.ModTime().UnixNano()) / 1e9
	return m, mtime-1 <= ts
}

func writeLocalMetadata(p localDirPaths, commit, etag string, now float64) error {
	s := commit + "\n" + etag + "\n" + strconv.FormatFloat(now, 'f', -1, 64) + "\n"
	return writeFileAtomic(p.metadata, []byte(s), 0o644)
}
