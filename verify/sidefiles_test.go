package verify

import (
	"os"
	"path/filepath"
	"testing"
)

// The deep check compares the container's side files (config.json,
// tokenizer and template files) with the source's whole.
func TestDeepComparesSideFiles(t *testing.T) {
	f := newFixture(t, "qwen3_5_moe-q4g32")
	src, err := OpenDirSource(f.src)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, f.dir, Options{Deep: &DeepOptions{Source: src}})
	src.Close()
	wantStatus(t, r, StatusOK)
	if r.Deep.SideFiles != 4 { // config, generation config, tokenizer, tokenizer config
		t.Fatalf("%d side files compared:\n%s", r.Deep.SideFiles, dump(r))
	}

	p := filepath.Join(f.src, "tokenizer.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 1
	os.WriteFile(p, data, 0o644)
	os.Remove(filepath.Join(f.src, "generation_config.json"))
	src, err = OpenDirSource(f.src)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r = run(t, f.dir, Options{Deep: &DeepOptions{Source: src}})
	if got := find(r, func(p Problem) bool { return p.Kind == KindMismatch && p.File == "tokenizer.json" }); len(got) != 1 {
		t.Fatalf("tokenizer.json difference not reported:\n%s", dump(r))
	}
	if got := find(r, func(p Problem) bool { return p.Scope == ScopeSource && p.File == "generation_config.json" }); len(got) != 1 {
		t.Fatalf("a side file the source lacks not reported:\n%s", dump(r))
	}
}
