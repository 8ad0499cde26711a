package gpukernels

import (
	"fmt"
	"strings"
	"testing"
)

// The Go constants are the kernels' own.
func TestSelectConstants(t *testing.T) {
	src := Bodies()
	for name, v := range map[string]int{"QK_SEL_CHUNK": SelChunk, "QK_SEL_MERGE": SelMerge} {
		if !strings.Contains(src, fmt.Sprintf("#define %s %d\n", name, v)) {
			t.Errorf("the bodies do not define %s as %d", name, v)
		}
	}
	if SelectChunks(1) != 1 || SelectChunks(SelChunk) != 1 || SelectChunks(SelChunk+1) != 2 {
		t.Errorf("SelectChunks: %d %d %d", SelectChunks(1), SelectChunks(SelChunk), SelectChunks(SelChunk+1))
	}
	if !SelectFits(262144, 64) || SelectFits(262145, 64) || SelectFits(0, 1) || SelectFits(10, 0) {
		t.Error("SelectFits: the range nn.TopSelector promises (k 64 over 262,144 logits) or its edges")
	}
}
