package tokenizer

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeFileErrors(t *testing.T) {
	good := string(tinySpec{extra: []string{"ab"}, merges: [][2]string{{"a", "b"}}}.json())
	cases := []struct{ name, data, want string }{
		{"trailing", good + "x", "after the top-level value"},
		{"two models", strings.Replace(good, `"model":{`, `"model":null,"model":{`, 1), `"model" given twice`},
		{"two vocabs", strings.Replace(good, `"vocab":{`, `"vocab":{},"vocab":{`, 1), `"vocab" given twice`},
		{"float id", strings.Replace(good, `"ab":256`, `"ab":256.0`, 1), "integer id"},
		{"exp id", strings.Replace(good, `"ab":256`, `"ab":2e2`, 1), "integer id"},
		{"leading zero", strings.Replace(good, `"ab":256`, `"ab":0256`, 1), "integer id"},
		{"string id", strings.Replace(good, `"ab":256`, `"ab":"256"`, 1), "integer id"},
		{"huge id", strings.Replace(good, `"ab":256`, `"ab":99999999999999999999`, 1), "out of range"},
		{"three parts", strings.Replace(good, `"merges":["a b"]`, `"merges":[["a","b","c"]]`, 1), "more than 2 parts"},
		{"part not string", strings.Replace(good, `"merges":["a b"]`, `"merges":[["a",1]]`, 1), "not a string"},
		{"trailing comma", strings.Replace(good, `"merges":["a b"]`, `"merges":["a b",]`, 1), "neither a string"},
		{"control char", strings.Replace(good, `"ab":256`, "\"a\nb\":256", 1), "control character"},
		{"bad escape", strings.Replace(good, `"ab":256`, `"a\qb":256`, 1), "bad string"},
		{"unterminated", `{"model":{"vocab":{"ab`, "unterminated"},
		{"bad other value", strings.Replace(good, `"normalizer":null`, `"normalizer":nul`, 1), "invalid value"},
		{"deep", `{"x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`, "nested too deeply"},
		{"empty", ``, "want an object"},
		{"null merge", strings.Replace(good, `"merges":["a b"]`, `"merges":[null]`, 1), "neither a string"},
	}
	for _, c := range cases {
		_, err := Parse("bad.json", []byte(c.data))
		if err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want the file name and %q", c.name, err, c.want)
		}
	}
}

// stdDecode is what encoding/json makes of a tokenizer.json.
func stdDecode(data []byte) (fileJSON, error) {
	var f fileJSON
	err := json.Unmarshal(data, &f)
	return f, err
}

// FuzzDecodeFile: whenever the scanner accepts a document, encoding/json
// accepts it too and reads the same fields (keys here match exactly, so
// inputs with keys that differ only in case are left out).
func FuzzDecodeFile(f *testing.F) {
	f.Add(tinySpec{extra: []string{"ab"}, merges: [][2]string{{"a", "b"}}}.json())
	f.Add(tinySpec{extra: []string{"ab", "abc"}, merges: [][2]string{{"a", "b"}, {"ab", "c"}}, pairs: true}.json())
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a\u0041\n":1,"\ud800":2,"é":3},"merges":[["a","b"]],"byte_fallback":true},"decoder":{"type":"Fuse"}}`))
	f.Add([]byte(`{"added_tokens":[{"id":1,"content":"<s>"}],"model":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeFile(data)
		if err != nil {
			return
		}
		lower := strings.ToLower(string(data))
		for _, k := range []string{"model", "vocab", "merges", "added_tokens", "normalizer", "pre_tokenizer", "decoder", "type"} {
			if strings.Count(lower, `"`+k+`"`) != strings.Count(string(data), `"`+k+`"`) {
				return
			}
		}
		want, err := stdDecode(data)
		if err != nil {
			t.Fatalf("scanner accepted what encoding/json refuses (%v): %q", err, data)
		}
		if want.Model != nil && got.Model != nil && want.Model.Vocab == nil && len(got.Model.Vocab) == 0 {
			got.Model.Vocab = nil
		}
		if !reflect.DeepEqual(compact(got), compact(want)) {
			t.Fatalf("scanner %+v\nencoding/json %+v\ninput %q", got, want, data)
		}
	})
}

// compact normalises the raw sub-documents, which keep their spacing.
func compact(f fileJSON) fileJSON {
	for _, r := range []*json.RawMessage{&f.Normalizer, &f.PreTokenizer, &f.Decoder} {
		if *r != nil {
			var b strings.Builder
			var v any
			if json.Unmarshal(*r, &v) == nil {
				out, _ := json.Marshal(v)
				b.Write(out)
				*r = json.RawMessage(b.String())
			}
		}
	}
	return f
}
