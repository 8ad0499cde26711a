package repack

import (
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

const journalVersion = 1

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
type journal struct {
	Version   int    `json:"version"`
	Plan      string `json:"plan"`      // Plan.Fingerprint
	RangeSize int64  `json:"rangeSize"` //
	Source    string `json:"source"`    // Source.Identity
	Ranges    int    `json:"ranges"`    // how many ranges the plan has
	Frontier  int    `json:"frontier"`  // ranges [0, Frontier) are complete
	// Digests holds, per completed range, the BLAKE3 of the bytes it wrote,
	// as re-read from the destination files.
	Digests []string `json:"digests"`
	// ShardSHA256 holds the sha256 of each shard whose ranges are all
	// complete, in shard order.
	ShardSHA256 []string `json:"shardSha256"`
	// HashState is the sha256 midstate of the shard the frontier is in,
	// covering its bytes before the frontier range ("" at a shard start).
	HashState string `json:"hashState,omitempty"`
}

func newJournal(fp string, rangeSize int64, ident string, ranges int) *journal {
	return &journal{Version: journalVersion, Plan: fp, RangeSize: rangeSize, Source: ident, Ranges: ranges,
		Digests: []string{}, ShardSHA256: []string{}}
}

// errNoJournal: the partial directory has no journal.
var errNoJournal = errors.New("no journal")

func journalPath(partial string) string { return filepath.Join(partial, JournalName) }

// readJournal loads and validates the journal of partial against the
// layout map m (for the range count and shard boundaries).
func readJournal(partial string, m *layoutMap) (*journal, error) {
	p := journalPath(partial)
	data, err := readFileMax(p, maxJournalSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNoJournal
	}
	if err != nil {
		return nil, fmt.Errorf("resume journal: %w", err)
	}
	var j journal
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("resume journal %s: %v", p, err)
	}
	if j.Version != journalVersion {
		return nil, fmt.Errorf("resume journal %s: version %d, this tool writes %d", p, j.Version, journalVersion)
	}
	return &j, nil
}

// check validates the journal's internal consistency against the map (its
// identity fields are compared by the caller, which knows what they should
// be).
func (j *journal) check(m *layoutMap) error {
	if j.Ranges != len(m.ranges) {
		return fmt.Errorf("it records %d ranges, the plan has %d", j.Ranges, len(m.ranges))
	}
	if j.Frontier < 0 || j.Frontier > j.Ranges || len(j.Digests) != j.Frontier {
		return fmt.Errorf("frontier %d with %d digests for %d ranges", j.Frontier, len(j.Digests), j.Ranges)
	}
	for i, d := range j.Digests {
		if !isHex(d, 64) {
			return fmt.Errorf("digest of range %d is not 64 hex digits", i)
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
	midShard := j.Frontier < j.Ranges && j.Frontier > 0 && m.ranges[j.Frontier-1].shard == m.ranges[j.Frontier].shard
	if midShard != (j.HashState != "") {
		return fmt.Errorf("hash state present=%v where the frontier is mid-shard=%v", j.HashState != "", midShard)
	}
	if midShard {
		if _, err := j.hashAtFrontier(); err != nil {
			return err
		}
	}
	return nil
}

// hashAtFrontier returns the sha256 of the frontier's shard continued from
// the recorded midstate (a fresh one at a shard start).
func (j *journal) hashAtFrontier() (hash.Hash, error) {
	h := sha256.New()
	if j.HashState == "" {
		return h, nil
	}
	st, err := base64.StdEncoding.DecodeString(j.HashState)
	if err != nil || len(st) > 1024 {
		return nil, fmt.Errorf("hash state is not valid base64")
	}
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st); err != nil {
		return nil, fmt.Errorf("hash state: %v", err)
	}
	return h, nil
}

// setHashState records h's midstate.
func (j *journal) setHashState(h hash.Hash) error {
	if h == nil {
		j.HashState = ""
		return nil
	}
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return err
	}
	j.HashState = base64.StdEncoding.EncodeToString(st)
	return nil
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
