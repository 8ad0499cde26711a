package runtime

import (
	"errors"
	"fmt"
)

// Snapshot is a copy of a State at one position: the KV cache of every
// full-attention layer up to that position, and the conv window and
// recurrent state of every Gated DeltaNet layer there. Restoring it into a
// State of the same Model continues the sequence exactly as the State
// continued when the snapshot was taken: the same logits, bit for bit. A
// Snapshot is immutable and may be restored any number of times.
type Snapshot struct {
	m     *Model
	pos   int
	k, v  [][]float32
	conv  [][]float32
	rec   [][]float32
	bytes int64
}

// Snapshot copies the state.
func (s *State) Snapshot() *Snapshot {
	n := len(s.k)
	sn := &Snapshot{m: s.m, pos: s.pos, k: make([][]float32, n), v: make([][]float32, n),
		conv: make([][]float32, n), rec: make([][]float32, n)}
	for l := range n {
		sn.k[l] = cloneF32(s.k[l])
		sn.v[l] = cloneF32(s.v[l])
		sn.conv[l] = cloneF32(s.conv[l])
		sn.rec[l] = cloneF32(s.rec[l])
		sn.bytes += 4 * int64(len(sn.k[l])+len(sn.v[l])+len(sn.conv[l])+len(sn.rec[l]))
	}
	return sn
}

func cloneF32(x []float32) []float32 {
	if x == nil {
		return nil
	}
	return append(make([]float32, 0, len(x)), x...)
}

// Pos is the number of tokens the snapshot has seen.
func (sn *Snapshot) Pos() int { return sn.pos }

// Bytes is the memory the snapshot's tensors take.
func (sn *Snapshot) Bytes() int64 { return sn.bytes }

// ErrForeignSnapshot is returned by Restore for a snapshot of another model.
var ErrForeignSnapshot = errors.New("snapshot of another model")

// Restore replaces the state with a copy of sn, reusing the state's
// buffers where they are large enough. sn must come from a State of the
// same Model.
func (s *State) Restore(sn *Snapshot) error {
	if sn.m != s.m || len(sn.k) != len(s.k) {
		return fmt.Errorf("runtime: restore at position %d: %w", sn.pos, ErrForeignSnapshot)
	}
	for l := range s.k {
		if len(sn.conv[l]) != len(s.conv[l]) || len(sn.rec[l]) != len(s.rec[l]) {
			return fmt.Errorf("runtime: restore at position %d: layer %d: %w", sn.pos, l, ErrForeignSnapshot)
		}
	}
	s.pos = sn.pos
	for l := range s.k {
		s.k[l] = append(s.k[l][:0], sn.k[l]...)
		s.v[l] = append(s.v[l][:0], sn.v[l]...)
		copy(s.conv[l], sn.conv[l])
		copy(s.rec[l], sn.rec[l])
	}
	return nil
}
