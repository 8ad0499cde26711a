package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// decoder is what tokenizer.json's decoder says. Either ByteLevel (the GPT-2
// byte alphabet, see bytelevel.go), or a chain for ▁-style tokenizers:
// per-token steps (Replace with a String pattern, Metaspace, Strip), then
// optionally ByteFallback and Fuse, then at most one Strip of the fused text.
type decoder struct {
	byteLevel bool

	steps        []tokenStep // per token, in order
	firstAware   bool        // a step treats the first token differently
	byteFallback bool        // runs of <0xNN> tokens become bytes
	strip        *stripStep  // after Fuse: on the whole text (only at its start)
}

type tokenStep struct {
	kind  tokenStepKind
	from  string    // replace
	to    string    // replace
	meta  metaspace // metaspace
	strip stripStep // strip
}

type tokenStepKind uint8

const (
	stepReplace tokenStepKind = iota
	stepMetaspaceDecode
	stepStrip
)

// stripStep is the Strip decoder: up to start leading and stop trailing
// copies of content are removed.
type stripStep struct {
	content     string // one character
	start, stop int
}

func (s stripStep) apply(tok string) string {
	for i := 0; i < s.start && strings.HasPrefix(tok, s.content); i++ {
		tok = tok[len(s.content):]
	}
	for i := 0; i < s.stop && strings.HasSuffix(tok, s.content); i++ {
		tok = tok[:len(tok)-len(s.content)]
	}
	return tok
}

const maxStrip = 1 << 10

func parseDecoder(raw json.RawMessage) (*decoder, error) {
	if isNull(raw) {
		return nil, errors.New("missing (want ByteLevel, Metaspace or a Sequence of Replace, ByteFallback, Fuse and Strip)")
	}
	var d struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, err
	}
	switch d.Type {
	case "ByteLevel":
		return &decoder{byteLevel: true}, nil
	case "Metaspace", "Replace", "Strip", "ByteFallback", "Fuse":
		return parseChain([]json.RawMessage{raw})
	case "Sequence":
		if len(d.Decoders) > maxPreSteps {
			return nil, fmt.Errorf("Sequence of %d decoders, more than %d", len(d.Decoders), maxPreSteps)
		}
		return parseChain(d.Decoders)
	}
	return nil, fmt.Errorf("type %q is not supported (want ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip or Sequence)", d.Type)
}

