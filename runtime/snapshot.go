package runtime

import (
	"errors"
	"fmt"
)

// Snapshot is a copy of a State at one position: every layer's state
// there (KV caches up to that position, recurrent states, ...). Restoring
// it into a State of the same Model continues the sequence exactly as the
// State continued when the snapshot was taken: the same logits, bit for
// bit. A Snapshot is immutable and may be restored any number of times.
// It works for every architecture: each layer state clones itself.
type Snapshot struct {
	m      *Model
	pos    int
	layers []LayerState
	bytes  int64
}

// Snapshot copies the state.
func (s *State) Snapshot() *Snapshot {
	sn := &Snapshot{m: s.m, pos: s.pos, layers: make([]LayerState, len(s.layers))}
	for l, ls := range s.layers {
		if ls != nil {
			sn.layers[l] = ls.Clone()
			sn.bytes += ls.Bytes()
		}
	}
	return sn
}

// Pos is the number of tokens the snapshot has seen.
func (sn *Snapshot) Pos() int { return sn.pos }

// Bytes is the memory the snapshot's tensors take.
func (sn *Snapshot) Bytes() int64 { return sn.bytes }

// ErrForeignSnapshot is returned by Restore for a snapshot of another model.
var ErrForeignSnapshot = errors.New("snapshot of another model")

// Restore replaces the state with a copy of sn, reusing the state's
// buffers where they are large enough. sn must come from a State of the
// same Model; otherwise the state is left unchanged (or, should a layer's
// state refuse the copy half way, Reset) and ErrForeignSnapshot returned.
func (s *State) Restore(sn *Snapshot) error {
	if sn.m != s.m || len(sn.layers) != len(s.layers) {
		return fmt.Errorf("runtime: restore at position %d: %w", sn.pos, ErrForeignSnapshot)
	}
	for l := range s.layers {
		if (sn.layers[l] == nil) != (s.layers[l] == nil) {
			return fmt.Errorf("runtime: restore at position %d: layer %d: %w", sn.pos, l, ErrForeignSnapshot)
		}
	}
	for l, ls := range s.layers {
		if ls != nil && !ls.Restore(sn.layers[l]) {
			s.Reset()
			return fmt.Errorf("runtime: restore at position %d: layer %d: %w", sn.pos, l, ErrForeignSnapshot)
		}
	}
	s.pos = sn.pos
	return nil
}
