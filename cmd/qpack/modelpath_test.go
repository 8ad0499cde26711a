package main

import (
	"strings"
	"testing"

	"github.com/qpack-go/qpack/hfhub"
)

func TestLooksLikeRepoID(t *testing.T) {
	for s, want := range map[string]bool{
		"org/name": true, "name": true, "Qwen/Qwen3-0.6B": true,
		"./name": false, "/abs/x": false, "~/x": false, "a/b/c": false, "org/": false, `a\b`: false, ".hidden": false,
	} {
		if got := looksLikeRepoID(s); got != want {
			t.Errorf("looksLikeRepoID(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzIndexShards: any index file gives safe relative shard paths, sorted
// and unique, or an error naming the file.
func FuzzIndexShards(f *testing.F) {
	f.Add([]byte(`{"metadata": {"total_size": 10}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {"a": "../escape.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		shards, err := parseIndexShards("idx.json", data)
		if err != nil {
			if !strings.Contains(err.Error(), "idx.json") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		if len(shards) == 0 {
			t.Fatal("no shards and no error")
		}
		for i, s := range shards {
			if err := hfhub.ValidateRepoPath(s); err != nil {
				t.Fatalf("unsafe shard path %q: %v", s, err)
			}
			if i > 0 && shards[i-1] >= s {
				t.Fatalf("not sorted and unique: %q", shards)
			}
		}
	})
}
