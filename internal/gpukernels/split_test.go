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

func TestAttnGQASplits(t *testing.T) {
	for _, c := range []struct{ T, kvh, keys, busy, want int }{
		{1, 2, 1, 128, 1},     // the first token
		{1, 2, 32, 128, 1},    // one run's worth
		{1, 2, 33, 128, 2},    // runs of 17
		{1, 2, 100, 128, 4},   // runs of 25
		{1, 2, 1025, 128, 64}, // 128 groups
		{1, 2, 1024, 128, 32}, // runs of 32
		{1, 2, 1 << 20, 128, 64},
		{1, 2, 1 << 20, 256, 128}, // capped
		{1, 4, 1 << 20, 128, 32},  // 128 groups
		{3, 2, 4096, 128, 32},     // 192 groups
		{64, 2, 4096, 128, 1},     // enough groups already
	} {
		got := AttnGQASplits(c.T, c.kvh, c.keys, c.busy)
		if got != c.want {
			t.Errorf("AttnGQASplits(%d, %d, %d, %d) = %d, want %d", c.T, c.kvh, c.keys, c.busy, got, c.want)
		}
		if got&(got-1) != 0 || got > AttnGQASplitMax {
			t.Errorf("AttnGQASplits(%d, %d, %d, %d) = %d: not a power of two up to %d", c.T, c.kvh, c.keys, c.busy, got, AttnGQASplitMax)
		}
	}
}

// The host's limits are the kernel's.
func TestAttnGQAGeometry(t *testing.T) {
	src := Bodies()
	for _, d := range []string{fmt.Sprintf("#define QK_GQA_G %d\n", AttnGQAMaxHeads), fmt.Sprintf("#define QK_GQA_D %d\n", AttnGQAMaxDim)} {
		if !strings.Contains(src, d) {
			t.Errorf("32_attention_gqa.qk lacks %q", d)
		}
	}
	for _, c := range []struct {
		heads, kvh, hd, vd int
		want               bool
	}{{16, 2, 256, 256, true}, {32, 4, 128, 128, true}, {16, 1, 256, 256, false}, {8, 8, 64, 64, true}, {16, 2, 512, 512, false}, {16, 2, 256, 257, false}, {6, 4, 64, 64, false}} {
		if got := AttnGQA(1, c.heads, c.kvh, c.hd, c.vd); got != c.want {
			t.Errorf("AttnGQA(%+v) = %v", c, got)
		}
	}
}
