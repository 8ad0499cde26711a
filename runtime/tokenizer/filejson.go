package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// decodeFile reads a tokenizer.json. model.vocab and model.merges (hundreds of
// thousands of entries for Gemma 4) are scanned here directly; everything else
// goes through encoding/json. The result is what json.Unmarshal into fileJSON
// gives, except that keys match case-sensitively (as the tokenizers library
// reads them) and a repeated "model", "vocab" or "merges" is refused.
func decodeFile(data []byte) (fileJSON, error) {
	var f fileJSON
	s := &jscan{data: data}
	var rest bytes.Buffer // the other top-level members, as a JSON object
	rest.WriteByte('{')
	haveModel := false
	err := s.object(func(key []byte, keyRaw []byte) error {
		if string(key) == "model" {
			if haveModel {
				return errors.New(`"model" given twice`)
			}
			haveModel = true
			m, err := s.model()
			if err != nil {
				return fmt.Errorf("model: %w", err)
			}
			f.Model = m
			return nil
		}
		return s.keep(&rest, keyRaw)
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return f, err
	}
	rest.WriteByte('}')
	var other struct {
		AddedTokens  []addedJSON     `json:"added_tokens"`
		Normalizer   json.RawMessage `json:"normalizer"`
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
		Decoder      json.RawMessage `json:"decoder"`
	}
	if err := json.Unmarshal(rest.Bytes(), &other); err != nil {
		return f, err
	}
	f.AddedTokens, f.Normalizer, f.PreTokenizer, f.Decoder = other.AddedTokens, other.Normalizer, other.PreTokenizer, other.Decoder
	return f, nil
}

// model reads the model object.
func (s *jscan) model() (*modelJSON, error) {
	if s.peek() == 'n' {
		if err := s.literal("null"); err != nil {
			return nil, err
		}
		return nil, nil
	}
	var rest bytes.Buffer
	rest.WriteByte('{')
	var vocab map[string]int64
	var merges []mergeJSON
	haveVocab, haveMerges := false, false
	err := s.object(func(key, keyRaw []byte) error {
		switch string(key) {
		case "vocab":
			if haveVocab {
				return errors.New(`"vocab" given twice`)
			}
			haveVocab = true
			var err error
			if vocab, err = s.vocab(); err != nil {
				return fmt.Errorf("vocab: %w", err)
			}
		case "merges":
			if haveMerges {
				return errors.New(`"merges" given twice`)
			}
			haveMerges = true
			var err error
			if merges, err = s.merges(); err != nil {
				return fmt.Errorf("merges: %w", err)
			}
		default:
			return s.keep(&rest, keyRaw)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	rest.WriteByte('}')
	var m modelOptions
	if err := json.Unmarshal(rest.Bytes(), &m); err != nil {
		return nil, err
	}
	return &modelJSON{modelOptions: m, Vocab: vocab, Merges: merges}, nil
}

// vocab reads {"token": id, ...} (or null).
func (s *jscan) vocab() (map[string]int64, error) {
	if s.peek() == 'n' {
		return nil, s.literal("null")
	}
	v := make(map[string]int64, 1024)
	err := s.object(func(key, _ []byte) error {
		if len(v) >= maxVocab {
			return fmt.Errorf("more than %d entries", maxVocab)
		}
		id, err := s.int()
		if err != nil {
			return fmt.Errorf("token %q: %w", key, err)
		}
		v[string(key)] = id
		return nil
	})
	return v, err
}

// merges reads ["a b", ...] or [["a", "b"], ...] (or null).
func (s *jscan) merges() ([]mergeJSON, error) {
	if s.peek() == 'n' {
		return nil, s.literal("null")
	}
	out := make([]mergeJSON, 0, min(len(s.data)/64, maxMerges)+16)
	err := s.array(func(i int) error {
		if i >= maxMerges {
			return fmt.Errorf("more than %d entries", maxMerges)
		}
		var m mergeJSON
		switch s.peek() {
		case '"':
			str, err := s.str()
			if err != nil {
				return err
			}
			a, b, found := bytes.Cut(str, []byte(" "))
			if !found || bytes.IndexByte(b, ' ') >= 0 {
				return fmt.Errorf("[%d]: merge %q is not two tokens separated by one space", i, str)
			}
			m = mergeJSON{transient(a), transient(b), true}
		case '[':
			a, b, err := s.pair(i)
			if err != nil {
				return err
			}
			m = mergeJSON{a, b, true}
		default:
			return fmt.Errorf("[%d]: merge is neither a string nor a pair of strings", i)
		}
		out = append(out, m)
		return nil
	})
	return out, err
}

// transient returns b as a string without copying. The merges are only read
// while Parse runs (the tokenizer keeps ids, not their strings), so their
// parts may share the input's memory, which Parse never changes; this saves
// a million small allocations on Gemma 4's merges. Error messages copy them.
func transient(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// pair reads the merge ["a", "b"] (merge i, for errors).
func (s *jscan) pair(i int) (string, string, error) {
	var parts [2]string
	s.pos++ // '['
	for k := 0; ; k++ {
		if k == 0 && s.peek() == ']' {
			s.pos++
			return "", "", fmt.Errorf("[%d]: merge has 0 parts, want 2", i)
		}
		if k >= 2 {
			return "", "", fmt.Errorf("[%d]: merge has more than 2 parts", i)
		}
		if s.peek() != '"' {
			return "", "", fmt.Errorf("[%d]: merge part is not a string", i)
		}
		p, err := s.str()
		if err != nil {
			return "", "", err
		}
		parts[k] = transient(p)
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			if k != 1 {
				return "", "", fmt.Errorf("[%d]: merge has %d parts, want 2", i, k+1)
			}
			return parts[0], parts[1], nil
		default:
			return "", "", s.errf("want ',' or ']'")
		}
	}
}

// jscan is a strict scanner over one JSON document.
type jscan struct {
	data  []byte
	pos   int
	depth int
}

const maxJSONDepth = 256

func (s *jscan) errf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *jscan) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *jscan) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *jscan) end() error {
	if s.peek() != 0 || s.pos != len(s.data) {
		return s.errf("data after the top-level value")
	}
	return nil
}

func (s *jscan) literal(lit string) error {
	s.ws()
	if !bytes.HasPrefix(s.data[s.pos:], []byte(lit)) {
		return s.errf("want %s", lit)
	}
	s.pos += len(lit)
	return nil
}

// object calls member for each key, with the scanner at its value; member
// must consume the value. keyRaw is the key as written, quotes included.
func (s *jscan) object(member func(key, keyRaw []byte) error) error {
	if s.peek() != '{' {
		return s.errf("want an object")
	}
	if s.depth++; s.depth > maxJSONDepth {
		return s.errf("nested too deeply")
	}
	defer func() { s.depth-- }()
	s.pos++
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.errf("want a key")
		}
		start := s.pos
		key, err := s.str()
		if err != nil {
			return err
		}
		keyRaw := s.data[start:s.pos]
		if s.peek() != ':' {
			return s.errf("want ':'")
		}
		s.pos++
		s.ws()
		if err := member(key, keyRaw); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errf("want ',' or '}'")
		}
	}
}

