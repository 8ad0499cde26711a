package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

var updateJSONDocs = flag.Bool("update-json-docs", false, "rewrite the examples in docs/JSON.md from real output")

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"bytesPerSecond":          "bytes_per_second",
		"SHA256":                  "sha256",
		"sha256":                  "sha256",
		"shardSha256":             "shard_sha256",
		"HTTPStatus":              "http_status",
		"layerFileDigestsChecked": "layer_file_digests_checked",
		"already_snake":           "already_snake",
		"Path":                    "path",
		"ExpertGroupSize":         "expert_group_size",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

type jsonInner struct {
	GroupSize int `json:"groupSize"`
}

type jsonOuter struct {
	*jsonInner
	Name     string            `json:"name"`
	NoTag    int64             // converted from the Go name
	Files    map[string]int    `json:"files"` // data keys stay as they are
	Skip     string            `json:"-"`
	Empty    string            `json:"empty,omitempty"`
	Sub      []jsonInner       `json:"subItems"`
	Raw      json.RawMessage   `json:"raw"`
	Nested   map[string]any    `json:"nested"`
	hidden   int               //nolint:unused // unexported: never encoded
	Override map[string]string `json:"override,omitempty"`
}

func TestWriteJSON(t *testing.T) {
	v := jsonOuter{jsonInner: &jsonInner{GroupSize: 64}, Name: "n", NoTag: 7, Files: map[string]int{"B.safetensors": 1, "A": 2},
		Skip: "x", Sub: []jsonInner{{1}}, Raw: json.RawMessage(`{"keepMe":1}`), Nested: map[string]any{"k": jsonInner{2}}, hidden: 1}
	var b bytes.Buffer
	if err := writeJSON(&b, v); err != nil {
		t.Fatal(err)
	}
	want := `{"schema_version":1,"group_size":64,"name":"n","no_tag":7,"files":{"A":2,"B.safetensors":1},` +
		`"sub_items":[{"group_size":1}],"raw":{"keepMe":1},"nested":{"k":{"group_size":2}}}`
	var got bytes.Buffer
	if err := json.Compact(&got, b.Bytes()); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if got.String() != want {
		t.Errorf("got  %s\nwant %s", got.String(), want)
	}
	if !strings.HasSuffix(b.String(), "}\n") || !strings.Contains(b.String(), "\n  \"name\": \"n\",") {
		t.Errorf("not indented: %q", b.String())
	}
	// A nil embedded pointer contributes nothing; an empty struct still
	// gets its schema_version.
	b.Reset()
	if err := writeJSON(&b, jsonOuter{}); err != nil || !strings.Contains(b.String(), `"name": ""`) || strings.Contains(b.String(), "group_size") {
		t.Errorf("nil embedded: %v %s", err, b.String())
	}
	b.Reset()
	if err := writeJSON(&b, struct{}{}); err != nil || strings.TrimSpace(b.String()) != "{\n  \"schema_version\": 1\n}" {
		t.Errorf("empty: %v %q", err, b.String())
	}
	if err := writeJSON(&b, []int{1}); err == nil {
		t.Error("a JSON array accepted as a document")
	}
}

// dataMapKeys are the keys whose objects are maps of data (file names,
// dtypes, config keys), not keys of ours.
var dataMapKeys = map[string]bool{"dtypes": true, "architecture": true, "extra": true}

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// jsonKeyPaths lists every key path of a JSON document ("a.b[].c"),
// checking on the way that keys are snake_case (outside data maps).
func jsonKeyPaths(t *testing.T, what string, v any, path string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if !snakeKey.MatchString(k) {
				t.Errorf("%s: key %q at %q is not snake_case", what, k, path)
			}
			p := path + "." + k
			out[p] = true
			if dataMapKeys[k] {
				continue
			}
			jsonKeyPaths(t, what, e, p, out)
		}
	case []any:
		for _, e := range x {
			jsonKeyPaths(t, what, e, path+"[]", out)
		}
	}
}

