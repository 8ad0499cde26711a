package tokenizer

// StreamDecoder turns ids into text as they are generated. It never splits a
// UTF-8 character: bytes of a sequence that may still complete are held back
// until it does, and bytes that can no longer form valid UTF-8 become U+FFFD,
// so the concatenation of everything Add and Flush return equals Decode of
// all the ids. With a ByteFallback decoder a run of byte tokens is held until
// a token of another kind (or Flush) ends it, since the whole run decodes to
// U+FFFD per byte unless it is valid UTF-8 as a whole. It is not safe for
// concurrent use.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
	pieces      *pieceState // chain decoders
}

// NewStreamDecoder returns a decoder for one stream of ids.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	d := &StreamDecoder{t: t, skipSpecial: skipSpecial}
	if t.pt != nil {
		d.pieces = t.newPieceState()
	}
	return d
}

// Add decodes one more id and returns the text that is now complete (often
// "", when id ends inside a character).
func (d *StreamDecoder) Add(id int) string {
	if !d.t.Known(id) || (d.skipSpecial && d.t.special[id]) {
		return ""
	}
	if d.pieces != nil {
		return string(d.pieces.add(nil, id))
	}
	d.pending = append(d.pending, d.t.idBytes[id]...)
	out, n := appendLossy(nil, d.pending, false)
	d.pending = append(d.pending[:0], d.pending[n:]...)
	return string(out)
}

// Flush returns whatever is held back, as U+FFFD since it is incomplete,
// and empties the decoder.
func (d *StreamDecoder) Flush() string {
	if d.pieces != nil {
		return string(d.pieces.flush(nil))
	}
	out, _ := appendLossy(nil, d.pending, true)
	d.pending = d.pending[:0]
	return string(out)
}

// Pending reports how many bytes are held back.
func (d *StreamDecoder) Pending() int {
	if d.pieces != nil {
		return len(d.pieces.run)
	}
	return len(d.pending)
}
