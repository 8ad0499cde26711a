package hfhub_test

import (
	"context"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/faultprop"
)

// TestDownloadPropertyOneCorruptResponse: for many seeds, one response
// (model info, a tree page, a small file, a shard's header range or a data
// range) is corrupted by a flip, a swap or a truncation; the download ends
// in a byte-identical cache or a clear error, never a wrong byte kept.
// bench/faultsoak runs the same check for thousands of seeds.
func TestDownloadPropertyOneCorruptResponse(t *testing.T) {
	n := uint64(90)
	if testing.Short() {
		n = 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	counts := map[string]int{}
	for seed := uint64(1); seed <= n; seed++ {
		out, err := faultprop.Check(ctx, seed, t.TempDir())
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		k := out.Target
		if out.Applied == "" {
			k += " (not applied)"
		} else if out.Err != nil {
			k += " → error"
		} else {
			k += " → identical"
		}
		counts[k]++
	}
	t.Logf("outcomes: %v", counts)
	applied := 0
	for k, v := range counts {
		if len(k) < 14 || k[len(k)-13:] != "(not applied)" {
			applied += v
		}
	}
	if applied < int(n)*3/4 {
		t.Fatalf("only %d of %d corruptions applied: the harness does not reach its targets", applied, n)
	}
}
