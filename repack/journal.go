package repack

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/qpack-go/qpack/qpack"
)

// JournalName is the resume journal inside the partial directory. Its name
// starts with a dot, so qpack's Finish removes it with the other working
// files just before the container is renamed into place.
const JournalName = ".repack-journal.json"

// gapDir holds, per range in flight, the source bytes that go nowhere in the
// container (header, skipped tensors), until the range is hashed.
const gapDir = ".repack-gaps"

// journalVersion 2 added Chain (version 1 had a BLAKE3 digest for every
// range); a version 1 journal is refused with a pointer to
// --discard-partial.
const journalVersion = 2

// maxJournalSize bounds the journal we read back (1,400 ranges for an 80B
// model take ~100 KB).
const maxJournalSize = 64 << 20

// journal records what a repack has completed, so a killed run resumes.
//
// Ranges complete strictly in order: ranges [0, Frontier) are written,
// fsynced, re-read from disk, digested and hashed into their shard's
// sha256. The sha256 of the shard in progress is kept as the hash's
// marshalled midstate at the frontier, so a resumed run continues it
// without fetching any completed range again.
//
// Every completed range can be checked on disk by itself: a range whose
// bytes all land in the container by the sha256 chain (hashing them from
// the state after the previous range must give the state after it), a
// range that also reads bytes the container does not keep (header, skipped
// tensors) by a BLAKE3 digest of the bytes it wrote. The chain costs
// nothing while copying: it is the shard hash the repack computes anyway.
type journal struct {
	Version   int    `json:"version"`
	Plan      string `json:"plan"`      // Plan.Fingerprint
	RangeSize int64  `json:"rangeSize"` //
	Source    string `json:"source"`    // Source.Identity
	Ranges    int    `json:"ranges"`    // how many ranges the plan has
	Frontier  int    `json:"frontier"`  // ranges [0, Frontier) are complete
	// Digests holds, per completed range that reads gap bytes (bytes the
	// container does not keep), the BLAKE3 of the bytes it wrote, as
	// re-read from the destination files; "" for the other ranges.
	Digests []string `json:"digests"`
	// Chain holds, per completed range, the marshalled sha256 state of its
	// shard after the range (base64).
	Chain []string `json:"chain"`
	// ShardSHA256 holds the sha256 of each shard whose ranges are all
	// complete, in shard order.
	ShardSHA256 []string `json:"shardSha256"`
	// HashState is the sha256 midstate of the shard the frontier is in,
	// covering its bytes before the frontier range ("" at a shard start).
	HashState string `json:"hashState,omitempty"`
	// BlobState is the same for the git blob sha1 of that shard, kept only
	// when the source publishes a git blob id rather than a sha256 for it
	// (a regular, non-LFS file on the Hub).
	BlobState string `json:"blobState,omitempty"`
	// Partial records ranges at or after the frontier whose first bytes are
	// already in the container (and, for gap bytes, in the range's spill
	// file), so that an interrupted run loses at most a tile per
	// connection. A resumed run re-reads such a prefix from disk, checks it
	// against Digest, and fetches only the rest of the range; the range
	// still goes through the sha256 chain (re-read from disk) when it is
	// committed. Ascending by range.
	Partial []partialRange `json:"partial,omitempty"`
}

// partialRange is the fetched prefix [off, off+Done) of range Range.
type partialRange struct {
	Range int   `json:"range"`
	Done  int64 `json:"done"` // bytes, 0 < Done <= the range's size
	// Digest is the BLAKE3 prefix digest (prefixHasher) of those bytes in
	// source order, as fetched.
	Digest string `json:"digest"`
}

func newJournal(fp string, rangeSize int64, ident string, ranges int) *journal {
	return &journal{Version: journalVersion, Plan: fp, RangeSize: rangeSize, Source: ident, Ranges: ranges,
		Digests: []string{}, Chain: []string{}, ShardSHA256: []string{}}
}

// errNoJournal: the partial directory has no journal.
var errNoJournal = errors.New("no journal")

func journalPath(partial string) string { return filepath.Join(partial, JournalName) }

