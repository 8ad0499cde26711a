package repack

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// memShard is an in-memory Shard.
type memShard struct {
	name string
	data []byte
	blob string
}

func (m *memShard) ReadAt(p []byte, off int64) (int, error) { return copy(p, m.data[off:]), nil }
func (m *memShard) Name() string                            { return m.name }
func (m *memShard) Size() int64                             { return int64(len(m.data)) }
func (m *memShard) SHA256() string                          { return "" }
func (m *memShard) GitBlobSHA1() string                     { return m.blob }

// journalFixture is a small plan: 2 shards, 4 KiB ranges.
func journalFixture(t testing.TB) (*layoutMap, []Shard) {
	d := moeDims{prefix: "model.", layers: 2, E: 4, hidden: 64, inter: 32, bits: 4, group: 32}
	cfg := &ModelConfig{Layers: 2, Experts: 4, Linear: make([]bool, 2), QuantBits: 4, QuantGroup: 32}
	ss := d.shards(t, 2, nil)
	p, err := BuildPlan(cfg, ss)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newLayoutMap(p, MinRangeSize)
	if err != nil {
		t.Fatal(err)
	}
	shards := []Shard{&memShard{name: ss[0].Name, data: make([]byte, ss[0].Size)}, &memShard{name: ss[1].Name, data: make([]byte, ss[1].Size), blob: strings.Repeat("1", 40)}}
	return m, shards
}

