package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/internal/tinymodel"
)

// A checkpoint split into 46 shards with an index (as large conversions
// are: Qwen3.5-397B-A17B at 4 bits has 46) repacks into the same container
// bytes as the committed 3-shard copy of the same weights, and verifies
// deeply against its 46 shards.
func TestRepack46ShardIndex(t *testing.T) {
	var spec tinymodel.Spec
	for _, v := range tinymodel.Variants() {
		if v.Name == "qwen3_5_moe-q4g32" {
			spec = v.Spec
		}
	}
	if spec.Shards != 3 {
		t.Fatalf("qwen3_5_moe-q4g32 spec %+v", spec)
	}
	spec.Shards = 46
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src46")
	if err := tinymodel.Generate(src, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "model-00046-of-00046.safetensors")); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(tmp, "a.qpack"), filepath.Join(tmp, "b.qpack")
	for _, r := range []struct{ src, out string }{{src, a}, {filepath.Join("..", "..", "testdata", "tiny", "qwen3_5_moe-q4g32"), b}} {
		if _, stderr, code := runMain(t, "repack", "--from-dir", r.src, "--output", r.out, "--reserve", "-1"); code != 0 {
			t.Fatalf("repack %s: exit %d: %s", r.src, code, stderr)
		}
	}
	files := []string{"model.safetensors", "config.json", "packed_experts/layout.json"}
	for l := range 8 {
		files = append(files, filepath.Join("packed_experts", fmt.Sprintf("layer_%02d.bin", l)))
	}
	for _, f := range files {
		x, err := os.ReadFile(filepath.Join(a, f))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between the 46-shard and the 3-shard repack", f)
		}
	}
	if _, stderr, code := runMain(t, "verify-install", "--deep", "--source", src, a); code != 0 {
		t.Fatalf("verify-install --deep: exit %d: %s", code, stderr)
	}
}
