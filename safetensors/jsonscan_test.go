package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// scanValue parses a whole document with the scanner.
func scanValue(data []byte) (any, error) {
	s := newScanner(data, "j")
	s.ws()
	v, err := s.value("doc", 0)
	if err != nil {
		return nil, err
	}
	if err := s.end("doc"); err != nil {
		return nil, err
	}
	return v, nil
}

// stdValue parses with encoding/json, the oracle.
func stdValue(data []byte) (any, error) {
	if !json.Valid(data) {
		return nil, errors.New("invalid per json.Valid")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// compareWithStd checks the scanner against encoding/json on one input.
// The scanner is stricter in three documented ways, which are skipped:
// duplicate keys, lone surrogates in \u escapes, and nesting deeper than
// maxJSONDepth. Inputs that are not UTF-8 are never given to the scanner.
func compareWithStd(t *testing.T, data []byte) {
	if !utf8.Valid(data) {
		return
	}
	got, err := scanValue(data)
	want, stdErr := stdValue(data)
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "duplicate key") || strings.Contains(msg, "surrogate") || strings.Contains(msg, "nested deeper") {
			return
		}
		if !strings.HasPrefix(msg, "j: ") {
			t.Fatalf("%q: error without file name: %v", data, err)
		}
		if stdErr == nil {
			t.Fatalf("%q: scanner refused (%v), encoding/json accepted %#v", data, err, want)
		}
		return
	}
	if stdErr != nil {
		t.Fatalf("%q: scanner accepted %#v, encoding/json refused: %v", data, got, stdErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: scanner %#v, encoding/json %#v", data, got, want)
	}
}

var jsonCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `-1.5e+10`, `1E3`, `true`, `false`, `null`,
	` {"a" : [1, 2 ,{"b":null}] , "c":"d"} `,
	`"\"\\\/\b\f\n\r\t"`, `"\u00e9\u20AC"`, `"\ud83d\ude00"`, `"é😀 raw"`,
	`{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a"}`, `{"a":}`, `{a:1}`, `{'a':1}`,
	`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x10`, `NaN`, `Infinity`, `-Infinity`,
	`"\x"`, `"\u12"`, `"\u12g4"`, "\"a\tb\"", "\"a\x00\"", `"abc`, `"\`,
	`tru`, `nul`, `nulll`, `[1 2]`, `{"a":1 "b":2}`, `[[[[]]]]`, `{} x`, `1 2`, ``, ` `,
	`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `{"a":1,"a":2}`,
}

func TestScannerMatchesEncodingJSON(t *testing.T) {
	for _, c := range jsonCases {
		compareWithStd(t, []byte(c))
	}
}

func TestScannerStrings(t *testing.T) {
	cases := map[string]string{
		`"plain"`:              "plain",
		`"\"\\\/\b\f\n\r\t"`:   "\"\\/\b\f\n\r\t",
		`"\u00e9\u20AC"`:       "é€",
		`"\ud83d\ude00"`:       "😀",
		`"pre\u0041post"`:      "preApost",
		`"mixed é and \u00e9"`: "mixed é and é",
	}
	for in, want := range cases {
		v, err := scanValue([]byte(in))
		if err != nil || v != want {
			t.Errorf("%s: got %q, %v; want %q", in, v, err, want)
		}
	}
	for _, bad := range []string{`"\ud800"`, `"\udc00x"`, `"\ud800\u0041"`, `"\q"`, "\"\n\""} {
		if _, err := scanValue([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzJSONScanner checks the scanner against encoding/json on arbitrary
// input.
func FuzzJSONScanner(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		compareWithStd(t, data)
	})
}
