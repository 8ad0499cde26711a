package safetensors

import (
	"encoding/json"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a small JSON reader over a bounded, UTF-8-validated buffer.
// It exists so that duplicate keys, unknown keys and wrong types are seen
// and reported precisely (with the tensor and the byte offset), and so that
// a large header parses quickly with few allocations; encoding/json's token
// API was several times slower and allocates for every token.
type scanner struct {
	b    []byte
	i    int
	file string
}

func newScanner(b []byte, file string) *scanner { return &scanner{b: b, file: file} }

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) atEnd() bool { return s.i >= len(s.b) }

// syntax reports invalid JSON at the current position.
func (s *scanner) syntax(tensor, what, expected string) error {
	if s.atEnd() {
		return formatErr(s.file, tensor, what+": unexpected end of JSON")
	}
	return formatErr(s.file, tensor, fmt.Sprintf("%s: invalid JSON at byte %d: %s, expected %s",
		what, s.i, charDesc(s.b[s.i]), expected))
}

func charDesc(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("character %q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// kind describes the value starting at the current position.
func (s *scanner) kind() string {
	switch c := s.peek(); {
	case s.atEnd():
		return "the end of the JSON"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		if end, ok := scanNumber(s.b, s.i); ok {
			return "a number (" + truncate(string(s.b[s.i:end])) + ")"
		}
		return "a malformed number"
	default:
		return charDesc(c)
	}
}

// wrongType reports that the value here is not what was wanted; a value
// that is not JSON at all is reported as a syntax error.
func (s *scanner) wrongType(tensor, what, want string) error {
	switch c := s.peek(); {
	case s.atEnd(), !(c == '{' || c == '[' || c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' || c >= '0' && c <= '9'):
		return s.syntax(tensor, what, "a value")
	}
	return formatErr(s.file, tensor, fmt.Sprintf("%s is %s, want %s", what, s.kind(), want))
}

// literal consumes true, false or null.
func (s *scanner) literal(tensor, what, lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.syntax(tensor, what, lit)
	}
	s.i += len(lit)
	return nil
}

// str reads a string; the current byte must be '"'.
func (s *scanner) str(tensor, what string) (string, error) {
	if s.peek() != '"' {
		return "", s.wrongType(tensor, what, "a string")
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			v := string(s.b[start:s.i])
			s.i++
			return v, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", s.syntax(tensor, what, "no control character in a string")
		}
		s.i++
	}
	buf := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return string(buf), nil
		case c < 0x20:
			return "", s.syntax(tensor, what, "no control character in a string")
		case c != '\\':
			buf = append(buf, c)
			s.i++
			continue
		}
		s.i++ // the backslash
		if s.atEnd() {
			break
		}
		e := s.b[s.i]
		s.i++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := s.hex4(tensor, what)
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xDC00 || len(s.b)-s.i < 2 || s.b[s.i] != '\\' || s.b[s.i+1] != 'u' {
					return "", s.syntax(tensor, what, "a valid surrogate pair in a \\u escape")
				}
				s.i += 2
				r2, err := s.hex4(tensor, what)
				if err != nil {
					return "", err
				}
				r = utf16.DecodeRune(r, r2)
				if r == utf8.RuneError {
					return "", s.syntax(tensor, what, "a valid surrogate pair in a \\u escape")
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			s.i--
			return "", s.syntax(tensor, what, "a valid escape")
		}
	}
	return "", s.syntax(tensor, what, "the end of the string")
}

func (s *scanner) hex4(tensor, what string) (rune, error) {
	if len(s.b)-s.i < 4 {
		s.i = len(s.b)
		return 0, s.syntax(tensor, what, "4 hex digits")
	}
	var r rune
	for k := 0; k < 4; k++ {
		c := s.b[s.i]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, s.syntax(tensor, what, "4 hex digits")
		}
		s.i++
	}
	return r, nil
}

// scanNumber returns the end of the JSON number literal at b[i:].
func scanNumber(b []byte, i int) (int, bool) {
	digits := func() bool {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if !digits() {
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return i, false
		}
	}
	return i, true
}

// number reads a number literal.
func (s *scanner) number(tensor, what string) (string, error) {
	end, ok := scanNumber(s.b, s.i)
	if !ok {
		s.i = end
		return "", s.syntax(tensor, what, "a valid number")
	}
	lit := string(s.b[s.i:end])
	s.i = end
	return lit, nil
}

