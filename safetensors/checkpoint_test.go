package safetensors

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeShard writes a file with U8 tensors of the given sizes.
func writeShard(t *testing.T, path string, names []string, sizes []int64) {
	t.Helper()
	specs := make([]Spec, len(names))
	for i, n := range names {
		specs[i] = Spec{n, U8, []int64{sizes[i]}}
	}
	err := WriteFile(path, specs, map[string]string{"format": "pt"}, func(i int, s Spec) (io.Reader, error) {
		return bytes.NewReader(bytes.Repeat([]byte{byte(i + 1)}, int(sizes[i]))), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func writeText(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

const twoShardIndex = `{"metadata":{"total_size":15},"weight_map":{
 "a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
 "c":"model-00002-of-00002.safetensors"}}`

func shardedDir(t *testing.T) string {
	dir := t.TempDir()
	writeShard(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), []string{"c"}, []int64{7})
	writeShard(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), []string{"b", "a"}, []int64{5, 3})
	writeText(t, filepath.Join(dir, IndexFile), twoShardIndex)
	return dir
}

func TestOpenCheckpointSharded(t *testing.T) {
	dir := shardedDir(t)
	// A stray file that the index does not mention is not read.
	writeText(t, filepath.Join(dir, "junk.safetensors"), "not a safetensors file")
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Index == nil || c.Index.TotalSize != 15 || c.DataSize() != 15 {
		t.Fatalf("index %+v DataSize %d", c.Index, c.DataSize())
	}
	if len(c.Shards) != 2 || c.Shards[0].Name != "model-00001-of-00002.safetensors" || c.Shards[1].Name != "model-00002-of-00002.safetensors" {
		t.Fatalf("shards %v %v", c.Shards[0].Name, c.Shards[1].Name)
	}
	if c.Shards[1].Path != filepath.Join(dir, "model-00002-of-00002.safetensors") {
		t.Errorf("Path = %s", c.Shards[1].Path)
	}
	if got := strings.Join(c.Names(), ","); got != "a,b,c" {
		t.Errorf("Names = %s", got)
	}
	s, tn, ok := c.Lookup("a")
	if !ok || s.Name != "model-00001-of-00002.safetensors" || tn.Size != 3 {
		t.Fatalf("Lookup(a) = %v %v %v", s, tn, ok)
	}
	// Written in spec order b, a: a follows b's 5 bytes.
	if tn.Offset != s.Header.DataStart+5 {
		t.Errorf("a at %d, DataStart %d", tn.Offset, s.Header.DataStart)
	}
	raw, _ := os.ReadFile(s.Path)
	if !bytes.Equal(raw[tn.Offset:tn.Offset+tn.Size], []byte{2, 2, 2}) {
		t.Errorf("a's bytes %v", raw[tn.Offset:tn.Offset+tn.Size])
	}
	if _, _, ok := c.Lookup("zzz"); ok {
		t.Error("Lookup(zzz) found")
	}
}

func TestOpenCheckpointShardedBad(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"map entry missing from shard", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexFile), strings.Replace(twoShardIndex, `"c":`, `"d":"model-00002-of-00002.safetensors","c":`, 1))
		}, IndexFile + `: tensor "d": listed in the weight_map but missing from shard model-00002-of-00002.safetensors`},
		{"shard tensor not in map", func(t *testing.T, dir string) {
			writeShard(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), []string{"c", "extra"}, []int64{7, 1})
		}, `model-00002-of-00002.safetensors: tensor "extra": not in the weight_map`},
		{"tensor in wrong shard", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexFile), strings.Replace(twoShardIndex, `"a":"model-00001`, `"a":"model-00002`, 1))
		}, `model-00001-of-00002.safetensors: tensor "a": ` + IndexFile + ` says it is in shard model-00002-of-00002.safetensors`},
		{"tensor in two shards", func(t *testing.T, dir string) {
			writeShard(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), []string{"c", "a"}, []int64{7, 3})
		}, `model-00002-of-00002.safetensors: tensor "a": also in shard model-00001-of-00002.safetensors`},
		{"missing shard", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		}, `"model-00002-of-00002.safetensors", which the checkpoint does not have`},
		{"corrupt shard", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), "\x02\x00\x00\x00\x00\x00\x00\x00[]")
		}, "model-00002-of-00002.safetensors: header is an array"},
		{"bad index", func(t *testing.T, dir string) {
			writeText(t, filepath.Join(dir, IndexFile), `{"weight_map":{"a":"../x"}}`)
		}, IndexFile + `: tensor "a": weight_map: shard file name "../x" is not a plain relative file name`},
		{"index is a directory", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, IndexFile))
			os.Mkdir(filepath.Join(dir, IndexFile), 0o755)
		}, "not a regular file (a directory)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := shardedDir(t)
			c.setup(t, dir)
			_, err := OpenCheckpoint(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant %s", err, c.want)
			}
		})
	}
}

func TestOpenCheckpointSingle(t *testing.T) {
	dir := t.TempDir()
	writeShard(t, filepath.Join(dir, "consolidated.safetensors"), []string{"x"}, []int64{2})
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Index != nil || len(c.Shards) != 1 || c.Shards[0].Name != "consolidated.safetensors" {
		t.Fatalf("%+v", c)
	}
	// Two files and no index: ambiguous.
	writeShard(t, filepath.Join(dir, "other.safetensors"), []string{"y"}, []int64{2})
	if _, err := OpenCheckpoint(dir); err == nil || !strings.Contains(err.Error(), "several .safetensors files") {
		t.Fatalf("err = %v", err)
	}
	// model.safetensors wins over others.
	writeShard(t, filepath.Join(dir, SingleFile), []string{"m"}, []int64{1})
	c, err = OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Shards[0].Name != SingleFile || strings.Join(c.Names(), ",") != "m" {
		t.Fatalf("%v %v", c.Shards[0].Name, c.Names())
	}
	// Nothing at all.
	if _, err := OpenCheckpoint(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no .safetensors") && !strings.Contains(err.Error(), "no other .safetensors") {
		t.Fatalf("err = %v", err)
	}
	if _, err := OpenCheckpoint(filepath.Join(dir, "nonexistent")); err == nil {
		t.Fatal("nonexistent dir opened")
	}
}

func TestReadFileHeaderNotRegular(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadFileHeader(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("err = %v", err)
	}
}
