package repack

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/qpack-go/qpack/internal/tinymodel"
)

// Helpers that check a container against its source with code that shares
// nothing with the repack: safetensors headers are parsed here with
// encoding/json, and layout.json is read as a generic map.

type rawTensor struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

type rawFile struct {
	data    []byte
	start   int64
	tensors map[string]rawTensor
}

func readRaw(t *testing.T, path string) *rawFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 8 {
		t.Fatalf("%s: too short", path)
	}
	n := int64(binary.LittleEndian.Uint64(data[:8]))
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &hdr); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	f := &rawFile{data: data, start: 8 + n, tensors: map[string]rawTensor{}}
	for k, v := range hdr {
		if k == "__metadata__" {
			continue
		}
		var rt rawTensor
		if err := json.Unmarshal(v, &rt); err != nil {
			t.Fatalf("%s: %s: %v", path, k, err)
		}
		f.tensors[k] = rt
	}
	return f
}

func (f *rawFile) bytes(name string) []byte {
	rt := f.tensors[name]
	return f.data[f.start+rt.Offsets[0] : f.start+rt.Offsets[1]]
}

// sourceTensors maps every tensor of the checkpoint in dir to its shard.
func sourceTensors(t *testing.T, dir string) map[string]*rawFile {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*rawFile{}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".safetensors") {
			continue
		}
		f := readRaw(t, filepath.Join(dir, e.Name()))
		for k := range f.tensors {
			out[k] = f
		}
	}
	return out
}

var expertRe = regexp.MustCompile(`layers\.(\d+)\.mlp\.switch_mlp\.(gate_proj|up_proj|down_proj)\.(weight|scales|biases)$`)

// checkAgainstSource checks every expert section and every dense tensor of
// the container in out against the checkpoint in src, and that padding is
// zero. It returns how many expert slices it compared.
func checkAgainstSource(t *testing.T, src, out string) int {
	t.Helper()
	tensors := sourceTensors(t, src)
	lb, err := os.ReadFile(filepath.Join(out, "packed_experts", "layout.json"))
	if err != nil {
		t.Fatal(err)
	}
	var layout map[string]any
	if err := json.Unmarshal(lb, &layout); err != nil {
		t.Fatal(err)
	}
	E := int64(layout["expertCount"].(float64))
	stride := int64(layout["expertStride"].(float64))
	secOff := map[string]int64{}
	secSize := map[string]int64{}
	var payload int64
	for _, s := range layout["sections"].([]any) {
		m := s.(map[string]any)
		name := m["name"].(string)
		secOff[name] = int64(m["offset"].(float64))
		secSize[name] = int64(m["size"].(float64))
		payload = max(payload, secOff[name]+secSize[name])
	}
	layers := map[int][]byte{}
	readLayer := func(l int) []byte {
		if b, ok := layers[l]; ok {
			return b
		}
		b, err := os.ReadFile(filepath.Join(out, "packed_experts", "layer_"+pad2(l)+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != E*stride {
			t.Fatalf("layer %d: %d bytes, want %d", l, len(b), E*stride)
		}
		layers[l] = b
		return b
	}
	dense := readRaw(t, filepath.Join(out, "model.safetensors"))
	compared := 0
	names := make([]string, 0, len(tensors))
	for k := range tensors {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		sf := tensors[name]
		if strings.HasPrefix(name, "mtp.") || strings.HasPrefix(name, "vision_tower.") {
			if _, ok := dense.tensors[name]; ok {
				t.Errorf("skipped tensor %s is in model.safetensors", name)
			}
			continue
		}
		m := expertRe.FindStringSubmatch(name)
		if m == nil {
			dt, ok := dense.tensors[name]
			if !ok {
				t.Errorf("dense tensor %s missing from model.safetensors", name)
				continue
			}
			st := sf.tensors[name]
			if dt.DType != st.DType || !equalShape(dt.Shape, st.Shape) {
				t.Errorf("dense %s: %s %v, source %s %v", name, dt.DType, dt.Shape, st.DType, st.Shape)
			}
			if !bytes.Equal(dense.bytes(name), sf.bytes(name)) {
				t.Errorf("dense %s: bytes differ from the source", name)
			}
			continue
		}
		if _, ok := dense.tensors[name]; ok {
			t.Errorf("expert tensor %s is in model.safetensors", name)
		}
		l, _ := strconv.Atoi(m[1])
		sec := m[2] + "." + m[3]
		all := sf.bytes(name)
		per := int64(len(all)) / E
		if per != secSize[sec] {
			t.Fatalf("%s: %d bytes per expert, layout section %s has %d", name, per, sec, secSize[sec])
		}
		lf := readLayer(l)
		for e := int64(0); e < E; e++ {
			want := all[e*per : (e+1)*per]
			got := lf[e*stride+secOff[sec] : e*stride+secOff[sec]+per]
			if !bytes.Equal(got, want) {
				t.Errorf("layer %d expert %d %s: bytes differ from the source slice", l, e, sec)
			}
			compared++
		}
	}
	for l, b := range layers {
		for e := int64(0); e < E; e++ {
			for _, c := range b[e*stride+payload : (e+1)*stride] {
				if c != 0 {
					t.Fatalf("layer %d expert %d: padding is not zero", l, e)
				}
			}
		}
	}
	return compared
}

func pad2(n int) string {
	s := strconv.Itoa(n)
	if len(s) < 2 {
		s = "0" + s
	}
	return s
}

// tmpRoot holds what the tests generate once per test binary.
var tmpRoot string

func TestMain(m *testing.M) {
	if childMain() {
		return
	}
	var err error
	tmpRoot, err = os.MkdirTemp("", "qpack-repack-test-")
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// genCache memoizes generated checkpoints per spec within a test binary.
var genCache sync.Map

// tiny generates a checkpoint for spec (once per test binary) and returns
// its directory.
func tiny(t testing.TB, name string, spec tinymodel.Spec) string {
	t.Helper()
	type entry struct {
		once sync.Once
		dir  string
		err  error
	}
	v, _ := genCache.LoadOrStore(name, &entry{})
	e := v.(*entry)
	e.once.Do(func() {
		e.dir = filepath.Join(tmpRoot, "tiny", name)
		e.err = tinymodel.Generate(e.dir, spec)
	})
	if e.err != nil {
		t.Fatal(e.err)
	}
	return e.dir
}

// copyDir copies the regular files of src into a new directory dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// treeFiles returns every regular file under dir (relative slash paths)
// with its content.
func treeFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runDir(t *testing.T, src, out string, mod func(*Options)) *Result {
	t.Helper()
	o := Options{FromDir: src, Output: out, Reserve: -1, RangeSize: 16 << 10, TileSize: 4 << 10, ToolVersion: "test"}
	if mod != nil {
		mod(&o)
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatalf("repack %s: %v", src, err)
	}
	return res
}
