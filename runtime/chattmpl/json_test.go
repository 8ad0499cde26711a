package chattmpl

import (
	"encoding/json"
	"math"
	"testing"
)

func TestPyFloat(t *testing.T) {
	// Python: repr(x) for each x.
	cases := map[float64]string{
		1:                    "1.0",
		2.5:                  "2.5",
		-0.5:                 "-0.5",
		0.1:                  "0.1",
		1e16:                 "1e+16",
		1e15:                 "1000000000000000.0",
		123456789.125:        "123456789.125",
		0.0001:               "0.0001",
		0.00001:              "1e-05",
		0.000123:             "0.000123",
		1.5e300:              "1.5e+300",
		-2.5e-7:              "-2.5e-07",
		math.Copysign(0, -1): "-0.0",
		0:                    "0.0",
		1.0 / 3:              "0.3333333333333333",
		12345678901234567890: "1.2345678901234567e+19",
		math.Inf(1):          "Infinity",
	}
	for f, want := range cases {
		if got := pyFloat(f); got != want {
			t.Errorf("pyFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

func render(t *testing.T, src string, tools ...string) string {
	t.Helper()
	tpl, err := Parse("t", src)
	if err != nil {
		t.Fatal(err)
	}
	var opts Options
	for _, s := range tools {
		opts.Tools = append(opts.Tools, json.RawMessage(s))
	}
	out, err := tpl.Render(nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestToJSON(t *testing.T) {
	// Expected: Python json.dumps(json.loads(input), ensure_ascii=False) with
	// the keyword arguments shown, worked out by hand.
	in := `{"z": 1, "a": [1.0, 2.50, -3, 1e2, true, null, "x"], "m": {"b": "é\u2028<>&'\"\\\n\t\u0001😀", "a": {}}, "e": []}`
	cases := []struct{ src, want string }{
		{`{{ tools[0]|tojson }}`,
			`{"z": 1, "a": [1.0, 2.5, -3, 100.0, true, null, "x"], "m": {"b": "é` + "\u2028" + `<>&'\"\\\n\t\u0001😀", "a": {}}, "e": []}`},
		{`{{ tools[0]|tojson(ensure_ascii=true) }}`,
			`{"z": 1, "a": [1.0, 2.5, -3, 100.0, true, null, "x"], "m": {"b": "\u00e9\u2028<>&'\"\\\n\t\u0001\ud83d\ude00", "a": {}}, "e": []}`},
		{`{{ tools[0].m|tojson(sort_keys=true) }}`,
			`{"a": {}, "b": "é` + "\u2028" + `<>&'\"\\\n\t\u0001😀"}`},
		{`{{ tools[0].a[:2]|tojson(indent=2) }}`, "[\n  1.0,\n  2.5\n]"},
		{`{{ {"k": [1, 2]}|tojson(indent=1) }}`, "{\n \"k\": [\n  1,\n  2\n ]\n}"},
		{`{{ tools[0].a[:2]|tojson(separators=[",", ":"]) }}`, "[1.0,2.5]"},
		{`{{ {"b": 1, "a": "x"}|tojson }}`, `{"b": 1, "a": "x"}`},
		{`{{ "s"|tojson }}{{ 3|tojson }}{{ none|tojson }}`, `"s"3null`},
	}
	for _, c := range cases {
		if got := render(t, c.src, in); got != c.want {
			t.Errorf("%s:\n got  %s\n want %s", c.src, got, c.want)
		}
	}
	tpl, _ := Parse("t", `{{ tools[0]|tojson(bogus=1) }}`)
	if _, err := tpl.Render(nil, Options{Tools: []json.RawMessage{[]byte(`{}`)}}); err == nil {
		t.Error("unknown tojson argument accepted")
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	deep := ""
	for range 100 {
		deep += "["
	}
	for _, s := range []string{`{`, `{"a":}`, `[1,]`, `1 2`, deep} {
		if _, err := decodeJSON([]byte(s), keyOrder{}); err == nil {
			t.Errorf("%q decoded", s)
		}
	}
	tpl, _ := Parse("t", "x")
	if _, err := tpl.Render(nil, Options{Tools: []json.RawMessage{[]byte(`{"a":`)}}); err == nil {
		t.Error("bad tool JSON accepted")
	}
	if _, err := tpl.Render([]Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: []byte(`[`)}}}}, Options{}); err == nil {
		t.Error("bad tool-call arguments accepted")
	}
}
