package repack

import (
	"context"
	"io"
	"os"
	"strconv"

	"github.com/qpack-go/qpack/checkpoint"
	"github.com/qpack-go/qpack/internal/regfile"
)

// Source is a checkpoint to repack, opened by package checkpoint: a local
// directory, an HF cache snapshot or a Hub repository at a pinned commit
// (read through the cache where it holds the files). Planning uses
// config.json and each shard's header; execution streams the shards.
type Source = checkpoint.Source

// Shard is one safetensors file of a source as the executor sees it:
// random access to its bytes, its name (relative to the checkpoint root),
// its size and, when the source knows it, the sha256 its content must have.
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

// OpenDir opens the checkpoint in dir (see checkpoint.OpenDir).
func OpenDir(dir string) (*Source, error) { return checkpoint.OpenDir(dir) }

// localShard is a shard read from a local file (a directory's, or a cached
// blob): its pieces are copied inside the kernel.
type localShard struct{ *checkpoint.Shard }

func (s localShard) file() *os.File { return s.Shard.File() }

// shardsOf returns the executor's view of the source's shards.
func shardsOf(src *Source) []Shard {
	out := make([]Shard, len(src.Shards()))
	for i, s := range src.Shards() {
		if s.File() != nil {
			out[i] = localShard{s}
		} else {
			out[i] = s
		}
	}
	return out
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

// sourceShards returns the planning view of the shards: their headers as
// the source read them (the executor checks that the hashed bytes start
// with exactly those header bytes).
func sourceShards(src *Source) []SourceShard {
	out := make([]SourceShard, len(src.Shards()))
	for i, s := range src.Shards() {
		out[i] = SourceShard{Name: s.Name(), Size: s.Size(), Header: s.Header(), SHA256: s.SHA256()}
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// readFileMax reads a small local file of qpack's own (the journal),
// refusing a non-regular one and one over max bytes.
func readFileMax(path string, max int64) ([]byte, error) { return regfile.ReadFile(path, max) }
