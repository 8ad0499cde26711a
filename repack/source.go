package repack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/safetensors"
)

// Shard is one safetensors file of a source checkpoint: random access to its
// bytes, its name (relative to the checkpoint root), its size and, when the
// source knows it, the sha256 its content must have.
type Shard interface {
	io.ReaderAt
	Name() string
	Size() int64
	SHA256() string // lowercase hex, or "" when not known in advance
}

// RangeStreamer is implemented by shards for which one request per range is
// much cheaper than many ReadAt calls (a Hub file: one HTTP range request).
// fn receives a reader that yields exactly n bytes; StreamRange retries
// transient failures itself and resumes where the body stopped.
type RangeStreamer interface {
	StreamRange(ctx context.Context, off, n int64, fn func(body io.Reader) error) error
}

// Source is a checkpoint to repack: a local directory or a Hub repository
// at a pinned commit. Planning reads config.json and each shard's header
// (two small reads per shard); execution streams the shards.
type Source interface {
	// Info is the provenance recorded in the manifest (shard digests are
	// filled in by the repack once verified).
	Info() qpack.Source
	// Identity pins the exact source bytes a journal is bound to: the
	// commit for a Hub repo, a digest of every shard's name, size and
	// modification time for a directory.
	Identity() string
	// Shards lists the safetensors files in the checkpoint's order.
	Shards() []Shard
	// ReadFile returns a small file of the checkpoint (config.json,
	// tokenizer files); an error wrapping fs.ErrNotExist if there is none.
	// Files larger than max are refused.
	ReadFile(ctx context.Context, name string, max int64) ([]byte, error)
	Close() error
}

// AuxFiles are the files besides the weights copied into a container, when
// the source has them.
var AuxFiles = []string{
	"config.json",
	"generation_config.json",
	"tokenizer.json",
	"tokenizer_config.json",
	"special_tokens_map.json",
	"added_tokens.json",
	"vocab.json",
	"merges.txt",
	"chat_template.jinja",
	"chat_template.json",
}

// maxAuxSize bounds each copied side file (tokenizer.json is ~11 MB for
// Qwen).
const maxAuxSize = 64 << 20

// shardNames picks the safetensors files of a checkpoint from its file
// list, as OpenCheckpoint does for a directory: the index's shards when
// model.safetensors.index.json is present, else model.safetensors, else the
// only *.safetensors file. readIndex returns the index's bytes.
func shardNames(files []string, readIndex func() ([]byte, error)) ([]string, *safetensors.Index, error) {
	have := map[string]bool{}
	var st []string
	for _, f := range files {
		have[f] = true
		if strings.HasSuffix(f, ".safetensors") && !strings.Contains(f, "/") {
			st = append(st, f)
		}
	}
	if have[safetensors.IndexFile] {
		data, err := readIndex()
		if err != nil {
			return nil, nil, err
		}
		ix, err := safetensors.ParseIndex(data, safetensors.IndexFile)
		if err != nil {
			return nil, nil, err
		}
		names := ix.Shards()
		for _, n := range names {
			if !have[n] {
				return nil, nil, fmt.Errorf("%s names shard %q, which the checkpoint does not have", safetensors.IndexFile, n)
			}
		}
		return names, ix, nil
	}
	if have[safetensors.SingleFile] {
		return []string{safetensors.SingleFile}, nil, nil
	}
	switch len(st) {
	case 0:
		return nil, nil, fmt.Errorf("no safetensors weights (no %s, no %s, no *.safetensors file)", safetensors.IndexFile, safetensors.SingleFile)
	case 1:
		return st, nil, nil
	}
	sort.Strings(st)
	return nil, nil, fmt.Errorf("%d *.safetensors files (%s, ...) but no %s to say which belong together", len(st), st[0], safetensors.IndexFile)
}