// object walks an object whose '{' is at the current position, calling fn
// with the scanner on each value. With keyIsTensor, errors after a key are
// attributed to the tensor of that name.
func (s *scanner) object(tensor, what string, keyIsTensor bool, fn func(key string) error) error {
	s.i++ // '{'
	s.ws()
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if s.peek() != '"' {
			return s.syntax(tensor, what, "an object key")
		}
		key, err := s.str(tensor, what)
		if err != nil {
			return err
		}
		t := tensor
		if keyIsTensor && key != metadataKey {
			t = key
		}
		s.ws()
		if s.peek() != ':' {
			return s.syntax(t, what, "':' after an object key")
		}
		s.i++
		s.ws()
		if err := fn(key); err != nil {
			return err
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.syntax(t, what, "',' or '}'")
		}
	}
}

// array walks an array whose '[' is at the current position.
func (s *scanner) array(tensor, what string, fn func(i int) error) error {
	s.i++ // '['
	s.ws()
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for i := 0; ; i++ {
		s.ws()
		if err := fn(i); err != nil {
			return err
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.syntax(tensor, what, "',' or ']'")
		}
	}
}

// end checks that only whitespace follows the top-level value.
func (s *scanner) end(what string) error {
	s.ws()
	if !s.atEnd() {
		return formatErr(s.file, "", fmt.Sprintf("%s: %s at byte %d after the JSON object", what, s.kind(), s.i))
	}
	return nil
}

// stringMap reads an object of string values with no duplicate keys. With
// allowNull, a JSON null gives a nil map.
func (s *scanner) stringMap(what string, allowNull bool) (map[string]string, error) {
	if allowNull && s.peek() == 'n' {
		return nil, s.literal("", what, "null")
	}
	if s.peek() != '{' {
		return nil, s.wrongType("", what, "an object of strings")
	}
	m := make(map[string]string)
	err := s.object("", what, false, func(k string) error {
		if _, dup := m[k]; dup {
			return formatErr(s.file, "", fmt.Sprintf("%s: duplicate key %s", what, quoteTrunc(k)))
		}
		if s.peek() != '"' {
			return s.wrongType("", fmt.Sprintf("%s: value of %s", what, quoteTrunc(k)), "a string")
		}
		v, err := s.str("", what)
		if err != nil {
			return err
		}
		m[k] = v
		return nil
	})
	return m, err
}

// intArray reads an array of non-negative integers: exactly want of them
// if want >= 0, at most -want if want < 0.
func (s *scanner) intArray(tensor, what string, want int) ([]int64, error) {
	if s.peek() != '[' {
		return nil, s.wrongType(tensor, what, "an array of integers")
	}
	limit := want
	if want < 0 {
		limit = -want
	}
	out := []int64{}
	err := s.array(tensor, what, func(i int) error {
		if i >= limit {
			return formatErr(s.file, tensor, fmt.Sprintf("%s has more than %d elements", what, limit))
		}
		c := s.peek()
		if c != '-' && (c < '0' || c > '9') {
			return s.wrongType(tensor, fmt.Sprintf("%s[%d]", what, i), "a non-negative integer")
		}
		lit, err := s.number(tensor, what)
		if err != nil {
			return err
		}
		v, err := parseNonNegInt(lit)
		if err != nil {
			return formatErr(s.file, tensor, fmt.Sprintf("%s[%d] = %s: %v", what, i, truncate(lit), err))
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if want >= 0 && len(out) != want {
		return nil, formatErr(s.file, tensor, fmt.Sprintf("%s has %d elements, want %d", what, len(out), want))
	}
	return out, nil
}

// value decodes any JSON value (map[string]any, []any, string,
// json.Number, bool, nil), refusing duplicate object keys and nesting deeper
// than maxJSONDepth.
func (s *scanner) value(what string, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, formatErr(s.file, "", fmt.Sprintf("%s: nested deeper than %d levels", what, maxJSONDepth))
	}
	switch c := s.peek(); {
	case c == '{':
		m := make(map[string]any)
		err := s.object("", what, false, func(k string) error {
			if _, dup := m[k]; dup {
				return formatErr(s.file, "", fmt.Sprintf("%s: duplicate key %s", what, quoteTrunc(k)))
			}
			v, err := s.value(what, depth+1)
			m[k] = v
			return err
		})
		return m, err
	case c == '[':
		a := []any{}
		err := s.array("", what, func(int) error {
			v, err := s.value(what, depth+1)
			a = append(a, v)
			return err
		})
		return a, err
	case c == '"':
		return s.str("", what)
	case c == 't':
		return true, s.literal("", what, "true")
	case c == 'f':
		return false, s.literal("", what, "false")
	case c == 'n':
		return nil, s.literal("", what, "null")
	case c == '-' || c >= '0' && c <= '9':
		lit, err := s.number("", what)
		return json.Number(lit), err
	}
	return nil, s.syntax("", what, "a value")
}
