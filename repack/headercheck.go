package repack

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/qpack-go/qpack/checkpoint"
)

// guardHeader returns the writer the committer feeds range r's bytes to
// for the shard's sha256 chain: w itself, or, for a range that covers part
// of the shard's header, w teed into a comparison with the header bytes the
// plan was built from. check reports a difference; the committer calls it
// before the range enters the journal, so a plan built from a header that
// is not the hashed one is never committed.
func (x *executor) guardHeader(r srcRange, w io.Writer) (hw io.Writer, check func() error) {
	cs, ok := shardOf(x.shards[r.shard])
	if !ok {
		return w, func() error { return nil }
	}
	sc := cs.NewStreamCheck(r.off)
	if sc == nil {
		return w, func() error { return nil }
	}
	return io.MultiWriter(w, sc), sc.Err
}

// shardOf returns the checkpoint shard behind an executor shard.
func shardOf(s Shard) (*checkpoint.Shard, bool) {
	switch v := s.(type) {
	case *checkpoint.Shard:
		return v, true
	case localShard:
		return v.Shard, true
	}
	return nil, false
}

// blameCache adds to a shard hash mismatch where the bytes came from: a
// Hub source's shard read from the HF cache would be read from the same
// damaged blob again by a rerun, so the message says how to get past it.
func blameCache(err error, src *Source) error {
	var sm *ShardMismatchError
	if !errors.As(err, &sm) || src.Kind() != checkpoint.KindHub {
		return err
	}
	for _, sh := range src.Shards() {
		if sh.Name() == sm.Shard && sh.File() != nil {
			// Name the blob itself, not the snapshot link to it: removing
			// the link alone would not help, since a download relinks an
			// existing blob without hashing it again.
			blob := sh.Path()
			if p, perr := filepath.EvalSymlinks(blob); perr == nil {
				blob = p
			}
			if src.Offline() {
				return fmt.Errorf("%w; it was read from the HF cache blob %s, which is damaged: remove it, then download the repository again online (a cached blob is reused without hashing)", err, blob)
			}
			return fmt.Errorf("%w; it was read from the HF cache blob %s, which is damaged: remove it (or rerun with --no-cache) to fetch the shard from the Hub", err, blob)
		}
	}
	return err
}
