package safetensors

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
// model.safetensors, or else exactly one *.safetensors file. Tensor names are
// unique across shards.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir}
	indexPath := filepath.Join(dir, IndexFile)
	data, err := readBounded(indexPath, MaxIndexLen)
	switch {
	case err == nil:
		ix, err := ParseIndex(data, indexPath)
		if err != nil {
			return nil, err
		}
		c.Index = ix
		for _, name := range ix.Shards() {
			if err := c.addShard(name); err != nil {
				return nil, err
			}
		}
	case os.IsNotExist(err):
		name, err := singleFile(dir)
		if err != nil {
			return nil, err
		}
		if err := c.addShard(name); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	if err := c.buildLookup(indexPath); err != nil {
		return nil, err
	}
	return c, nil
}

// singleFile picks the file of a checkpoint that has no index.
func singleFile(dir string) (string, error) {
	if st, err := os.Stat(filepath.Join(dir, SingleFile)); err == nil && !st.IsDir() {
		return SingleFile, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var found []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") && !e.IsDir() {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%s: no %s, no %s and no other .safetensors file", dir, IndexFile, SingleFile)
	case 1:
		return found[0], nil
	}
	if len(found) > 5 {
		found = append(found[:5], "...")
	}
	return "", fmt.Errorf("%s: no %s but several .safetensors files (%s); cannot tell which is the checkpoint",
		dir, IndexFile, strings.Join(found, ", "))
}

func (c *Checkpoint) addShard(name string) error {
	path := filepath.Join(c.Dir, name)
	h, err := ReadFileHeader(path)
	if err != nil {
		return err
	}
	c.Shards = append(c.Shards, &Shard{Name: name, Path: path, Header: h})
	return nil
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

// readBounded reads a whole file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, formatErr(path, "", "is a directory")
	}
	if st.Size() > limit {
		return nil, formatErr(path, "", fmt.Sprintf("is %d bytes, over the limit of %d", st.Size(), limit))
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, formatErr(path, "", fmt.Sprintf("is over the limit of %d bytes", limit))
	}
	return data, nil
}
