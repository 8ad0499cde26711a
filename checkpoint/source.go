package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"path/filepath"
	"sort"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/internal/regfile"
	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// Kind says where a Source's bytes come from.
type Kind string

const (
	KindDir Kind = "dir" // a local directory
	KindHub Kind = "hub" // a Hub repository, read through the cache where it has the files
)

// Source is an opened checkpoint. Its methods are safe for concurrent use
// once it is open (OpenShards done).
type Source struct {
	kind     Kind
	desc     string // the directory, or "org/name@commit"
	dir      string // KindDir: the directory
	repo     string
	revision string
	commit   string
	offline  bool

	files map[string]*entry // by repository path
	paths []string          // sorted

	client *hfhub.Client // KindHub online
	ro     hfhub.ReaderOptions
	log    *slog.Logger

	index  *safetensors.Index
	shards []*Shard
	opened bool
	ident  string
}

// entry is one file of the source.
type entry struct {
	path       string
	size       int64  // -1 when not known before opening (a local file)
	local      string // a local file holding it; "" when only the Hub has it
	remote     bool   // the Hub can serve it
	missing    bool   // the listing names it but the cache lacks it (offline)
	expect     hfhub.Digest
	expectFrom string
}

// Kind returns where the source's bytes come from.
func (s *Source) Kind() Kind { return s.kind }

// String names the source for messages: the directory, or org/name@commit.
func (s *Source) String() string { return s.desc }

// Repo, Revision and Commit identify a Hub source ("" for a directory).
func (s *Source) Repo() string     { return s.repo }
func (s *Source) Revision() string { return s.revision }
func (s *Source) Commit() string   { return s.commit }

// Dir returns a directory source's directory ("" for a Hub source).
func (s *Source) Dir() string { return s.dir }

// Offline reports whether a Hub source reads the cache only.
func (s *Source) Offline() bool { return s.offline }

// Remote reports whether some bytes may come over the network.
func (s *Source) Remote() bool { return s.kind == KindHub && !s.offline }

// Client returns the Hub client of an online Hub source (nil otherwise).
func (s *Source) Client() *hfhub.Client { return s.client }

// Files returns every file path of the source, sorted.
func (s *Source) Files() []string { return append([]string(nil), s.paths...) }

// Has reports whether the source has a file at p (for an offline source:
// whether the cached snapshot or its listing has it).
func (s *Source) Has(p string) bool { _, ok := s.files[p]; return ok }

// Size returns a file's size as listed, or -1 when the source does not
// know it without opening the file.
func (s *Source) Size(p string) int64 {
	if e, ok := s.files[p]; ok {
		return e.size
	}
	return -1
}

// Index returns the parsed model.safetensors.index.json (nil when the
// checkpoint has none). Valid after OpenShards.
func (s *Source) Index() *safetensors.Index { return s.index }

// Shards returns the safetensors shards in the checkpoint's order (empty
// before OpenShards).
func (s *Source) Shards() []*Shard { return s.shards }

// Identity pins the exact source bytes a resume journal is bound to: the
// commit for a Hub repository, a digest of every shard's name, size and
// modification time for a directory. Valid after OpenShards.
func (s *Source) Identity() string { return s.ident }

// Info is the provenance recorded in a container's manifest (the shard
// digests are filled in by whoever verified them).
func (s *Source) Info() qpack.Source {
	if s.kind == KindHub {
		return qpack.Source{Repo: s.repo, Revision: s.revision, Commit: s.commit, Dir: path.Base(s.repo)}
	}
	return qpack.Source{Dir: filepath.Base(s.desc)}
}

// Close closes the shards' local files.
func (s *Source) Close() error {
	var first error
	for _, sh := range s.shards {
		if sh.file != nil {
			if err := sh.file.Close(); err != nil && first == nil {
				first = err
			}
			sh.file = nil
		}
	}
	return first
}

func (s *Source) add(e *entry) {
	if _, dup := s.files[e.path]; !dup {
		s.paths = append(s.paths, e.path)
	}
	s.files[e.path] = e
}

func (s *Source) sortPaths() { sort.Strings(s.paths) }

// errNotCached builds the error for a file an offline source lacks.
func (s *Source) errNotCached(p string) error {
	return fmt.Errorf("%s: %s: %w (offline: download it once online, or run without HF_HUB_OFFLINE / --offline)", s.desc, p, hfhub.ErrNotCached)
}