// readJournal loads the journal of partial (errNoJournal when there is
// none); its consistency is checked by check.
func readJournal(partial string) (*journal, error) {
	p := journalPath(partial)
	data, err := readFileMax(p, maxJournalSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoJournal
	}
	if err != nil {
		return nil, fmt.Errorf("resume journal: %w", err)
	}
	return parseJournal(data, p)
}

// parseJournal decodes a journal (bounded by maxJournalSize).
func parseJournal(data []byte, name string) (*journal, error) {
	if len(data) > maxJournalSize {
		return nil, fmt.Errorf("resume journal %s: larger than %d bytes", name, maxJournalSize)
	}
	var j journal
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("resume journal %s: %v", name, err)
	}
	if j.Version != journalVersion {
		return nil, fmt.Errorf("resume journal %s: version %d, this tool writes %d", name, j.Version, journalVersion)
	}
	return &j, nil
}

// check validates the journal's internal consistency against the map (its
// identity fields are compared by the caller, which knows what they should
// be).
func (j *journal) check(m *layoutMap, shards []Shard) error {
	if j.Ranges != len(m.ranges) {
		return fmt.Errorf("it records %d ranges, the plan has %d", j.Ranges, len(m.ranges))
	}
	if j.Frontier < 0 || j.Frontier > j.Ranges || len(j.Digests) != j.Frontier || len(j.Chain) != j.Frontier {
		return fmt.Errorf("frontier %d with %d digests and %d chain states for %d ranges", j.Frontier, len(j.Digests), len(j.Chain), j.Ranges)
	}
	for i, d := range j.Digests {
		switch {
		case d == "" && m.ranges[i].gapless():
		case d == "":
			return fmt.Errorf("range %d reads bytes the container does not keep but has no digest", i)
		case !isHex(d, 64):
			return fmt.Errorf("digest of range %d is not 64 hex digits", i)
		}
	}
	for i, c := range j.Chain {
		if err := unmarshalState(sha256.New(), c); err != nil {
			return fmt.Errorf("chain state of range %d: %v", i, err)
		}
	}
	// Shards completed before the frontier.
	done := 0
	if j.Frontier == j.Ranges {
		done = len(m.items)
	} else {
		done = m.ranges[j.Frontier].shard
	}
	if len(j.ShardSHA256) != done {
		return fmt.Errorf("%d shard hashes recorded, %d shards are complete", len(j.ShardSHA256), done)
	}
	for i, d := range j.ShardSHA256 {
		if !isHex(d, 64) {
			return fmt.Errorf("sha256 of shard %d is not 64 hex digits", i)
		}
	}
	for i, p := range j.Partial {
		switch {
		case p.Range < j.Frontier || p.Range >= j.Ranges:
			return fmt.Errorf("partial range %d is not after the frontier %d", p.Range, j.Frontier)
		case i > 0 && p.Range <= j.Partial[i-1].Range:
			return fmt.Errorf("partial ranges are not in ascending order at range %d", p.Range)
		case p.Done <= 0 || p.Done > m.ranges[p.Range].end-m.ranges[p.Range].off:
			return fmt.Errorf("partial range %d: %d bytes done of %d", p.Range, p.Done, m.ranges[p.Range].end-m.ranges[p.Range].off)
		case !isHex(p.Digest, 64):
			return fmt.Errorf("digest of partial range %d is not 64 hex digits", p.Range)
		}
	}
	midShard := j.Frontier < j.Ranges && j.Frontier > 0 && m.ranges[j.Frontier-1].shard == m.ranges[j.Frontier].shard
	if midShard != (j.HashState != "") {
		return fmt.Errorf("hash state present=%v where the frontier is mid-shard=%v", j.HashState != "", midShard)
	}
	if midShard {
		sh := shards[m.ranges[j.Frontier].shard]
		if _, err := j.hashAtFrontier(sh); err != nil {
			return err
		}
		if j.HashState != j.Chain[j.Frontier-1] {
			return fmt.Errorf("hash state differs from the chain state of range %d", j.Frontier-1)
		}
	} else if j.BlobState != "" {
		return fmt.Errorf("blob hash state at a shard start")
	}
	return nil
}