func TestJournalCheck(t *testing.T) {
	m, shards := journalFixture(t)
	if len(m.ranges) < 4 {
		t.Fatalf("only %d ranges", len(m.ranges))
	}
	// A consistent journal mid-way through the second shard.
	j := newJournal("fp", MinRangeSize, "id", len(m.ranges))
	h := newShardHash(shards[0])
	var k int
	for k = 0; m.ranges[k].shard == 0; k++ {
		j.Digests = append(j.Digests, strings.Repeat("a", 64))
		st, err := marshalState(h.sha)
		if err != nil {
			t.Fatal(err)
		}
		j.Chain = append(j.Chain, st)
	}
	sum := sha256.Sum256(nil)
	j.ShardSHA256 = []string{hex.EncodeToString(sum[:])}
	j.Digests = append(j.Digests, strings.Repeat("b", 64))
	j.Frontier = k + 1
	h = newShardHash(shards[1])
	h.Write([]byte("some bytes"))
	if h.blob == nil {
		t.Fatal("a shard with a blob id gets no blob hash")
	}
	if err := j.setHashState(h); err != nil {
		t.Fatal(err)
	}
	j.Chain = append(j.Chain, j.HashState)
	gapless := -1 // a range before the frontier whose bytes all land in the container
	for i := 0; i < j.Frontier; i++ {
		if m.ranges[i].gapless() {
			gapless = i
		}
	}
	if gapless < 0 {
		t.Fatal("the fixture has no gapless range before the frontier")
	}
	j.Digests[gapless] = "" // checked through the chain
	if err := j.check(m, shards); err != nil {
		t.Fatalf("consistent journal refused: %v", err)
	}
	h2, err := j.hashAtFrontier(shards[1])
	if err != nil {
		t.Fatal(err)
	}
	h.Write([]byte("more"))
	h2.Write([]byte("more"))
	if string(h.sha.Sum(nil)) != string(h2.sha.Sum(nil)) || string(h.blob.Sum(nil)) != string(h2.blob.Sum(nil)) {
		t.Error("restored midstate continues differently")
	}
	// Records of ranges in flight after the frontier.
	size := func(k int) int64 { return m.ranges[k].end - m.ranges[k].off }
	if j.Frontier+1 >= len(m.ranges) {
		t.Fatal("the fixture has too few ranges after the frontier")
	}
	okPartial := []partialRange{{Range: j.Frontier, Done: 1, Digest: strings.Repeat("a", 64)},
		{Range: j.Frontier + 1, Done: size(j.Frontier + 1), Digest: strings.Repeat("b", 64)}}
	withPartial := j.snapshot()
	withPartial.Partial = okPartial
	if err := withPartial.check(m, shards); err != nil {
		t.Fatalf("journal with partial ranges refused: %v", err)
	}
	setPartial := func(p ...partialRange) func(j *journal) { return func(j *journal) { j.Partial = p } }
	bad := []struct {
		name string
		mod  func(j *journal)
		want string
	}{
		{"partial before the frontier", setPartial(partialRange{Range: j.Frontier - 1, Done: 1, Digest: okPartial[0].Digest}), "not after the frontier"},
		{"partial past the end", setPartial(partialRange{Range: len(m.ranges), Done: 1, Digest: okPartial[0].Digest}), "not after the frontier"},
		{"partial out of order", setPartial(okPartial[1], okPartial[0]), "ascending"},
		{"partial twice", setPartial(okPartial[0], okPartial[0]), "ascending"},
		{"partial with nothing done", setPartial(partialRange{Range: j.Frontier, Done: 0, Digest: okPartial[0].Digest}), "bytes done"},
		{"partial past its range", setPartial(partialRange{Range: j.Frontier, Done: size(j.Frontier) + 1, Digest: okPartial[0].Digest}), "bytes done"},
		{"partial bad digest", setPartial(partialRange{Range: j.Frontier, Done: 1, Digest: "ABC"}), "digest of partial range"},
		{"digest count", func(j *journal) { j.Digests = j.Digests[1:] }, "digests"},
		{"chain count", func(j *journal) { j.Chain = j.Chain[1:] }, "chain states"},
		{"no digest for a range with gap bytes", func(j *journal) { j.Digests[0] = "" }, "has no digest"},
		{"garbage chain state", func(j *journal) { j.Chain[1] = "c2hhAw==" }, "chain state of range 1"},
		{"hash state off the chain", func(j *journal) { j.Chain[j.Frontier-1] = j.Chain[0] }, "differs from the chain"},
		{"frontier past end", func(j *journal) { j.Frontier = len(m.ranges) + 1 }, "frontier"},
		{"bad digest", func(j *journal) { j.Digests[0] = "zz" }, "digest of range 0"},
		{"missing shard hash", func(j *journal) { j.ShardSHA256 = nil }, "shard hashes"},
		{"no hash state mid-shard", func(j *journal) { j.HashState = "" }, "hash state"},
		{"no blob state", func(j *journal) { j.BlobState = "" }, "blob hash state"},
		{"garbage state", func(j *journal) { j.HashState = "!!!" }, "hash state"},
		{"range count", func(j *journal) { j.Ranges++ }, "ranges"},
	}
	for _, b := range bad {
		c := j.snapshot()
		b.mod(c)
		if err := c.check(m, shards); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err = %v, want one containing %q", b.name, err, b.want)
		}
	}
}

func FuzzJournal(f *testing.F) {
	m, shards := journalFixture(f)
	f.Add([]byte(`{"version":2,"plan":"x","rangeSize":4096,"source":"s","ranges":3,"frontier":0,"digests":[],"chain":[],"shardSha256":[]}`))
	f.Add([]byte(`{"version":2,"frontier":2,"digests":["` + strings.Repeat("a", 64) + `",""],"chain":["c2hhAw==","c2hhAw=="],"hashState":"c2hhAw=="}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := parseJournal(data, "journal")
		if err != nil {
			return
		}
		j.Ranges = len(m.ranges) // so the deeper checks run
		if err := j.check(m, shards); err != nil {
			return
		}
		if j.Frontier < len(m.ranges) {
			if _, err := j.hashAtFrontier(shards[m.ranges[j.Frontier].shard]); err != nil {
				t.Fatalf("check accepted a journal whose hash state does not load: %v", err)
			}
		}
	})
}
