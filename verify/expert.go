package verify

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/qpack-go/qpack/qpack"
	"github.com/zeebo/blake3"
)

// ErrNoDigests is returned by NewExpertChecker for a container whose
// manifest records no expert digests (Swiftlet writes none).
var ErrNoDigests = errors.New("the manifest records no expert digests")

// ErrDigestMismatch is wrapped by every *ExpertError.
var ErrDigestMismatch = errors.New("expert blob does not match its digest")

// ExpertError reports an expert blob that does not hash to the manifest's
// expert digest.
type ExpertError struct {
	File   string // container path of the layer file
	Layer  int
	Expert int
	Want   string // digest recorded in the manifest
	Got    string // digest of the bytes read ("" when the blob had the wrong length)
	Msg    string // set for a blob of the wrong length
}

func (e *ExpertError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("%s: layer %d expert %d: %s", e.File, e.Layer, e.Expert, e.Msg)
	}
	return fmt.Sprintf("%s: layer %d expert %d: %v: BLAKE3 %s, manifest records %s; the container is damaged (run qpack verify-install)",
		e.File, e.Layer, e.Expert, ErrDigestMismatch, e.Got, e.Want)
}

func (e *ExpertError) Unwrap() error { return ErrDigestMismatch }

// ExpertChecker checks expert blobs, as a runner reads them, against the
// manifest's expert digests. Its methods are safe for concurrent use.
type ExpertChecker struct {
	stride  int64
	experts int
	want    [][32]byte // layer*experts + expert
	checked []atomic.Uint32
}

// NewExpertChecker prepares a checker for a container's manifest and
// layout (both already validated, as qpack.Open returns them). It fails with
// ErrNoDigests when the manifest has no expert digests.
func NewExpertChecker(m *qpack.Manifest, l *qpack.Layout) (*ExpertChecker, error) {
	if m == nil || l == nil {
		return nil, errors.New("verify: NewExpertChecker: nil manifest or layout")
	}
	if m.Ext == nil || len(m.Ext.ExpertDigests) == 0 {
		return nil, ErrNoDigests
	}
	n := l.LayerCount * l.ExpertCount
	c := &ExpertChecker{stride: l.ExpertStride, experts: l.ExpertCount, want: make([][32]byte, n),
		checked: make([]atomic.Uint32, (n+31)/32)}
	for layer := 0; layer < l.LayerCount; layer++ {
		p := qpack.LayerFile(layer)
		list, ok := m.Ext.ExpertDigests[p]
		if !ok || len(list) != l.ExpertCount {
			return nil, fmt.Errorf("verify: %s: qpack.expertDigests[%s] has %d digests, want %d", qpack.ManifestName, p, len(list), l.ExpertCount)
		}
		for e, d := range list {
			if len(d) != 64 {
				return nil, fmt.Errorf("verify: %s: qpack.expertDigests[%s][%d]: not a 64-character digest", qpack.ManifestName, p, e)
			}
			if _, err := hex.Decode(c.want[layer*l.ExpertCount+e][:], []byte(d)); err != nil {
				return nil, fmt.Errorf("verify: %s: qpack.expertDigests[%s][%d]: %v", qpack.ManifestName, p, e, err)
			}
		}
	}
	return c, nil
}

// NewContainerChecker is NewExpertChecker for an open container.
func NewContainerChecker(c *qpack.Container) (*ExpertChecker, error) {
	return NewExpertChecker(c.Manifest, c.Layout)
}

func (c *ExpertChecker) index(layer, expert int) (int, error) {
	if layer < 0 || expert < 0 || expert >= c.experts || layer >= len(c.want)/c.experts {
		return 0, fmt.Errorf("verify: layer %d expert %d out of range", layer, expert)
	}
	return layer*c.experts + expert, nil
}

// Check hashes blob, expert e of layer l as read from its layer file (its
// whole stride, padding included, as qpack.Container.ReadExpert returns
// it), and returns an *ExpertError if it does not match the manifest.
func (c *ExpertChecker) Check(layer, expert int, blob []byte) error {
	i, err := c.index(layer, expert)
	if err != nil {
		return err
	}
	if int64(len(blob)) != c.stride {
		return &ExpertError{File: qpack.LayerFile(layer), Layer: layer, Expert: expert, Want: hex.EncodeToString(c.want[i][:]),
			Msg: fmt.Sprintf("blob of %d bytes, the stride is %d", len(blob), c.stride)}
	}
	if got := blake3.Sum256(blob); got != c.want[i] {
		return &ExpertError{File: qpack.LayerFile(layer), Layer: layer, Expert: expert,
			Want: hex.EncodeToString(c.want[i][:]), Got: hex.EncodeToString(got[:])}
	}
	c.checked[i/32].Or(1 << (i % 32))
	return nil
}

// CheckOnce is Check for a blob not checked before, and does nothing (nil)
// for one that already passed: a runner calls it on every read and pays
// for the hash only the first time each expert is loaded.
func (c *ExpertChecker) CheckOnce(layer, expert int, blob []byte) error {
	i, err := c.index(layer, expert)
	if err != nil {
		return err
	}
	if c.checked[i/32].Load()&(1<<(i%32)) != 0 {
		return nil
	}
	return c.Check(layer, expert, blob)
}

// Checked reports whether expert e of layer l has passed Check.
func (c *ExpertChecker) Checked(layer, expert int) bool {
	i, err := c.index(layer, expert)
	return err == nil && c.checked[i/32].Load()&(1<<(i%32)) != 0
}
