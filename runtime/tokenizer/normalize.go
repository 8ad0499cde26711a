package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normStep is one normalizer of tokenizer.json, applied to each stretch of
// text between added tokens.
type normStep struct {
	kind normKind
	form norm.Form // normUnicode
	from string    // normReplace: the String pattern
	to   string    // normReplace: content; normPrepend: the prefix
}

type normKind uint8

const (
	normUnicode normKind = iota // NFC, NFD, NFKC, NFKD
	normReplace                 // Replace with a String pattern
	normPrepend                 // Prepend: prefix a non-empty text
)

// rewrites reports whether the step can change characters other than by
// Unicode normalization.
func (s normStep) rewrites() bool { return s.kind != normUnicode }

func applyNormalizers(steps []normStep, text string) string {
	for _, s := range steps {
		switch s.kind {
		case normUnicode:
			text = s.form.String(text)
		case normReplace:
			text = strings.ReplaceAll(text, s.from, s.to)
		case normPrepend:
			if text != "" {
				text = s.to + text
			}
		}
	}
	return text
}

// parseNormalizer flattens the normalizer tree into the steps to apply in
// order.
func parseNormalizer(raw json.RawMessage, depth int) ([]normStep, error) {
	if isNull(raw) {
		return nil, nil
	}
	if depth > maxNestDepth {
		return nil, errors.New("sequences nested too deeply")
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Pattern     *stringPattern    `json:"pattern"`
		Content     *string           `json:"content"`
		Prepend     *string           `json:"prepend"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, err
	}
	switch n.Type {
	case "NFC":
		return []normStep{{kind: normUnicode, form: norm.NFC}}, nil
	case "NFD":
		return []normStep{{kind: normUnicode, form: norm.NFD}}, nil
	case "NFKC":
		return []normStep{{kind: normUnicode, form: norm.NFKC}}, nil
	case "NFKD":
		return []normStep{{kind: normUnicode, form: norm.NFKD}}, nil
	case "Replace":
		from, err := n.Pattern.literal("Replace")
		if err != nil {
			return nil, err
		}
		if n.Content == nil {
			return nil, errors.New("Replace without content")
		}
		return []normStep{{kind: normReplace, from: from, to: *n.Content}}, nil
	case "Prepend":
		if n.Prepend == nil {
			return nil, errors.New("Prepend without prepend")
		}
		return []normStep{{kind: normPrepend, to: *n.Prepend}}, nil
	case "Sequence":
		var out []normStep
		for i, sub := range n.Normalizers {
			f, err := parseNormalizer(sub, depth+1)
			if err != nil {
				return nil, fmt.Errorf("normalizers[%d]: %w", i, err)
			}
			out = append(out, f...)
			if len(out) > maxPreSteps {
				return nil, errors.New("too many normalizers")
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("type %q is not supported (want NFC, NFD, NFKC, NFKD, Replace, Prepend or Sequence)", n.Type)
}

// stringPattern is the "pattern" of Split, Replace and the Replace decoder:
// {"String": s} or {"Regex": r}.
type stringPattern struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// literal returns a String pattern; Regex patterns are refused (what names
// the step).
func (p *stringPattern) literal(what string) (string, error) {
	if p == nil || (p.Regex == nil) == (p.String == nil) {
		return "", fmt.Errorf("%s needs a pattern with exactly one of Regex or String", what)
	}
	if p.Regex != nil {
		return "", fmt.Errorf("%s with a Regex pattern is not supported", what)
	}
	if *p.String == "" {
		return "", fmt.Errorf("%s with an empty pattern", what)
	}
	return *p.String, nil
}

// checkAddedNormalized refuses added tokens marked normalized when the
// normalizer rewrites text: tokenizers matches those on the normalized text,
// this package matches every added token on the raw text.
func (t *Tokenizer) checkAddedNormalized(added []addedJSON) error {
	rewrites := false
	for _, s := range t.norm {
		rewrites = rewrites || s.rewrites()
	}
	if !rewrites {
		return nil
	}
	for i, a := range added {
		if a.Normalized {
			return fmt.Errorf("added_tokens[%d] (%q): normalized true with a Replace or Prepend normalizer is not supported", i, a.Content)
		}
	}
	return nil
}