// checkIndex cross-checks an index against the shard headers: every
// weight_map entry is in the shard it names, and every shard tensor is in
// the map under that shard.
func checkIndex(ix *safetensors.Index, shards []SourceShard) error {
	if ix == nil {
		return nil
	}
	byName := map[string]*safetensors.Header{}
	for _, s := range shards {
		byName[s.Name] = s.Header
	}
	names := make([]string, 0, len(ix.WeightMap))
	for n := range ix.WeightMap {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		h := byName[ix.WeightMap[n]]
		if h == nil {
			return fmt.Errorf("%s: tensor %q is mapped to %s, which is not a shard", safetensors.IndexFile, n, ix.WeightMap[n])
		}
		if _, ok := h.Tensor(n); !ok {
			return fmt.Errorf("%s: tensor %q is mapped to %s, but that shard has no such tensor", safetensors.IndexFile, n, ix.WeightMap[n])
		}
	}
	for _, s := range shards {
		for _, t := range s.Header.Tensors {
			if ix.WeightMap[t.Name] != s.Name {
				return fmt.Errorf("%s: tensor %q is in %s but the index maps it to %q", safetensors.IndexFile, t.Name, s.Name, ix.WeightMap[t.Name])
			}
		}
	}
	return nil
}

// DirSource is a checkpoint in a local directory.
type DirSource struct {
	dir    string
	shards []Shard
	files  []*os.File
	ident  string
}

type fileShard struct {
	*os.File
	name string
	size int64
}

func (s *fileShard) Name() string   { return s.name }
func (s *fileShard) Size() int64    { return s.size }
func (s *fileShard) SHA256() string { return "" }
func (s *fileShard) file() *os.File { return s.File }

// OpenDir opens the checkpoint in dir: its shards are opened for reading and
// kept open until Close.
func OpenDir(dir string) (*DirSource, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("source directory: %w", err)
	}
	var files []string
	for _, e := range ents {
		if e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0 {
			files = append(files, e.Name())
		}
	}
	names, _, err := shardNames(files, func() ([]byte, error) {
		return readFileMax(filepath.Join(dir, safetensors.IndexFile), safetensors.MaxIndexLen)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	s := &DirSource{dir: dir}
	id := sha256.New()
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("source shard: %w", err)
		}
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() {
			f.Close()
			s.Close()
			if err == nil {
				err = errors.New("not a regular file")
			}
			return nil, fmt.Errorf("source shard %s: %w", filepath.Join(dir, n), err)
		}
		s.files = append(s.files, f)
		s.shards = append(s.shards, &fileShard{File: f, name: n, size: st.Size()})
		fmt.Fprintf(id, "%s\x00%d\x00%d\x00", n, st.Size(), st.ModTime().UnixNano())
	}
	s.ident = "dir:" + hex.EncodeToString(id.Sum(nil))
	return s, nil
}

// Info implements Source.
func (s *DirSource) Info() qpack.Source {
	abs, err := filepath.Abs(s.dir)
	if err != nil {
		abs = s.dir
	}
	return qpack.Source{Dir: filepath.Base(abs)}
}

// Identity implements Source.
func (s *DirSource) Identity() string { return s.ident }

// Shards implements Source.
func (s *DirSource) Shards() []Shard { return s.shards }

// ReadFile implements Source.
func (s *DirSource) ReadFile(_ context.Context, name string, max int64) ([]byte, error) {
	if err := qpack.CheckPath(name); err != nil {
		return nil, err
	}
	return readFileMax(filepath.Join(s.dir, filepath.FromSlash(name)), max)
}

// Close implements Source.
func (s *DirSource) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.files = nil
	return first
}

func readFileMax(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d allowed", path, st.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: more than the %d bytes allowed", path, max)
	}
	return data, nil
}

// readShardHeaders reads every shard's header (two reads each) and returns
// the planning view of the shards.
func readShardHeaders(shards []Shard) ([]SourceShard, error) {
	out := make([]SourceShard, len(shards))
	for i, s := range shards {
		h, err := safetensors.ReadHeader(s, s.Size(), s.Name())
		if err != nil {
			return nil, err
		}
		out[i] = SourceShard{Name: s.Name(), Size: s.Size(), Header: h, SHA256: s.SHA256()}
	}
	return out, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
