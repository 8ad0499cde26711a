package qpack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// walkObject calls fn for each member of the JSON object in data, in input
// order, with the member's raw value. Keys match exactly (encoding/json's
// struct decoding would also accept "MAGIC" for "magic"), a repeated key is an
// error, and nothing may follow the object.
func walkObject(data []byte, fn func(key string, raw json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return jsonErr(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("expected a JSON object, found %s", describeToken(tok))
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return jsonErr(err)
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("expected an object key, found %s", describeToken(tok))
		}
		if seen[key] {
			return fmt.Errorf("key %q appears more than once", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("key %q: %w", key, jsonErr(err))
		}
		if err := fn(key, raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return jsonErr(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return errors.New("data after the JSON object")
		}
		return jsonErr(err)
	}
	return nil
}

// objectFields collects the members of a JSON object (see walkObject).
func objectFields(data []byte) (map[string]json.RawMessage, error) {
	m := make(map[string]json.RawMessage)
	err := walkObject(data, func(k string, raw json.RawMessage) error {
		m[k] = raw
		return nil
	})
	return m, err
}

func jsonErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errors.New("unexpected end of JSON")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
	}
	return err
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		return fmt.Sprintf("%q", string(t))
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// decodeString decodes a JSON string (null is refused).
func decodeString(raw json.RawMessage) (string, error) {
	var s string
	if isNull(raw) {
		return "", errors.New("must be a string, found null")
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", typeErr(raw, "a string")
	}
	return s, nil
}

// decodeInt decodes a JSON integer that fits an int64 (no fraction, no
// exponent, no null).
func decodeInt(raw json.RawMessage) (int64, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return 0, errors.New("must be an integer, found null")
	}
	if s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return 0, typeErr(raw, "an integer")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return 0, fmt.Errorf("integer %.40s does not fit in 64 bits", s)
		}
		return 0, fmt.Errorf("must be an integer, found %.40s", s)
	}
	return v, nil
}

func decodeBool(raw json.RawMessage) (bool, error) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, typeErr(raw, "a boolean")
}

// decodeArray splits a JSON array into its raw elements, refusing more than max.
func decodeArray(raw json.RawMessage, max int) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("must be an array, found %s", describeToken(tok))
	}
	var out []json.RawMessage
	for dec.More() {
		if len(out) >= max {
			return nil, fmt.Errorf("array has more than %d elements", max)
		}
		var el json.RawMessage
		if err := dec.Decode(&el); err != nil {
			return nil, jsonErr(err)
		}
		out = append(out, el)
	}
	return out, nil
}

func typeErr(raw json.RawMessage, want string) error {
	s := bytes.TrimSpace(raw)
	kind := "a value"
	if len(s) > 0 {
		switch s[0] {
		case '"':
			kind = "a string"
		case '{':
			kind = "an object"
		case '[':
			kind = "an array"
		case 't', 'f':
			kind = "a boolean"
		case 'n':
			kind = "null"
		default:
			kind = "the number " + truncate(string(s), 40)
		}
	}
	return fmt.Errorf("must be %s, found %s", want, kind)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// marshalSorted encodes v as JSON with every object's keys in sorted order,
// two-space indentation and a trailing newline (the style of Swift's
// JSONEncoder with .sortedKeys and .prettyPrinted, which Swiftlet uses).
// Struct fields are re-ordered by going through a generic value; numbers keep
// their exact text.
func marshalSorted(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(generic); err != nil { // maps encode with sorted keys
		return nil, err
	}
	return buf.Bytes(), nil
}