// hashAtFrontier returns the hashes of the frontier's shard continued from
// the recorded midstates (fresh ones at a shard start; the git blob hash
// only for a shard that needs it).
func (j *journal) hashAtFrontier(sh Shard) (*shardHash, error) {
	h := newShardHash(sh)
	if j.HashState == "" {
		if j.BlobState != "" {
			return nil, fmt.Errorf("blob hash state without a sha256 state")
		}
		return h, nil
	}
	if err := unmarshalState(h.sha, j.HashState); err != nil {
		return nil, fmt.Errorf("hash state: %v", err)
	}
	if (h.blob != nil) != (j.BlobState != "") {
		return nil, fmt.Errorf("blob hash state present=%v for a shard that needs one=%v", j.BlobState != "", h.blob != nil)
	}
	if h.blob != nil {
		if err := unmarshalState(h.blob, j.BlobState); err != nil {
			return nil, fmt.Errorf("blob hash state: %v", err)
		}
	}
	return h, nil
}

func unmarshalState(h hash.Hash, s string) error {
	if len(s) > 2048 {
		return fmt.Errorf("too long")
	}
	st, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(st) > 1024 {
		return fmt.Errorf("not valid base64")
	}
	return h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st)
}

func marshalState(h hash.Hash) (string, error) {
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(st), nil
}

// chainStart returns the sha256 of r's shard at r's start, from the chain
// (ranges before the frontier only).
func (j *journal) chainStart(r srcRange) (hash.Hash, error) {
	h := sha256.New()
	if r.off == 0 {
		return h, nil
	}
	if r.id < 1 || r.id > len(j.Chain) {
		return nil, fmt.Errorf("internal error: no chain state before range %d", r.id)
	}
	if err := unmarshalState(h, j.Chain[r.id-1]); err != nil {
		return nil, fmt.Errorf("chain state of range %d: %v", r.id-1, err)
	}
	return h, nil
}

// setHashState records h's midstates (nil: at a shard start).
func (j *journal) setHashState(h *shardHash) error {
	j.HashState, j.BlobState = "", ""
	if h == nil {
		return nil
	}
	var err error
	if j.HashState, err = marshalState(h.sha); err != nil {
		return err
	}
	if h.blob != nil {
		if j.BlobState, err = marshalState(h.blob); err != nil {
			return err
		}
	}
	return nil
}

// shardHash hashes a shard's bytes in order: always sha256, plus the git
// blob sha1 when the source published a blob id instead of a sha256.
type shardHash struct {
	sha, blob hash.Hash
}

// gitBlobShard is implemented by shards whose published hash is a git blob
// id.
type gitBlobShard interface {
	GitBlobSHA1() string
}

func newShardHash(sh Shard) *shardHash {
	h := &shardHash{sha: sha256.New()}
	if g, ok := sh.(gitBlobShard); ok && g.GitBlobSHA1() != "" && sh.SHA256() == "" {
		h.blob = sha1.New()
		fmt.Fprintf(h.blob, "blob %d\x00", sh.Size())
	}
	return h
}

func (h *shardHash) Write(p []byte) (int, error) {
	h.sha.Write(p)
	if h.blob != nil {
		h.blob.Write(p)
	}
	return len(p), nil
}

// write replaces the journal atomically (temp file, fsync, rename, fsync of
// the directory).
func (j *journal) write(partial string) error {
	data, err := json.MarshalIndent(j, "", " ")
	if err != nil {
		return err
	}
	if err := qpack.WriteFileAtomic(journalPath(partial), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("resume journal: %w", err)
	}
	return nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && s == toLowerASCII(s)
}

func toLowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// removeJournal deletes the journal (used when starting over).
func removeJournal(partial string) error {
	err := os.Remove(journalPath(partial))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// snapshot returns a copy of j that later changes to j do not touch.
func (j *journal) snapshot() *journal {
	c := *j
	c.Digests = append([]string(nil), j.Digests...)
	c.Chain = append([]string(nil), j.Chain...)
	c.ShardSHA256 = append([]string(nil), j.ShardSHA256...)
	c.Partial = append([]partialRange(nil), j.Partial...)
	return &c
}
