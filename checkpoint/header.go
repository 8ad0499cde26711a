package checkpoint

import "fmt"

// HeaderMismatchError reports a shard whose hashed bytes do not start with
// the header bytes a plan or a deep-verify map was built from.
type HeaderMismatchError struct {
	Shard  string
	Offset int64 // the first byte that differs (or where the stream ended)
}

func (e *HeaderMismatchError) Error() string {
	return fmt.Sprintf("source shard %s: its safetensors header as first read differs at byte %d from the bytes its sha256 covers: the source changed while being read, or a response was tampered with (nothing built from it is kept; run again)", e.Shard, e.Offset)
}

// StreamCheck compares a shard's hashed stream with the header bytes its
// plan was built from. Write it every byte the hash sees from offset off
// on, in order (it never fails the write itself); Err reports the first
// difference.
type StreamCheck struct {
	shard string
	raw   []byte
	pos   int64
	err   error
}

// NewStreamCheck returns a check for the stream of s that starts at byte
// off. It is nil when off is past the header (nothing to check); a nil
// *StreamCheck accepts every Write and reports no error.
func (s *Shard) NewStreamCheck(off int64) *StreamCheck {
	if off >= int64(len(s.raw)) {
		return nil
	}
	return &StreamCheck{shard: s.name, raw: s.raw, pos: off}
}

// Write implements io.Writer.
func (c *StreamCheck) Write(p []byte) (int, error) {
	if c == nil || c.err != nil || c.pos >= int64(len(c.raw)) {
		if c != nil {
			c.pos += int64(len(p))
		}
		return len(p), nil
	}
	want := c.raw[c.pos:]
	n := min(len(want), len(p))
	for i := 0; i < n; i++ {
		if p[i] != want[i] {
			c.err = &HeaderMismatchError{Shard: c.shard, Offset: c.pos + int64(i)}
			break
		}
	}
	c.pos += int64(len(p))
	return len(p), nil
}

// Err returns the first difference seen, or nil.
func (c *StreamCheck) Err() error {
	if c == nil {
		return nil
	}
	return c.err
}