// parseChain reads the decoders of a ▁-style chain, refusing orders whose
// per-token semantics this package does not reproduce.
func parseChain(list []json.RawMessage) (*decoder, error) {
	dec := &decoder{}
	fused := false
	for i, raw := range list {
		var d struct {
			Type    string         `json:"type"`
			Pattern *stringPattern `json:"pattern"`
			Content *string        `json:"content"`
			Start   int            `json:"start"`
			Stop    int            `json:"stop"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("decoders[%d]: %w", i, err)
		}
		after := func() error {
			if fused || dec.byteFallback {
				return fmt.Errorf("decoders[%d]: %s after ByteFallback or Fuse is not supported", i, d.Type)
			}
			return nil
		}
		switch d.Type {
		case "Replace":
			if err := after(); err != nil {
				return nil, err
			}
			from, err := d.Pattern.literal("Replace")
			if err != nil {
				return nil, fmt.Errorf("decoders[%d]: %w", i, err)
			}
			if d.Content == nil {
				return nil, fmt.Errorf("decoders[%d]: Replace without content", i)
			}
			dec.steps = append(dec.steps, tokenStep{kind: stepReplace, from: from, to: *d.Content})
		case "Metaspace":
			if err := after(); err != nil {
				return nil, err
			}
			m, err := parseMetaspace(raw)
			if err != nil {
				return nil, fmt.Errorf("decoders[%d]: %w", i, err)
			}
			dec.steps = append(dec.steps, tokenStep{kind: stepMetaspaceDecode, meta: m})
			dec.firstAware = dec.firstAware || m.scheme != prependNever
		case "Strip":
			if d.Content == nil || utf8.RuneCountInString(*d.Content) != 1 {
				return nil, fmt.Errorf("decoders[%d]: Strip content must be one character", i)
			}
			if d.Start < 0 || d.Stop < 0 || d.Start > maxStrip || d.Stop > maxStrip {
				return nil, fmt.Errorf("decoders[%d]: Strip start %d / stop %d out of range", i, d.Start, d.Stop)
			}
			s := stripStep{content: *d.Content, start: d.Start, stop: d.Stop}
			switch {
			case fused:
				if d.Stop != 0 {
					return nil, fmt.Errorf("decoders[%d]: Strip with stop %d after Fuse is not supported", i, d.Stop)
				}
				if dec.strip != nil {
					return nil, fmt.Errorf("decoders[%d]: more than one Strip after Fuse is not supported", i)
				}
				dec.strip = &s
			case dec.byteFallback:
				return nil, fmt.Errorf("decoders[%d]: Strip between ByteFallback and Fuse is not supported", i)
			default:
				dec.steps = append(dec.steps, tokenStep{kind: stepStrip, strip: s})
			}
		case "ByteFallback":
			if dec.byteFallback || fused {
				return nil, fmt.Errorf("decoders[%d]: ByteFallback after ByteFallback or Fuse is not supported", i)
			}
			dec.byteFallback = true
		case "Fuse":
			fused = true
		default:
			return nil, fmt.Errorf("decoders[%d]: type %q is not supported in a Sequence (want Replace, Metaspace, ByteFallback, Fuse or Strip)", i, d.Type)
		}
	}
	return dec, nil
}

// tokenText runs the per-token steps on one token's string.
func (d *decoder) tokenText(tok string, first bool) string {
	for _, s := range d.steps {
		switch s.kind {
		case stepReplace:
			tok = strings.ReplaceAll(tok, s.from, s.to)
		case stepMetaspaceDecode:
			tok = s.meta.decode(tok, first)
		case stepStrip:
			tok = s.strip.apply(tok)
		}
	}
	return tok
}

// byteToken returns the byte a token string stands for under ByteFallback:
// exactly "<0xNN>" with two hex digits of either case, as tokenizers reads it.
func byteToken(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(tok[3])
	lo, ok2 := hexVal(tok[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// pieceTables are the per-id results of the per-token steps for a chain
// decoder: the text of an id as a later token, as the first token (when a
// step cares), and the byte it stands for under ByteFallback (-1 if none).
type pieceTables struct {
	rest      []string
	first     []string // nil unless firstAware
	bytes     []int16
	firstByte []int16 // byte of the first-token form; nil unless firstAware
}

func (d *decoder) buildTables(idToken []string, present []bool) *pieceTables {
	pt := &pieceTables{rest: make([]string, len(idToken)), bytes: make([]int16, len(idToken))}
	if d.firstAware {
		pt.first = make([]string, len(idToken))
		pt.firstByte = make([]int16, len(idToken))
	}
	for id, tok := range idToken {
		pt.bytes[id] = -1
		if pt.firstByte != nil {
			pt.firstByte[id] = -1
		}
		if !present[id] {
			continue
		}
		pt.rest[id] = d.tokenText(tok, false)
		if b, ok := byteToken(pt.rest[id]); ok && d.byteFallback {
			pt.bytes[id] = int16(b)
		}
		if pt.first != nil {
			pt.first[id] = d.tokenText(tok, true)
			if b, ok := byteToken(pt.first[id]); ok && d.byteFallback {
				pt.firstByte[id] = int16(b)
			}
		}
	}
	return pt
}

// pieceState decodes a stream of ids through a chain decoder. A run of
// byte-fallback tokens is held until it ends, because tokenizers turns a run
// that is not valid UTF-8 as a whole into one U+FFFD per byte.
type pieceState struct {
	d       *decoder
	pt      *pieceTables
	n       int    // tokens seen
	run     []byte // pending byte-fallback bytes
	started bool   // text emitted: the fused Strip no longer applies
	dropped int    // copies of the fused Strip's content removed so far
}

func (s *pieceState) add(dst []byte, id int) []byte {
	text, b := s.pt.rest[id], s.pt.bytes[id]
	if s.n == 0 && s.pt.first != nil {
		text, b = s.pt.first[id], s.pt.firstByte[id]
	}
	s.n++
	if b >= 0 {
		s.run = append(s.run, byte(b))
		return dst
	}
	dst = s.flush(dst)
	return s.emit(dst, text)
}

// flush emits the pending byte run.
func (s *pieceState) flush(dst []byte) []byte {
	if len(s.run) == 0 {
		return dst
	}
	var text string
	if utf8.Valid(s.run) {
		text = string(s.run)
	} else {
		text = strings.Repeat("\uFFFD", len(s.run))
	}
	s.run = s.run[:0]
	return s.emit(dst, text)
}

func (s *pieceState) emit(dst []byte, text string) []byte {
	if !s.started && s.d.strip != nil {
		// The fused Strip removes up to start leading copies of content
		// from the whole text, however the tokens split them.
		for s.dropped < s.d.strip.start && strings.HasPrefix(text, s.d.strip.content) {
			text = text[len(s.d.strip.content):]
			s.dropped++
		}
	}
	if text != "" {
		s.started = true
	}
	return append(dst, text...)
}
