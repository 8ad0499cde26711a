package gpukernels

import (
	"fmt"
	"strings"
	"testing"
)

func TestAttnSplits(t *testing.T) {
	for _, c := range []struct{ T, heads, keys, busy, want int }{
		{1, 16, 56, 128, 1},    // a short context: one group per head
		{1, 16, 127, 128, 1},   // below the threshold
		{1, 16, 128, 128, 2},   // runs of 64
		{1, 16, 512, 128, 8},   // runs of 64
		{1, 16, 600, 128, 16},  // a power of two: runs of 38
		{1, 16, 4096, 128, 32}, // capped
		{4, 16, 4096, 128, 8},  // 512 groups in flight
		{8, 16, 4096, 128, 1},  // enough groups already
		{1, 2, 701, 128, 16},
		{1, 1, 1 << 20, 1, 1}, // busy with one group
	} {
		if got := AttnSplits(c.T, c.heads, c.keys, c.busy); got != c.want {
			t.Errorf("AttnSplits(%d, %d, %d, %d) = %d, want %d", c.T, c.heads, c.keys, c.busy, got, c.want)
		}
		if n := AttnSplits(c.T, c.heads, c.keys, c.busy); n > 1 && (n&(n-1) != 0 || (c.keys+n-1)/n < AttnSplitRunKeys/2) {
			t.Errorf("AttnSplits(%d, %d, %d, %d) = %d: not a power of two, or runs too short", c.T, c.heads, c.keys, c.busy, n)
		}
	}
}

// The host's tile geometry is the kernel's.
func TestAttnTileGeometry(t *testing.T) {
	src := Bodies()
	for _, d := range []string{fmt.Sprintf("#define QK_AT_ROWS %du\n", AttnTileRows), fmt.Sprintf("#define QK_AT_MAXD %du\n", AttnTileMaxDim)} {
		if !strings.Contains(src, d) {
			t.Errorf("31_attention_tile.qk lacks %q", d)
		}
	}
	// 35B: 16 query heads over 2 KV heads, 4,096 tokens: 8 x 4,096 rows a KV head.
	if g := AttnTileGroups(4096, 16, 2); g != 2*8*4096/16 {
		t.Errorf("AttnTileGroups(4096, 16, 2) = %d", g)
	}
	if g := AttnTileGroups(5, 3, 1); g != 1 {
		t.Errorf("AttnTileGroups(5, 3, 1) = %d", g)
	}
	if AttnTiled(3, 64, 64) || !AttnTiled(4, 256, 256) || AttnTiled(64, 512, 64) {
		t.Error("AttnTiled's limits")
	}
}
