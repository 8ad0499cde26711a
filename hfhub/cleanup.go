package hfhub

import (
	"os"
	"path/filepath"
	"strings"
)

// removeStaleParts deletes, after a completed download, the partial blobs
// (<etag>.qpack-part) and resume records that an earlier run left for the
// same repository paths at other ETags (a branch that moved between runs).
// Only qpack's own files are touched: a part is attributed to a path by
// its resume record (or, for records that do not name it, by the cached
// listings of other commits in trees/), and one whose lock is held
// (another download) is kept. It returns the paths removed.
func (d *downloader) removeStaleParts(files []FileInfo) []string {
	current := make(map[string]string, len(files))
	for _, f := range files {
		current[f.Path] = f.ETag()
	}
	blobs := filepath.Join(d.cache.dir, "blobs")
	ents, err := os.ReadDir(blobs)
	if err != nil {
		return nil
	}
	var removed []string
	var listed map[string][]string
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".qpack-part.json") {
			continue
		}
		etag := strings.TrimSuffix(name, ".qpack-part.json")
		if _, ok := digestForETag(etag); !ok {
			continue
		}
		rec, err := readResumeRecord(filepath.Join(blobs, name))
		if err != nil || rec.ETag != etag {
			continue
		}
		paths := []string{rec.Path}
		if rec.Path == "" { // a record from before records named their file
			if listed == nil {
				listed = d.listedETags()
			}
			paths = listed[etag]
		}
		stale := false
		for _, p := range paths {
			if want, ours := current[p]; ours && want != etag {
				stale = true
			}
		}
		if !stale {
			continue
		}
		lock, ok := tryLock(d.cache.lockPath(etag))
		if !ok {
			continue
		}
		part := d.cache.partPath(etag)
		for _, p := range []string{part, part + ".json"} {
			if os.Remove(p) == nil {
				removed = append(removed, p)
			}
		}
		lock.Unlock() // the lock file stays: removing it would let two holders lock different files
	}
	return removed
}

// maxTreeListings bounds how many cached listings attribute old records.
const maxTreeListings = 256

// listedETags maps each ETag in the repository's cached listings
// (trees/<commit>.json) to the paths it had.
func (d *downloader) listedETags() map[string][]string {
	out := map[string][]string{}
	ents, err := os.ReadDir(filepath.Join(d.cache.dir, "trees"))
	if err != nil {
		return out
	}
	n := 0
	for _, e := range ents {
		commit, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !isCommit(commit) || n >= maxTreeListings {
			continue
		}
		n++
		files, err := d.cache.readTreeCache(commit)
		if err != nil {
			continue
		}
		for _, f := range files {
			out[f.ETag()] = append(out[f.ETag()], f.Path)
		}
	}
	return out
}
