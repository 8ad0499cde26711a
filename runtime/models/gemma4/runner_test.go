package gemma4_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/runtime/internal/reference"
	"github.com/qpack-go/qpack/runtime/runner"
)

// Generation through the runner, from a .qpack with an expert cache far
// smaller than the experts (so they stream from disk), is transformers'
// greedy continuation.
func TestRunnerGeneratesTheReferenceContinuation(t *testing.T) {
	for _, v := range []string{"gemma4-q4g32", "gemma4-nokeqv-f32"} {
		t.Run(v, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), v+".qpack")
			if _, err := repack.Run(context.Background(), repack.Options{FromDir: filepath.Join(tinyDir, v), Output: dst, Reserve: -1}); err != nil {
				t.Fatal(err)
			}
			ref := must(reference.Open(filepath.Join(refDir, "gemma4_"+v+".safetensors")))(t)
			ids := must(ref.Ints("input_ids"))(t)
			cont := must(ref.Ints("continuation"))(t)
			r := must(runner.Open(dst, runner.Options{ExpertCache: 64 << 10}))(t)
			defer r.Close()
			res := must(r.NewSession().Generate(context.Background(), ids, runner.GenOptions{MaxNew: len(cont)}))(t)
			want := cont
			if i := slices.IndexFunc(cont, func(id int) bool { return slices.Contains(r.EOS, id) }); i >= 0 {
				want = cont[:i]
			}
			if !slices.Equal(res.Tokens, want) {
				t.Fatalf("generated %v, transformers %v", res.Tokens, want)
			}
			if res.DecodeCache.Misses == 0 {
				t.Fatalf("no expert was read during decode (cache stats %+v): the cache did not stream", res.DecodeCache)
			}
		})
	}
}
