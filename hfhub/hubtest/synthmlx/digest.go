package synthmlx

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Digests are what the Hub derives from a file's bytes.
type Digests struct {
	GitSHA1 string `json:"git_sha1"` // git blob id of the content
	SHA256  string `json:"sha256"`   // the LFS oid
	Size    int64  `json:"size"`
}

// ComputeDigests reads the shard once, in order, with a buffer of bufSize
// bytes (two in flight), hashing SHA-1 (git blob) and SHA-256 in parallel.
func (s *Shard) ComputeDigests(bufSize int) (Digests, error) {
	if bufSize <= 0 {
		bufSize = 4 << 20
	}
	g, h := sha1.New(), sha256.New()
	fmt.Fprintf(g, "blob %d\x00", s.size)
	bufs := [2][]byte{make([]byte, bufSize), make([]byte, bufSize)}
	for off, turn := int64(0), 0; off < s.size; turn ^= 1 {
		b := bufs[turn][:min(int64(bufSize), s.size-off)]
		if _, err := s.ReadAt(b, off); err != nil && off+int64(len(b)) < s.size {
			return Digests{}, err
		}
		var wg sync.WaitGroup
		for _, x := range []hash.Hash{g, h} {
			wg.Add(1)
			go func() { defer wg.Done(); x.Write(b) }()
		}
		wg.Wait()
		off += int64(len(b))
	}
	return Digests{GitSHA1: hex.EncodeToString(g.Sum(nil)), SHA256: hex.EncodeToString(h.Sum(nil)), Size: s.size}, nil
}

// CachedDigests returns every shard's digests, read from cacheFile when it
// holds them for this checkpoint (its Tag, then each shard's name and size) and computed (then written there) otherwise.
// progress, if not nil, is told each shard computed.
func (c *Checkpoint) CachedDigests(cacheFile string, progress func(name string, d Digests)) (map[string]Digests, error) {
	type entry struct {
		Tag     string             `json:"tag"`
		Digests map[string]Digests `json:"digests"`
	}
	var cached entry
	if b, err := os.ReadFile(cacheFile); err == nil {
		if json.Unmarshal(b, &cached) != nil || cached.Tag != c.Tag {
			cached = entry{}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	out := map[string]Digests{}
	dirty := false
	for _, s := range c.Shards {
		if d, ok := cached.Digests[s.Name]; ok && d.Size == s.size && len(d.SHA256) == 64 && len(d.GitSHA1) == 40 {
			out[s.Name] = d
			continue
		}
		d, err := s.ComputeDigests(0)
		if err != nil {
			return nil, err
		}
		out[s.Name] = d
		dirty = true
		if progress != nil {
			progress(s.Name, d)
		}
	}
	if dirty {
		b, err := json.MarshalIndent(entry{Tag: c.Tag, Digests: out}, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(cacheFile), 0o755); err != nil {
			return nil, err
		}
		tmp := cacheFile + ".tmp" + strconv.Itoa(os.Getpid())
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, cacheFile); err != nil {
			os.Remove(tmp)
			return nil, err
		}
	}
	return out, nil
}
