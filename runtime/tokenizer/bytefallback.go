package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// Byte fallback (model.byte_fallback): a character the vocab lacks is
// encoded as the <0xNN> tokens of its UTF-8 bytes instead of the unk token.
// tokenizers falls back to unk for a character only when one of its byte
// tokens is missing, and then interleaves the two in an order that depends on
// its internals, so a vocab without all 256 byte tokens is refused.

func (t *Tokenizer) setByteFallback() error {
	for b := range 256 {
		tok := fmt.Sprintf("<0x%02X>", b)
		id, ok := t.vocab[tok]
		if !ok {
			return fmt.Errorf("model.byte_fallback: the vocab has no %q (all 256 byte tokens are needed)", tok)
		}
		t.byteIDs[b] = int32(id)
	}
	t.byteFallback = true
	return nil
}

// appendByteTokens appends the byte tokens of r's UTF-8 encoding.
func (t *Tokenizer) appendByteTokens(ids []int32, r rune) []int32 {
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	for _, b := range buf[:n] {
		ids = append(ids, t.byteIDs[b])
	}
	return ids
}

// buildPieceTables prepares decoding for a chain decoder; TokenBytes then
// gives an id's text as a later token (its byte for a byte-fallback token).
func (t *Tokenizer) buildPieceTables() {
	t.pt = t.dec.buildTables(t.idToken, t.present)
	for id := range t.idBytes {
		if !t.present[id] {
			continue
		}
		if b := t.pt.bytes[id]; b >= 0 {
			t.idBytes[id] = []byte{byte(b)}
		} else {
			t.idBytes[id] = []byte(t.pt.rest[id])
		}
	}
}

func (t *Tokenizer) newPieceState() *pieceState { return &pieceState{d: t.dec, pt: t.pt} }

func (t *Tokenizer) decodePieces(ids []int, skipSpecial bool) string {
	s := t.newPieceState()
	var buf []byte
	for _, id := range ids {
		if !t.Known(id) || (skipSpecial && t.special[id]) {
			continue
		}
		buf = s.add(buf, id)
	}
	return string(s.flush(buf))
}