// ReadFile returns a small file of the source whole, refusing one larger
// than max bytes, and checks it against the digest the source publishes
// for it (see the package doc); an error wrapping fs.ErrNotExist if the
// source has no such file.
func (s *Source) ReadFile(ctx context.Context, name string, max int64) ([]byte, error) {
	e, ok := s.files[name]
	if !ok {
		if s.offline {
			// Without the Hub there is no telling whether the repository
			// has it: absent for callers that skip absent files, not
			// cached for those that need it.
			return nil, fmt.Errorf("%s: %s: %w (the cached snapshot has no such file; %w)", s.desc, name, fs.ErrNotExist, hfhub.ErrNotCached)
		}
		return nil, fmt.Errorf("%s: %s: %w", s.desc, name, fs.ErrNotExist)
	}
	if e.missing {
		return nil, s.errNotCached(name)
	}
	if e.size > max {
		return nil, fmt.Errorf("%s: %s: %d bytes, more than the %d allowed", s.desc, name, e.size, max)
	}
	if e.local != "" {
		data, err := regfile.ReadFile(e.local, max)
		if err == nil {
			if e.size >= 0 && int64(len(data)) != e.size {
				err = fmt.Errorf("%s: %d bytes, %d expected", e.local, len(data), e.size)
			} else {
				err = checkDigest(data, e.expect, e.expectFrom)
			}
		}
		if err == nil {
			return data, nil
		}
		if !e.remote || s.client == nil {
			return nil, fmt.Errorf("%s: %s: %w", s.desc, name, err)
		}
		s.log.Warn("a cached file does not check out; fetching it again", "file", name, "err", err)
	}
	if !e.remote || s.client == nil {
		return nil, s.errNotCached(name)
	}
	f, err := s.client.OpenFile(ctx, s.repo, s.commit, name, hfhub.ReaderOptions{Connections: 1})
	if err != nil {
		return nil, err
	}
	if f.Size() != e.size {
		return nil, fmt.Errorf("%s: %s: the Hub lists %d bytes but serves %d", s.desc, name, e.size, f.Size())
	}
	data := make([]byte, e.size)
	if e.size > 0 {
		if _, err := f.ReadAtContext(ctx, data, 0); err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s: %s: %w", s.desc, name, err)
		}
	}
	if err := checkDigest(data, e.expect, e.expectFrom); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", s.desc, name, err)
	}
	return data, nil
}

// DigestMismatchError reports bytes that do not hash to what the source
// publishes for them.
type DigestMismatchError struct {
	Kind          hfhub.HashKind
	Got, Expected string
	From          string // who says Expected
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("%s %s, but %s says %s: the bytes read are not the published file", e.Kind, e.Got, e.From, e.Expected)
}

func (e *DigestMismatchError) Unwrap() error { return hfhub.ErrHashMismatch }

// checkDigest compares data with want (nothing to do when want is empty).
func checkDigest(data []byte, want hfhub.Digest, from string) error {
	var got string
	switch want.Kind {
	case hfhub.HashSHA256:
		sum := sha256.Sum256(data)
		got = hex.EncodeToString(sum[:])
	case hfhub.HashGitSHA1:
		got = hfhub.GitBlobSHA1(data)
	default:
		return nil
	}
	if got != want.Hex {
		return &DigestMismatchError{Kind: want.Kind, Got: got, Expected: want.Hex, From: from}
	}
	return nil
}

// OpenShards picks the safetensors shards (the index's when the
// checkpoint has model.safetensors.index.json, else model.safetensors,
// else the only *.safetensors file), opens them, reads each header and
// cross-checks them with the index. A prebuilt container needs none of
// this, so the Open functions of a Hub source leave it to the caller.
func (s *Source) OpenShards(ctx context.Context) error {
	if s.opened {
		return nil
	}
	names, ix, err := safetensors.SelectShards(s.paths, func() ([]byte, error) {
		return s.ReadFile(ctx, safetensors.IndexFile, safetensors.MaxIndexLen)
	})
	if err != nil {
		if errors.Is(err, hfhub.ErrNotCached) || errors.Is(err, hfhub.ErrHashMismatch) {
			return err
		}
		if s.offline && errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w: %v (offline: download it once online, or run without HF_HUB_OFFLINE / --offline)", s.desc, hfhub.ErrNotCached, err)
		}
		return fmt.Errorf("%s: %w", s.desc, err)
	}
	s.index = ix
	id := sha256.New()
	var sts []*safetensors.Shard
	for _, n := range names {
		sh, err := s.openShard(ctx, n)
		if err != nil {
			s.Close()
			s.shards = nil
			return err
		}
		s.shards = append(s.shards, sh)
		sts = append(sts, &safetensors.Shard{Name: n, Path: sh.where(), Header: sh.header})
		fmt.Fprintf(id, "%s\x00%d\x00%d\x00", n, sh.size, sh.mtime)
	}
	if _, err := safetensors.NewCheckpoint(s.desc, ix, sts); err != nil {
		s.Close()
		s.shards = nil
		return err
	}
	if s.kind == KindHub {
		s.ident = "hub:" + s.repo + "@" + s.commit
	} else {
		s.ident = "dir:" + hex.EncodeToString(id.Sum(nil))
	}
	s.opened = true
	s.logOrigins()
	return nil
}

