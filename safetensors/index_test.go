package safetensors

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseIndex(t *testing.T) {
	js := `{
  "metadata": {"total_size": 16060522496, "format": {"nested": [1, 2.5, "x", null, true]}},
  "weight_map": {
    "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
    "model.layers.0.mlp.gate.weight": "model-00002-of-00002.safetensors",
    "lm_head.weight": "model-00002-of-00002.safetensors"
  },
  "extra": {"ignored": true}
}`
	ix, err := ParseIndex([]byte(js), "idx.json")
	if err != nil {
		t.Fatal(err)
	}
	if ix.TotalSize != 16060522496 {
		t.Errorf("TotalSize = %d", ix.TotalSize)
	}
	if len(ix.WeightMap) != 3 || ix.WeightMap["lm_head.weight"] != "model-00002-of-00002.safetensors" {
		t.Errorf("WeightMap = %v", ix.WeightMap)
	}
	sh := ix.Shards()
	if strings.Join(sh, ",") != "model-00001-of-00002.safetensors,model-00002-of-00002.safetensors" {
		t.Errorf("Shards = %v", sh)
	}
	f, _ := ix.Metadata["format"].(map[string]any)
	nested, _ := f["nested"].([]any)
	if len(nested) != 5 || nested[1] != json.Number("2.5") || nested[2] != "x" || nested[3] != nil || nested[4] != true {
		t.Errorf("metadata = %#v", ix.Metadata)
	}
}

func TestParseIndexTotalSize(t *testing.T) {
	cases := []struct {
		md   string
		want int64
	}{
		{``, -1},
		{`"metadata": null,`, -1},
		{`"metadata": {},`, -1},
		{`"metadata": {"total_size": 0},`, 0},
		{`"metadata": {"total_size": 1234.0},`, 1234},
		{`"metadata": {"total_size": 1.5e3},`, 1500},
	}
	for _, c := range cases {
		ix, err := ParseIndex([]byte(`{`+c.md+`"weight_map":{"a":"s.safetensors"}}`), "i")
		if err != nil {
			t.Errorf("%s: %v", c.md, err)
			continue
		}
		if ix.TotalSize != c.want {
			t.Errorf("%s: TotalSize %d, want %d", c.md, ix.TotalSize, c.want)
		}
	}
}

func TestParseIndexBad(t *testing.T) {
	wm := `"weight_map":{"a":"s.safetensors"}`
	cases := []struct {
		js, tensor, want string
	}{
		{`[]`, "", "index is an array"},
		{`{}`, "", "no weight_map"},
		{`{"weight_map":{}}`, "", "weight_map is empty"},
		{`{"weight_map":[]}`, "", "weight_map is an array"},
		{`{"weight_map":{"a":1}}`, "", `weight_map: value of "a" is a number`},
		{`{"weight_map":{"a":"s","a":"t"}}`, "", `weight_map: duplicate key "a"`},
		{`{` + wm + `,` + wm + `}`, "", `duplicate top-level key "weight_map"`},
		{`{"metadata":{"k":1,"k":2},` + wm + `}`, "", `metadata: duplicate key "k"`},
		{`{"metadata":[],` + wm + `}`, "", "metadata is an array"},
		{`{"metadata":{"total_size":-5},` + wm + `}`, "", "total_size: -5 is not a non-negative integer"},
		{`{"metadata":{"total_size":1.5},` + wm + `}`, "", "total_size: 1.5 is not"},
		{`{"metadata":{"total_size":"12"},` + wm + `}`, "", "total_size: is a string"},
		{`{"metadata":{"total_size":1e400},` + wm + `}`, "", "total_size"},
		{`{"weight_map":{"a":"../evil.safetensors"}}`, "a", "not a plain relative file name"},
		{`{"weight_map":{"a":"/etc/passwd"}}`, "a", "not a plain relative file name"},
		{`{"weight_map":{"a":"sub/x.safetensors"}}`, "a", "not a plain relative file name"},
		{`{"weight_map":{"a":"sub\\x.safetensors"}}`, "a", "not a plain relative file name"},
		{`{"weight_map":{"a":"C:x.safetensors"}}`, "a", "not a plain relative file name"},
		{`{"weight_map":{"a":".."}}`, "a", "is not a file"},
		{`{"weight_map":{"a":"."}}`, "a", "is not a file"},
		{`{"weight_map":{"a":""}}`, "a", "empty shard file name"},
		{`{"weight_map":{"a":"x\u0000y"}}`, "a", "control character"},
		{`{"weight_map":{"":"s"}}`, "", "empty tensor name"},
		{`{"weight_map":{"__metadata__":"s"}}`, "__metadata__", "reserved"},
		{`{"weight_map":{"a":"s"}} x`, "", "after the JSON object"},
		{`{"weight_map":{"a":"s"}`, "", "unexpected end of JSON"},
		{`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,` + wm + `}`, "", "nested deeper"},
		{"{\"weight_map\":{\"a\xff\":\"s\"}}", "", "not valid UTF-8"},
	}
	for _, c := range cases {
		_, err := ParseIndex([]byte(c.js), "model.safetensors.index.json")
		if err == nil {
			t.Errorf("%.60s: no error", c.js)
			continue
		}
		if !strings.HasPrefix(err.Error(), "model.safetensors.index.json: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60s: err = %v, want %q", c.js, err, c.want)
		}
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Tensor != c.tensor {
			t.Errorf("%.60s: FormatError %#v, want tensor %q", c.js, fe, c.tensor)
		}
	}
}

func TestParseIndexTooBig(t *testing.T) {
	big := make([]byte, MaxIndexLen+1)
	_, err := ParseIndex(big, "i")
	if err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("err = %v", err)
	}
}