// array calls elem for each element, with the scanner at it.
func (s *jscan) array(elem func(i int) error) error {
	if s.peek() != '[' {
		return s.errf("want an array")
	}
	if s.depth++; s.depth > maxJSONDepth {
		return s.errf("nested too deeply")
	}
	defer func() { s.depth-- }()
	s.pos++
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		s.ws()
		if err := elem(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errf("want ',' or ']'")
		}
	}
}

// str reads a string. Without escapes and in valid UTF-8 it is the bytes as
// written; otherwise encoding/json decodes it (invalid UTF-8 and lone
// surrogates become U+FFFD there). The result may alias the input.
func (s *jscan) str() ([]byte, error) {
	s.ws()
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return nil, s.errf("want a string")
	}
	start := s.pos
	plain := true
	i := s.pos + 1
	for ; i < len(s.data); i++ {
		c := s.data[i]
		if c == '"' {
			break
		}
		if c < 0x20 {
			s.pos = i
			return nil, s.errf("control character in a string")
		}
		if c == '\\' {
			plain = false
			i++
		} else if c >= 0x80 {
			plain = false
		}
	}
	if i >= len(s.data) {
		return nil, s.errf("unterminated string")
	}
	s.pos = i + 1
	body := s.data[start+1 : i]
	if plain || (bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body)) {
		return body, nil
	}
	var out string
	if err := json.Unmarshal(s.data[start:s.pos], &out); err != nil {
		s.pos = start
		return nil, s.errf("bad string: %v", err)
	}
	return []byte(out), nil
}

// int reads an integer that fits in an int64 (no fraction or exponent, as
// encoding/json requires for an int64).
func (s *jscan) int() (int64, error) {
	s.ws()
	start := s.pos
	neg := false
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		neg = true
		s.pos++
	}
	digits := s.pos
	var v int64
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		d := int64(s.data[s.pos] - '0')
		if v > (1<<63-1-d)/10 {
			return 0, s.errf("integer out of range")
		}
		v = v*10 + d
		s.pos++
	}
	n := s.pos - digits
	if n == 0 || (n > 1 && s.data[digits] == '0') {
		s.pos = start
		return 0, s.errf("want an integer id")
	}
	if s.pos < len(s.data) && bytes.IndexByte([]byte(".eE"), s.data[s.pos]) >= 0 {
		s.pos = start
		return 0, s.errf("want an integer id")
	}
	if neg {
		v = -v
	}
	return v, nil
}

// keep appends `keyRaw: value` to an object being built, checking that the
// value is valid JSON.
func (s *jscan) keep(dst *bytes.Buffer, keyRaw []byte) error {
	start := s.pos
	if err := s.skip(); err != nil {
		return err
	}
	val := s.data[start:s.pos]
	if !json.Valid(val) {
		s.pos = start
		return s.errf("invalid value")
	}
	if dst.Len() > 1 {
		dst.WriteByte(',')
	}
	dst.Write(keyRaw)
	dst.WriteByte(':')
	dst.Write(val)
	return nil
}

// skip moves past one value (checked afterwards by json.Valid).
func (s *jscan) skip() error {
	switch c := s.peek(); {
	case c == '{':
		return s.object(func(_, _ []byte) error { return s.skip() })
	case c == '[':
		return s.array(func(int) error { return s.skip() })
	case c == '"':
		_, err := s.str()
		return err
	case c == 0:
		return s.errf("unexpected end")
	default:
		start := s.pos
		for s.pos < len(s.data) {
			switch s.data[s.pos] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if s.pos == start {
					return s.errf("want a value")
				}
				return nil
			}
			s.pos++
		}
		return nil
	}
}
