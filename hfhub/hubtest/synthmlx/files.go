package synthmlx

import (
	"fmt"

	"github.com/qpack-go/qpack/hfhub/hubtest"
	"github.com/qpack-go/qpack/safetensors"
)

// served is a shard with its digests, a hubtest.Digested.
type served struct {
	*Shard
	d Digests
}

func (s served) Digests() (string, string) { return s.d.GitSHA1, s.d.SHA256 }

// Files returns the repository to serve: config.json, the index (if
// sharded), every shard as an LFS file with the given digests (from
// CachedDigests), then extra files (tokenizer, generation config).
func (c *Checkpoint) Files(digests map[string]Digests, extra ...hubtest.File) ([]hubtest.File, error) {
	files := []hubtest.File{{Path: "config.json", Data: c.Config}}
	if c.Index != nil {
		files = append(files, hubtest.File{Path: safetensors.IndexFile, Data: c.Index})
	}
	for _, s := range c.Shards {
		d, ok := digests[s.Name]
		if !ok || d.Size != s.size {
			return nil, fmt.Errorf("synthmlx: no digests for %s (%d bytes)", s.Name, s.size)
		}
		files = append(files, hubtest.File{Path: s.Name, Content: served{s, d}, LFS: true})
	}
	return append(files, extra...), nil
}