// TestJSONEveryCommand runs every command's --json on the bundled tiny
// model (and download against the fake Hub): each prints one object whose
// first key is schema_version and whose keys are snake_case, and
// docs/JSON.md shows each command's keys (go test -run TestJSONEveryCommand
// -update-json-docs rewrites its examples from this real output).
func TestJSONEveryCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every command")
	}
	src, err := filepath.Abs(filepath.Join("..", "..", "testdata", "tiny", "qwen3_next-q4g64"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	container := filepath.Join(work, "tiny.qpack")
	hub, err := hubtest.NewServer(hubtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hub.MustAddRepo("org/tiny", []hubtest.File{
		{Path: "config.json", Data: []byte(`{"model_type":"qwen3_next"}`)},
		{Path: "model.safetensors", Data: bytes.Repeat([]byte{1}, 4096), LFS: true},
	}, hubtest.RepoOptions{})
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_OFFLINE", "")

	runs := []struct{ name, example string }{
		{"download", "download org/tiny --cache-dir " + filepath.Join(work, "cache") + " --json"},
		{"repack", "repack --from-dir " + src + " --output " + container + " --reserve -1 --json"},
		{"inspect", "inspect " + container + " --json"},
		{"inspect (checkpoint)", "inspect " + src + " --json"},
		{"verify-install", "verify-install " + container + " --no-receipt --json"},
		{"generate", "generate " + container + " --prompt hello --max-new 2 --temperature 0 --json"},
		{"chat", "chat " + container + " hi again --max-new 2 --temperature 0 --json"},
		{"logits", "logits " + container + " --tokens 1,2,3 --json"},
		{"quickstart", "quickstart --workdir " + filepath.Join(work, "qs") + " --json"},
	}
	var doc strings.Builder
	keys := map[string]map[string]bool{}
	for _, r := range runs {
		stdout, stderr, code := runMain(t, strings.Fields(r.example)...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", r.example, code, stderr)
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("%s: not an object: %q", r.name, stdout)
		}
		if tok, err := dec.Token(); err != nil || tok != "schema_version" {
			t.Errorf("%s: first key %v, want schema_version", r.name, tok)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(stdout), &v); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if v["schema_version"] != float64(jsonSchemaVersion) {
			t.Errorf("%s: schema_version %v", r.name, v["schema_version"])
		}
		got := map[string]bool{}
		jsonKeyPaths(t, r.name, v, "", got)
		keys[r.name] = got
		example := strings.ReplaceAll(stdout, work, "/tmp/work")
		example = strings.ReplaceAll(example, src, "testdata/tiny/qwen3_next-q4g64")
		fmt.Fprintf(&doc, "### %s\n\n```\nqpack %s\n```\n\n```json\n%s```\n\n", r.name,
			strings.ReplaceAll(strings.ReplaceAll(r.example, work, "/tmp/work"), src, "testdata/tiny/qwen3_next-q4g64"), truncateExample(example))
	}
	docPath := filepath.Join("..", "..", "docs", "JSON.md")
	md, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- examples: generated by go test ./cmd/qpack -run TestJSONEveryCommand -update-json-docs -->\n"
	head, _, ok := strings.Cut(string(md), marker)
	if !ok {
		t.Fatalf("%s lacks the examples marker", docPath)
	}
	if *updateJSONDocs {
		if err := os.WriteFile(docPath, []byte(head+marker+"\n"+doc.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	// Every command run here has its example, and it shows every key the
	// command printed.
	for _, r := range runs {
		_, sec, ok := strings.Cut(string(md), "### "+r.name+"\n")
		_, block, ok2 := strings.Cut(sec, "```json\n")
		block, _, ok3 := strings.Cut(block, "```")
		if !ok || !ok2 || !ok3 {
			t.Errorf("%s has no example for %s", docPath, r.name)
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(block), &v); err != nil {
			t.Errorf("%s: example for %s: %v", docPath, r.name, err)
			continue
		}
		shown := map[string]bool{}
		jsonKeyPaths(t, docPath+" "+r.name, v, "", shown)
		for k := range keys[r.name] {
			if !shown[k] {
				t.Errorf("%s: the example for %s lacks key %s (rerun with -update-json-docs)", docPath, r.name, k)
			}
		}
	}
}

// truncateExample keeps a long example readable: arrays of more than
// three elements keep the first three.
func truncateExample(s string) string {
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return s
	}
	var cut func(any) any
	cut = func(v any) any {
		switch x := v.(type) {
		case []any:
			if len(x) > 3 {
				x = append(x[:3:3], "…")
			}
			for i := range x {
				x[i] = cut(x[i])
			}
			return x
		case map[string]any:
			for k := range x {
				x[k] = cut(x[k])
			}
		}
		return v
	}
	v = cut(v)
	// Keep the key order of the real output for the top level.
	var b bytes.Buffer
	if err := writeOrdered(&b, s, v); err != nil {
		return s
	}
	return b.String()
}

// writeOrdered re-encodes v indented, ordering object keys as they appear
// in the original text src (encoding/json would sort them).
func writeOrdered(b *bytes.Buffer, src string, v any) error {
	order := map[string]int{}
	d := json.NewDecoder(strings.NewReader(src))
	n := 0
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		if s, ok := tok.(string); ok {
			if _, seen := order[s]; !seen {
				order[s] = n
				n++
			}
		}
	}
	var enc func(v any, indent string)
	enc = func(v any, indent string) {
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return order[keys[i]] < order[keys[j]] })
			if len(keys) == 0 {
				b.WriteString("{}")
				return
			}
			b.WriteString("{\n")
			for i, k := range keys {
				kb, _ := json.Marshal(k)
				b.WriteString(indent + "  " + string(kb) + ": ")
				enc(x[k], indent+"  ")
				if i < len(keys)-1 {
					b.WriteByte(',')
				}
				b.WriteByte('\n')
			}
			b.WriteString(indent + "}")
		case []any:
			if len(x) == 0 {
				b.WriteString("[]")
				return
			}
			b.WriteString("[\n")
			for i, e := range x {
				b.WriteString(indent + "  ")
				enc(e, indent+"  ")
				if i < len(x)-1 {
					b.WriteByte(',')
				}
				b.WriteByte('\n')
			}
			b.WriteString(indent + "]")
		default:
			vb, _ := json.Marshal(x)
			b.Write(vb)
		}
	}
	enc(v, "")
	b.WriteByte('\n')
	return nil
}