// openShard opens one shard from the cache, the directory or the Hub and
// reads its header.
func (s *Source) openShard(ctx context.Context, name string) (*Shard, error) {
	e := s.files[name]
	if e.missing {
		return nil, s.errNotCached(name)
	}
	sh := &Shard{name: name, expect: e.expect, expectFrom: e.expectFrom, src: s.desc}
	if e.local != "" {
		f, st, err := regfile.Open(e.local)
		if err != nil {
			return nil, fmt.Errorf("source shard %s: %w", name, err)
		}
		if e.size >= 0 && st.Size() != e.size {
			f.Close()
			if !e.remote || s.client == nil {
				return nil, fmt.Errorf("source shard %s: %s has %d bytes, %d expected", name, e.local, st.Size(), e.size)
			}
		} else {
			sh.file, sh.path, sh.size, sh.mtime = f, e.local, st.Size(), st.ModTime().UnixNano()
		}
	}
	if sh.file == nil {
		if !e.remote || s.client == nil {
			return nil, s.errNotCached(name)
		}
		f, err := s.client.OpenFile(ctx, s.repo, s.commit, name, s.ro)
		if err != nil {
			return nil, err
		}
		if f.Size() != e.size {
			return nil, fmt.Errorf("source shard %s: the Hub lists %d bytes but serves %d", name, e.size, f.Size())
		}
		sh.remote, sh.size = f, f.Size()
	}
	raw, h, err := readHeader(ctx, sh, sh.size, name)
	if err != nil {
		sh.closeFile()
		return nil, err
	}
	sh.header, sh.raw = h, raw
	return sh, nil
}

// logOrigins says how much of a Hub source comes from the cache.
func (s *Source) logOrigins() {
	if s.kind != KindHub || s.log == nil {
		return
	}
	var cached, fetched int
	var cb, fb int64
	for _, sh := range s.shards {
		if sh.file != nil {
			cached++
			cb += sh.size
		} else {
			fetched++
			fb += sh.size
		}
	}
	s.log.Debug("source shards", "source", s.desc, "from_cache", cached, "cached_bytes", cb, "from_hub", fetched, "hub_bytes", fb)
}

// readHeader reads a shard's header with two reads and keeps its bytes.
func readHeader(ctx context.Context, r readerAtContext, size int64, name string) ([]byte, *safetensors.Header, error) {
	if size < 8 {
		_, err := safetensors.ReadHeader(bytes.NewReader(nil), size, name)
		return nil, nil, err
	}
	var lenBuf [8]byte
	if err := readFull(ctx, r, lenBuf[:], 0); err != nil {
		return nil, nil, fmt.Errorf("%s: reading the header length: %w", name, err)
	}
	n := uint64(lenBuf[0]) | uint64(lenBuf[1])<<8 | uint64(lenBuf[2])<<16 | uint64(lenBuf[3])<<24 |
		uint64(lenBuf[4])<<32 | uint64(lenBuf[5])<<40 | uint64(lenBuf[6])<<48 | uint64(lenBuf[7])<<56
	if n > safetensors.MaxHeaderLen || n > uint64(size-8) {
		// ReadHeader words the error.
		_, err := safetensors.ReadHeader(bytes.NewReader(lenBuf[:]), size, name)
		return nil, nil, err
	}
	raw := make([]byte, 8+n)
	copy(raw, lenBuf[:])
	if err := readFull(ctx, r, raw[8:], 8); err != nil {
		return nil, nil, fmt.Errorf("%s: reading the %d-byte header: %w", name, n, err)
	}
	h, err := safetensors.ReadHeader(bytes.NewReader(raw), size, name)
	if err != nil {
		return nil, nil, err
	}
	return raw, h, nil
}

type readerAtContext interface {
	ReadAtContext(ctx context.Context, p []byte, off int64) (int, error)
}

func readFull(ctx context.Context, r readerAtContext, p []byte, off int64) error {
	n, err := r.ReadAtContext(ctx, p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
