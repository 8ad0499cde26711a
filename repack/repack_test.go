package repack

import (
	"path/filepath"
	"testing"

	"github.com/qpack-go/qpack/internal/tinymodel"
	"github.com/qpack-go/qpack/qpack"
)

func TestRepackDirVariants(t *testing.T) {
	for _, v := range tinymodel.Variants() {
		t.Run(v.Name, func(t *testing.T) {
			src := tiny(t, v.Name, v.Spec)
			out := filepath.Join(t.TempDir(), "m.qpack")
			res := runDir(t, src, out, nil)
			c, err := qpack.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			n := checkAgainstSource(t, src, out)
			want := 8 * 8 * 3 * 3 // layers x experts x projections x parts
			if v.Spec.Bits == 0 {
				want = 8 * 8 * 3
			}
			if n != want {
				t.Errorf("compared %d expert slices, want %d", n, want)
			}
			t.Logf("%+v", res.Shards)
		})
	}
}
