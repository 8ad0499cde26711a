package repack

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/qpack-go/qpack/qpack"
)

// A completed range is checked on resume by the kind of record it has: a
// range whose bytes all land in the container through the sha256 chain, a
// range with gap bytes (here: a shard header) through its BLAKE3 digest.
// One written byte damaged in one range of each kind: exactly those two
// ranges are fetched again, and the container comes out identical.
func TestResumeChecksEachKindOfRange(t *testing.T) {
	src := variant(t, "qwen3_next-q4g64")
	tmp := t.TempDir()
	ref := filepath.Join(tmp, "ref.qpack")
	runDir(t, src, ref, nil)

	out := filepath.Join(tmp, "out.qpack")
	mod, ctx := stopAt(1 << 30)
	o := Options{FromDir: src, Output: out, Reserve: -1, RangeSize: 16 << 10, TileSize: 4 << 10, ToolVersion: "test"}
	mod(&o)
	o.hooks.beforeFinish = func() error { return errStopped }
	if _, err := Run(ctx, o); !errors.Is(err, errStopped) {
		t.Fatalf("stopped run: %v", err)
	}
	partial := out + ".partial"
	var j journal
	data, err := os.ReadFile(filepath.Join(partial, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}

	ds, err := OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	plan, err := PlanSource(context.Background(), ds)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newLayoutMap(plan, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	if j.Frontier != len(m.ranges) || len(j.Chain) != j.Frontier {
		t.Fatalf("journal: frontier %d, %d chain states, %d ranges", j.Frontier, len(j.Chain), len(m.ranges))
	}
	// The first written piece of a range: its file and offset.
	firstPiece := func(r srcRange) (string, int64) {
		var file string
		var off int64
		m.forEach(r, func(pc piece) error {
			if file != "" || pc.dst == dstGap {
				return nil
			}
			file, off = qpack.DenseName, pc.dstOff
			if pc.dst >= 0 {
				file = filepath.FromSlash(qpack.LayerFile(pc.dst))
			}
			return nil
		})
		return file, off
	}
	chained, digested := -1, -1
	for _, r := range m.ranges {
		switch {
		case r.gapless() && j.Digests[r.id] == "" && chained < 0 && r.id > len(m.ranges)/2:
			chained = r.id
		case !r.gapless() && r.copied > 0 && j.Digests[r.id] != "" && digested < 0:
			digested = r.id
		}
	}
	if chained < 0 || digested < 0 {
		t.Fatalf("no range of each kind: chained %d, digested %d", chained, digested)
	}
	for _, k := range []int{chained, digested} {
		file, off := firstPiece(m.ranges[k])
		flip(t, filepath.Join(partial, file), off)
	}

	var mu sync.Mutex
	var refetched []int
	res := runDir(t, src, out, func(o *Options) {
		o.hooks = &testHooks{afterRange: func(r srcRange, redo bool) {
			mu.Lock()
			refetched = append(refetched, r.id)
			mu.Unlock()
			if !redo {
				t.Errorf("range %d fetched, but not as a redo", r.id)
			}
		}}
	})
	slices.Sort(refetched)
	if want := []int{min(chained, digested), max(chained, digested)}; !slices.Equal(refetched, want) || res.RangesRedone != 2 {
		t.Errorf("ranges fetched again: %v (%d redone), want %v", refetched, res.RangesRedone, want)
	}
	sameContainer(t, ref, out, false)
}
