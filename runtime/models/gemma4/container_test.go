package gemma4_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/runtime"
)

// A .qpack repacked from each tiny Gemma 4 checkpoint gives bit-identical
// logits to the checkpoint itself.
func TestContainerMatchesCheckpoint(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			src := filepath.Join(tinyDir, v.name)
			dst := filepath.Join(t.TempDir(), v.name+".qpack")
			if _, err := repack.Run(context.Background(), repack.Options{FromDir: src, Output: dst, Reserve: -1}); err != nil {
				t.Fatal(err)
			}
			ck := must(runtime.LoadCheckpoint(src, nil))(t)
			defer ck.Close()
			qp := must(runtime.LoadContainer(dst, nil))(t)
			defer qp.Close()
			ids := []int{357, 117, 198, 44, 256, 310, 72, 355, 358, 383, 0, 261}
			a := must(ck.Forward(ck.NewState(), ids, &runtime.ForwardOptions{AllLogits: true}))(t)
			b := must(qp.Forward(qp.NewState(), ids, &runtime.ForwardOptions{AllLogits: true}))(t)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("logit %d: checkpoint %g, .qpack %g", i, a[i], b[i])
				}
			}
		})
	}
}
