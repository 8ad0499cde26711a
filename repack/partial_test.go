package repack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// cdnBytes sums the body bytes the fake Hub's CDN served, once no request
// is in progress (a handler logs its bytes after its last write).
func cdnBytes(t *testing.T, s *hubtest.Server) int64 {
	t.Helper()
	log, ok := s.SettledRequests()
	if !ok {
		t.Fatal("the fake Hub still has requests in progress after 5 s")
	}
	var n int64
	for _, r := range log {
		if r.Route == hubtest.RouteCDN {
			n += r.BodyBytes
		}
	}
	return n
}

// keptBytes is what a journal says is in place: complete ranges and the
// prefixes of ranges in flight; sizes are the plan's range sizes.
func keptBytes(t *testing.T, j *journal, sizes []int64) int64 {
	t.Helper()
	if j.Ranges != len(sizes) {
		t.Fatalf("journal has %d ranges, want %d", j.Ranges, len(sizes))
	}
	var n int64
	for k := 0; k < j.Frontier; k++ {
		n += sizes[k]
	}
	for _, p := range j.Partial {
		n += p.Done
	}
	return n
}

// rangeSizes lists the sizes of the ranges that tile src's shards (in name
// order) at rangeSize.
func rangeSizes(t *testing.T, src string, rangeSize int64) []int64 {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".safetensors" {
			continue
		}
		st, err := os.Stat(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off < st.Size(); off += rangeSize {
			out = append(out, min(rangeSize, st.Size()-off))
		}
	}
	return out
}

// interruptedHubRepack runs a Hub repack of the f32 tiny model with large
// ranges and small tiles, cancelled half way, and returns its options, the
// bytes the progress had reported in place and the journal left behind.
func interruptedHubRepack(t *testing.T) (hub *hubtest.Server, o Options, src string, seen int64, j *journal) {
	t.Helper()
	src = variant(t, "qwen3_next-f32")
	hub = newHub(t, hubtest.Config{})
	hub.MustAddRepo("org/qwen3_next-f32", repoFiles(t, src), hubtest.RepoOptions{})
	o = hubOpts(hub, "org/qwen3_next-f32", filepath.Join(t.TempDir(), "m.qpack"))
	o.RangeSize, o.TileSize, o.Connections = 1<<20, 16<<10, 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done atomic.Int64
	o.OnProgress = func(p Progress) {
		if p.Phase == "copy" {
			done.Store(p.Done)
			if p.Done >= p.Total/2 {
				cancel()
			}
		}
	}
	o.hooks = &testHooks{tileDelay: 200e3} // 0.2 ms a tile: the cancel lands mid-range
	if _, err := Run(ctx, o); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	j, err := readJournal(o.Output + ".partial")
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Partial) == 0 {
		t.Fatalf("no partial range recorded (frontier %d of %d)", j.Frontier, j.Ranges)
	}
	o.OnProgress, o.hooks = nil, nil
	hub.ResetLog()
	return hub, o, src, done.Load(), j
}

// TestInterruptKeepsPartialRanges cancels a Hub repack while its large
// ranges are in flight: the journal keeps every tile already in place (at
// most a tile per connection is lost), and the rerun fetches only the
// rest, giving the same container as a repack from the directory.
func TestInterruptKeepsPartialRanges(t *testing.T) {
	hub, o, src, seen, j := interruptedHubRepack(t)
	sizes := rangeSizes(t, src, o.RangeSize)
	kept := keptBytes(t, j, sizes)
	// The progress counts bytes as they are read; what is not yet recorded
	// is at most a tile per connection.
	if lost := seen - kept; lost > int64(o.Connections*o.TileSize) {
		t.Errorf("interrupt lost %d bytes of %d in place; bound %d (a tile per connection)", lost, seen, o.Connections*o.TileSize)
	}
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("rerun: %v", err)
	}
	// The rerun fetches what was not kept, plus the shard headers the plan
	// reads again.
	var total int64
	for _, n := range sizes {
		total += n
	}
	if got, bound := cdnBytes(t, hub), total-kept+headerBytes(t, src); got > bound {
		t.Errorf("rerun fetched %d bytes; %d were not kept, bound %d", got, total-kept, bound)
	}
	ref := filepath.Join(t.TempDir(), "ref.qpack")
	runDir(t, src, ref, nil)
	sameContainer(t, ref, o.Output, true)
}

// TestPartialRangeMismatchRefetches: a recorded prefix that no longer
// matches what is on disk is not trusted; its range is fetched whole and
// the container is still right.
func TestPartialRangeMismatchRefetches(t *testing.T) {
	hub, o, src, _, j := interruptedHubRepack(t)
	// Damage the first recorded prefix's record: its bytes on disk no
	// longer hash to it.
	p := j.Partial[0]
	j.Partial[0].Digest = strings.Repeat("0", 64)
	if err := j.write(o.Output + ".partial"); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatalf("rerun: %v", err)
	}
	sizes := rangeSizes(t, src, o.RangeSize)
	var total int64
	for _, n := range sizes {
		total += n
	}
	// The damaged range came again in full: at least its recorded prefix
	// more than the kept bytes allow.
	if got, min := cdnBytes(t, hub), total-keptBytes(t, j, sizes)+p.Done; got < min {
		t.Errorf("rerun fetched %d bytes, want at least %d (range %d in full)", got, min, p.Range)
	}
	ref := filepath.Join(t.TempDir(), "ref.qpack")
	runDir(t, src, ref, nil)
	sameContainer(t, ref, o.Output, true)
}

// headerBytes is the size of the safetensors headers (8 + n) of src's
// shards.
func headerBytes(t *testing.T, src string) int64 {
	t.Helper()
	var n int64
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".safetensors" {
			continue
		}
		f, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var b [8]byte
		if _, err := f.ReadAt(b[:], 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		n += 8 + int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16 | int64(b[3])<<24
	}
	return n
}
