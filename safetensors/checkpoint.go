package safetensors

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/qpack-go/qpack/internal/regfile"
)

// SingleFile is the name of a single-file checkpoint.
const SingleFile = "model.safetensors"

// Shard is one safetensors file of a checkpoint.
type Shard struct {
	Name   string // file name inside the checkpoint directory
	Path   string // Dir joined with Name
	Header *Header
}

// Checkpoint is a checkpoint directory: one safetensors file, or several
// shards listed by model.safetensors.index.json.
type Checkpoint struct {
	Dir    string
	Index  *Index   // nil for a single file
	Shards []*Shard // sorted by Name

	loc map[string]tensorLoc
}

type tensorLoc struct {
	shard  int
	tensor int
}

// OpenCheckpoint reads the headers of the checkpoint in dir. If dir holds
// model.safetensors.index.json, its shards are read and cross-checked: every
// weight_map entry must exist in its shard's header, and every shard tensor
// must be in the map, naming that shard. Otherwise dir must hold
// model.safetensors, or else exactly one *.safetensors file (see
// SelectShards). Tensor names are unique across shards. Every file is
// opened only if it is a regular file (a FIFO or a device is refused without
// blocking).
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		files = append(files, e.Name())
	}
	indexPath := filepath.Join(dir, IndexFile)
	names, ix, err := SelectShards(files, func() ([]byte, error) { return regfile.ReadFile(indexPath, MaxIndexLen) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	var shards []*Shard
	for _, name := range names {
		path := filepath.Join(dir, name)
		h, err := ReadFileHeader(path)
		if err != nil {
			return nil, err
		}
		shards = append(shards, &Shard{Name: name, Path: path, Header: h})
	}
	return NewCheckpoint(dir, ix, shards)
}

// NewCheckpoint assembles a checkpoint from shard headers read elsewhere
// and cross-checks them with the index as OpenCheckpoint does. dir (and
// each shard's Path) name the checkpoint in error messages.
func NewCheckpoint(dir string, ix *Index, shards []*Shard) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir, Index: ix, Shards: shards}
	if err := c.buildLookup(filepath.Join(dir, IndexFile)); err != nil {
		return nil, err
	}
	return c, nil
}

// SelectShards picks the safetensors files of a checkpoint from the names
// of its top-level files: the index's shards when
// model.safetensors.index.json is among them (readIndex returns its bytes;
// every shard it names must be in files), else model.safetensors, else the
// only *.safetensors file. The index is nil without one. Errors do not name
// the checkpoint; the caller adds where it is.
func SelectShards(files []string, readIndex func() ([]byte, error)) ([]string, *Index, error) {
	have := map[string]bool{}
	var st []string
	for _, f := range files {
		have[f] = true
		if strings.HasSuffix(f, ".safetensors") && !strings.Contains(f, "/") {
			st = append(st, f)
		}
	}
	if have[IndexFile] {
		data, err := readIndex()
		if err != nil {
			return nil, nil, err
		}
		ix, err := ParseIndex(data, IndexFile)
		if err != nil {
			return nil, nil, err
		}
		names := ix.Shards()
		for _, n := range names {
			if !have[n] {
				return nil, nil, fmt.Errorf("%s names shard %q, which the checkpoint does not have: %w", IndexFile, n, fs.ErrNotExist)
			}
		}
		return names, ix, nil
	}
	if have[SingleFile] {
		return []string{SingleFile}, nil, nil
	}
	switch len(st) {
	case 0:
		return nil, nil, fmt.Errorf("no safetensors weights (no %s, no %s and no other .safetensors file)", IndexFile, SingleFile)
	case 1:
		return st, nil, nil
	}
	sort.Strings(st)
	if len(st) > 5 {
		st = append(st[:5], "...")
	}
	return nil, nil, fmt.Errorf("no %s but several .safetensors files (%s); cannot tell which is the checkpoint",
		IndexFile, strings.Join(st, ", "))
}

// buildLookup indexes every tensor and cross-checks the weight map.
func (c *Checkpoint) buildLookup(indexPath string) error {
	sort.Slice(c.Shards, func(i, j int) bool { return c.Shards[i].Name < c.Shards[j].Name })
	c.loc = make(map[string]tensorLoc)
	for si, s := range c.Shards {
		for ti, t := range s.Header.Tensors {
			if prev, dup := c.loc[t.Name]; dup {
				return formatErr(s.Path, t.Name, fmt.Sprintf("also in shard %s", c.Shards[prev.shard].Name))
			}
			c.loc[t.Name] = tensorLoc{si, ti}
			if c.Index == nil {
				continue
			}
			want, ok := c.Index.WeightMap[t.Name]
			if !ok {
				return formatErr(s.Path, t.Name, fmt.Sprintf("not in the weight_map of %s", IndexFile))
			}
			if want != s.Name {
				return formatErr(s.Path, t.Name, fmt.Sprintf("%s says it is in shard %s", IndexFile, want))
			}
		}
	}
	if c.Index != nil {
		// Every map entry points at a shard we read, so a missing one means
		// the shard's header lacks the tensor. Report the first by name.
		var missing []string
		for name := range c.Index.WeightMap {
			if _, ok := c.loc[name]; !ok {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			name := missing[0]
			msg := fmt.Sprintf("listed in the weight_map but missing from shard %s", c.Index.WeightMap[name])
			if len(missing) > 1 {
				msg += fmt.Sprintf(" (and %d more tensors)", len(missing)-1)
			}
			return formatErr(indexPath, name, msg)
		}
	}
	return nil
}

// Lookup finds a tensor by name.
func (c *Checkpoint) Lookup(name string) (*Shard, Tensor, bool) {
	l, ok := c.loc[name]
	if !ok {
		return nil, Tensor{}, false
	}
	s := c.Shards[l.shard]
	return s, s.Header.Tensors[l.tensor], true
}

// Names returns every tensor name, sorted.
func (c *Checkpoint) Names() []string {
	out := make([]string, 0, len(c.loc))
	for n := range c.loc {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// DataSize returns the sum of every tensor's byte size, the figure an
// index's total_size should hold.
func (c *Checkpoint) DataSize() int64 {
	var n int64
	for _, s := range c.Shards {
		n += s.Header.DataSize()
	}
	return n
}
