package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The ▁ (U+2581) convention of SentencePiece-derived tokenizers: spaces are
// stored in the vocab as a replacement character. tokenizer.json writes it
// either as a Replace normalizer (Gemma: " " -> "▁", with Prepend for
// Llama-style models) or as a Metaspace pre-tokenizer, decoded by a Replace
// or Metaspace decoder.

type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst                // only the piece at the very start of the input
	prependNever
)

// metaspaceJSON is the Metaspace pre-tokenizer and decoder: replacement,
// prepend_scheme (or the older add_prefix_space) and split.
type metaspaceJSON struct {
	Replacement    *string `json:"replacement"`
	PrependScheme  *string `json:"prepend_scheme"`
	AddPrefixSpace *bool   `json:"add_prefix_space"`
	Split          *bool   `json:"split"`
}

type metaspace struct {
	repl   string // one character
	scheme prependScheme
	split  bool
}

func parseMetaspace(raw json.RawMessage) (metaspace, error) {
	var j metaspaceJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return metaspace{}, err
	}
	m := metaspace{repl: "\u2581", scheme: prependAlways, split: true}
	if j.Replacement != nil {
		if utf8.RuneCountInString(*j.Replacement) != 1 {
			return m, fmt.Errorf("Metaspace replacement %q is not one character", *j.Replacement)
		}
		m.repl = *j.Replacement
	}
	switch {
	case j.PrependScheme != nil:
		switch *j.PrependScheme {
		case "always":
			m.scheme = prependAlways
		case "first":
			m.scheme = prependFirst
		case "never":
			m.scheme = prependNever
		default:
			return m, fmt.Errorf("Metaspace prepend_scheme %q is not supported (want always, first or never)", *j.PrependScheme)
		}
	case j.AddPrefixSpace != nil && !*j.AddPrefixSpace:
		m.scheme = prependNever
	}
	if j.Split != nil {
		m.split = *j.Split
	}
	return m, nil
}

// apply is the Metaspace pre-tokenizer on one piece: spaces become the
// replacement, which is prepended as the scheme says, and with split the
// piece is cut before every replacement (each joins what follows it).
// atStart is true for the piece that begins at offset 0 of the whole input.
func (m *metaspace) apply(p string, atStart bool, out []string) []string {
	if p == "" {
		return out
	}
	p = strings.ReplaceAll(p, " ", m.repl)
	if !strings.HasPrefix(p, m.repl) && (m.scheme == prependAlways || (m.scheme == prependFirst && atStart)) {
		p = m.repl + p
	}
	if !m.split {
		return append(out, p)
	}
	start := 0
	for {
		i := strings.Index(p[start+1:], m.repl)
		if i < 0 {
			break
		}
		cut := start + 1 + i
		out = append(out, p[start:cut])
		start = cut
	}
	return append(out, p[start:])
}

// decode is the Metaspace decoder on the first token (after special
// tokens are skipped): unless the scheme is never, every replacement in it
// is dropped, as tokenizers does; in later tokens each becomes a space.
func (m *metaspace) decode(tok string, first bool) string {
	if first && m.scheme != prependNever {
		return strings.ReplaceAll(tok, m.repl, "")
	}
	return strings.ReplaceAll(tok, m.repl, " ")
}

var errMetaspaceRemoved = errors.New("a Metaspace pre-tokenizer with prepend_scheme first after a Split with behavior Removed is not supported")
