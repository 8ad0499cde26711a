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
// its resume record, and one whose lock is held (another download) is
// kept. It returns the paths removed.
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
		if err != nil || rec.ETag != etag || rec.Path == "" {
			continue
		}
		want, ours := current[rec.Path]
		if !ours || want == etag {
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
