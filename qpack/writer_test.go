package qpack

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/safetensors"
)

var denseSpecs = []safetensors.Spec{
	{Name: "model.norm.weight", DType: "BF16", Shape: []int64{4}},
	{Name: "model.embed_tokens.weight", DType: "F32", Shape: []int64{2, 3}},
}

func denseData(name string) []byte {
	switch name {
	case "model.norm.weight":
		return []byte{1, 2, 3, 4, 5, 6, 7, 8}
	case "model.embed_tokens.weight":
		b := make([]byte, 24)
		for i := range b {
			b[i] = byte(100 + i)
		}
		return b
	}
	return nil
}

func intp(v int) *int { return &v }

var info = ManifestInfo{
	ModelName: "qwen3_next", SourceCheckpoint: "tiny-4bit",
	QuantBits: intp(4), QuantGroupSize: intp(32), ToolVersion: "qpack test",
	Source: Source{Repo: "org/tiny", Revision: "main", Commit: strings.Repeat("ab", 20), Dir: "tiny-4bit",
		Shards: []Shard{{Name: "model.safetensors", Size: 1234, SHA256: strings.Repeat("0f", 32)}}},
}

// writeTiny writes the tiny container with a Writer; experts of layers in
// skip are left for a later writer.
func writeTiny(t *testing.T, w *Writer, layers []int) {
	t.Helper()
	for _, l := range layers {
		for e := 0; e < 3; e++ {
			blob := expertBytes(l, e)
			if e == 1 { // exercise section-wise writes as repack does them
				for _, s := range w.Layout().Sections {
					if err := w.WriteSection(l, e, s.Name, blob[s.Offset:s.Offset+s.Size], 0); err != nil {
						t.Fatal(err)
					}
				}
				continue
			}
			if err := w.WriteExpert(l, e, blob); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func writeDense(t *testing.T, w *Writer) {
	t.Helper()
	if _, err := w.CreateDense(denseSpecs, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range denseSpecs {
		d := denseData(s.Name)
		// two halves, out of order
		if err := w.WriteDenseTensor(s.Name, d[len(d)/2:], int64(len(d)/2)); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteDenseTensor(s.Name, d[:len(d)/2], 0); err != nil {
			t.Fatal(err)
		}
	}
}

var configJSON = []byte(`{"model_type":"qwen3_next"}`)

func TestWriterRoundTrip(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out.qpack")
	w, err := Create(dst, tinyLayout(t), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Dir() != dst+".partial" {
		t.Errorf("Dir() = %s", w.Dir())
	}
	writeTiny(t, w, []int{1, 0})
	writeDense(t, w)
	if err := w.AddFile("config.json", bytes.NewReader(configJSON)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("tokenizer/vocab.txt", strings.NewReader("a\nb\n")); err != nil {
		t.Fatal(err)
	}
	var last, total int64
	w.opts.HashProgress = func(d, tot int64) { last, total = d, tot }
	m, err := w.Finish(info)
	if err != nil {
		t.Fatal(err)
	}
	if last != total || total == 0 {
		t.Errorf("hash progress ended at %d of %d", last, total)
	}
	if _, err := os.Stat(dst + ".partial"); !os.IsNotExist(err) {
		t.Errorf("partial directory still there: %v", err)
	}

	c, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !reflect.DeepEqual(c.Manifest, m) {
		t.Errorf("manifest read back differs:\n%+v\n%+v", c.Manifest, m)
	}
	if !reflect.DeepEqual(c.Layout, tinyLayout(t)) {
		t.Errorf("layout read back differs: %+v", c.Layout)
	}
	wantFiles := []string{"config.json", DenseName, LayerFile(0), LayerFile(1), LayoutName, "tokenizer/vocab.txt"}
	if got := m.SortedFiles(); !reflect.DeepEqual(got, wantFiles) {
		t.Errorf("files = %v, want %v", got, wantFiles)
	}

	// Experts and their digests, computed here from the bytes written.
	buf := make([]byte, 16384)
	for l := 0; l < 2; l++ {
		var whole []byte
		for e := 0; e < 3; e++ {
			want := make([]byte, 16384)
			copy(want, expertBytes(l, e))
			if err := c.ReadExpert(l, e, buf); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, want) {
				t.Errorf("layer %d expert %d differs", l, e)
			}
			if got := m.Ext.ExpertDigests[LayerFile(l)][e]; got != b3(want) {
				t.Errorf("layer %d expert %d digest %s, want %s", l, e, got, b3(want))
			}
			whole = append(whole, want...)
		}
		if got := m.Ext.FileDigests[LayerFile(l)]; got != b3(whole) {
			t.Errorf("layer %d file digest %s, want %s", l, got, b3(whole))
		}
	}
	if got := m.Ext.FileDigests["config.json"]; got != b3(configJSON) {
		t.Errorf("config.json digest %s, want %s", got, b3(configJSON))
	}
	for _, p := range wantFiles {
		data, err := os.ReadFile(c.Path(p))
		if err != nil {
			t.Fatal(err)
		}
		if m.Ext.FileDigests[p] != b3(data) || m.Files[p] != int64(len(data)) {
			t.Errorf("%s: recorded size/digest do not match the file", p)
		}
	}

	// Dense tensors sorted by name, with the bytes written.
	if len(c.Dense.Tensors) != 2 || c.Dense.Tensors[0].Name != "model.embed_tokens.weight" {
		t.Fatalf("dense tensors = %+v", c.Dense.Tensors)
	}
	f, err := c.OpenFile(DenseName)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tn := range c.Dense.Tensors {
		got := make([]byte, tn.Size)
		if _, err := f.ReadAt(got, tn.Offset); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, denseData(tn.Name)) {
			t.Errorf("dense %s = %v", tn.Name, got)
		}
	}
	if c.Dense.Metadata["format"] != "mlx" {
		t.Errorf("dense metadata = %v", c.Dense.Metadata)
	}

	// manifest.json style: sorted keys, 2-space indent, trailing newline.
	raw, _ := os.ReadFile(c.Path(ManifestName))
	if !bytes.HasSuffix(raw, []byte("}\n")) || !bytes.HasPrefix(raw, []byte("{\n  \"files\": {\n")) {
		t.Errorf("manifest.json style:\n%s", raw[:min(len(raw), 200)])
	}
	order := []string{`"files"`, `"magic"`, `"modelName"`, `"qpack"`, `"quantBits"`, `"quantGroupSize"`, `"sourceCheckpoint"`, `"version"`}
	pos := -1
	for _, k := range order {
		i := bytes.Index(raw, []byte("\n  "+k+":"))
		if i <= pos {
			t.Errorf("key %s not in sorted position", k)
		}
		pos = i
	}
	lraw, _ := os.ReadFile(c.Path(LayoutName))
	if !bytes.HasPrefix(lraw, []byte("{\n  \"expertCount\": 3,\n  \"expertStride\": 16384,\n")) {
		t.Errorf("layout.json style:\n%s", lraw[:min(len(lraw), 200)])
	}
}

// A writer killed after part of the work and finished by another one
// (another process in real use) gives the same bytes as one writer.
func TestWriterResume(t *testing.T) {
	base := t.TempDir()
	one := filepath.Join(base, "one.qpack")
	w, err := Create(one, tinyLayout(t), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeTiny(t, w, []int{0, 1})
	writeDense(t, w)
	w.AddFile("config.json", bytes.NewReader(configJSON))
	m1, err := w.Finish(info)
	if err != nil {
		t.Fatal(err)
	}

	two := filepath.Join(base, "two.qpack")
	w, err = Create(two, tinyLayout(t), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeTiny(t, w, []int{0})
	if _, err := w.CreateDense(denseSpecs, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	w.AddFile("config.json", bytes.NewReader(configJSON))
	// A working file (a journal, say) and a stale temp file.
	writeFile(t, filepath.Join(w.Dir(), ".journal"), []byte("x"))
	writeFile(t, filepath.Join(w.Dir(), ".manifest.json.tmp-123"), []byte("x"))
	w.Close()

	if _, err := Create(two, tinyLayout(t), CreateOptions{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("Create over a partial directory without Resume: %v", err)
	}
	w, err = Create(two, tinyLayout(t), CreateOptions{Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	writeTiny(t, w, []int{1})
	writeDense(t, w)
	m2, err := w.Finish(info)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m1, m2) {
		t.Errorf("resumed container differs:\n%+v\n%+v", m1.Ext.FileDigests, m2.Ext.FileDigests)
	}
	if _, err := os.Stat(filepath.Join(two, ".journal")); !os.IsNotExist(err) {
		t.Errorf("working file left in the container: %v", err)
	}
	if _, err := Open(two); err != nil {
		t.Fatal(err)
	}
}

func TestWriterDestinationExists(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out.qpack")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dst, "old"), []byte("old"))
	if _, err := Create(dst, tinyLayout(t), CreateOptions{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("Create over an existing destination: %v", err)
	}
	// Overwrite replaces only a container: a directory that is not one is
	// refused before anything is written, and left as it was.
	if _, err := Create(dst, tinyLayout(t), CreateOptions{Overwrite: true}); !errors.Is(err, ErrNotReplaceable) {
		t.Fatalf("Create with Overwrite over a directory that is no container: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "old")); err != nil || string(got) != "old" {
		t.Fatalf("the refused destination changed: %q, %v", got, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dst)); len(entries) != 1 {
		t.Errorf("the refused Create left entries next to the destination: %v", entries)
	}
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"first", "second"} {
		w, err := Create(dst, tinyLayout(t), CreateOptions{Overwrite: true})
		if err != nil {
			t.Fatal(err)
		}
		writeTiny(t, w, []int{0, 1})
		writeDense(t, w)
		in := info
		in.ModelName = name
		if _, err := w.Finish(in); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	if c.Manifest.ModelName != "second" {
		t.Errorf("the container was not replaced: model name %q", c.Manifest.ModelName)
	}
	c.Close()
	entries, _ := os.ReadDir(filepath.Dir(dst))
	if len(entries) != 1 {
		t.Errorf("left behind next to the container: %v", entries)
	}

	// Destination appears while writing, no overwrite: Finish refuses and
	// keeps the partial directory.
	dst2 := filepath.Join(t.TempDir(), "b.qpack")
	w, err := Create(dst2, tinyLayout(t), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeTiny(t, w, []int{0, 1})
	writeDense(t, w)
	os.Mkdir(dst2, 0o755)
	if _, err := w.Finish(info); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("Finish over an existing destination: %v", err)
	}
	if _, err := os.Stat(dst2 + ".partial"); err != nil {
		t.Errorf("partial directory lost: %v", err)
	}
}

func TestWriterBounds(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "x.qpack"), tinyLayout(t), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Discard()
	size := tinyLayout(t).LayerSize()
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"past end", func() error { _, err := w.WriteAt(0, make([]byte, 2), size-1); return err }(), "outside the file"},
		{"negative", func() error { _, err := w.WriteAt(0, []byte{1}, -1); return err }(), "outside the file"},
		{"bad layer", func() error { _, err := w.WriteAt(2, []byte{1}, 0); return err }(), "layer 2 out of range"},
		{"section overflow", w.WriteSection(0, 0, "gate_proj.scales", make([]byte, 129), 0), "outside the section"},
		{"unknown section", w.WriteSection(0, 0, "gate_proj.bias", []byte{1}, 0), "no section"},
		{"bad expert", w.WriteSection(0, 3, "gate_proj.scales", []byte{1}, 0), "expert 3 out of range"},
		{"blob size", w.WriteExpert(0, 0, make([]byte, 10)), "want the payload"},
		{"dense before create", func() error { _, err := w.WriteDense([]byte{1}, 100); return err }(), "CreateDense"},
		{"reserved aux", w.AddFile("model.safetensors", strings.NewReader("")), "managed by the writer"},
		{"unsafe aux", w.AddFile("../x", strings.NewReader("")), `".."`},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, c.err, c.want)
		}
	}
	if _, err := w.CreateDense(denseSpecs, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteDense([]byte{1}, 0); err == nil || !strings.Contains(err.Error(), "data area") {
		t.Errorf("write over the dense header: %v", err)
	}
	if err := w.WriteDenseTensor("model.norm.weight", make([]byte, 9), 0); err == nil || !strings.Contains(err.Error(), "outside the tensor") {
		t.Errorf("write past a dense tensor: %v", err)
	}
}

func TestFinishRefusesBadTemp(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "x.qpack"), tinyLayout(t), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(info); err == nil || !strings.Contains(err.Error(), DenseName) {
		t.Errorf("Finish without dense tensors: %v", err)
	}
	w, err = Create(filepath.Join(t.TempDir(), "y.qpack"), tinyLayout(t), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeDense(t, w)
	if err := os.Symlink("/etc/hostname", filepath.Join(w.Dir(), "config.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(info); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("Finish with a symlink inside: %v", err)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	for _, s := range []string{"one", "two, longer"} {
		if err := WriteFileAtomic(p, []byte(s), 0o640); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		if string(got) != s {
			t.Errorf("got %q, want %q", got, s)
		}
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", st.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "no", "such", "dir"), nil, 0o644); err == nil {
		t.Error("no error writing into a missing directory")
	}
}
