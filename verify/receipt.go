package verify

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/qpack-go/qpack/internal/regfile"
	"github.com/qpack-go/qpack/qpack"
)

// Receipt is verified-install.json: what was verified, when, and the size
// and digest of every file, so a later check (or a person) can tell the
// container is still the one that passed.
type Receipt struct {
	Tool            string `json:"tool"`
	Container       string `json:"container"`
	VerifiedAt      string `json:"verifiedAt"` // RFC 3339, UTC
	ManifestDigest  string `json:"manifestDigest"`
	DigestsRecorded bool   `json:"digestsRecorded"`
	// LayerFileDigests: the whole-file digests of layer files were
	// checked too (false in quick mode, where the expert digests vouch for
	// every byte).
	LayerFileDigests bool                   `json:"layerFileDigestsChecked"`
	Deep             *ReceiptDeep           `json:"deep,omitempty"`
	Files            map[string]ReceiptFile `json:"files"`
}

// ReceiptFile is one file of the receipt. Digest is the whole-file BLAKE3:
// computed for every file except layer files in quick mode, where it is the
// manifest's value and Check says the bytes were vouched for by the expert
// digests.
type ReceiptFile struct {
	Size   int64  `json:"size"`
	Digest string `json:"digest,omitempty"`
	Check  string `json:"check"`
}

// ReceiptDeep records a deep check.
type ReceiptDeep struct {
	Source string `json:"source"`
	Commit string `json:"commit,omitempty"`
	Sample int    `json:"sample,omitempty"` // experts per layer; 0 = all
}

// NewReceipt builds the receipt of a report whose status is ok.
func NewReceipt(r *Report, tool string, now time.Time) (*Receipt, error) {
	if r.Status != StatusOK {
		return nil, fmt.Errorf("verify: no receipt for a container whose verification did not pass (%s)", r.Status)
	}
	rc := &Receipt{Tool: tool, Container: r.Container, VerifiedAt: now.UTC().Format(time.RFC3339),
		ManifestDigest: r.ManifestDigest, DigestsRecorded: r.DigestsRecorded, LayerFileDigests: r.LayerFileDigests,
		Files: map[string]ReceiptFile{}}
	for _, f := range r.Files {
		if !f.OK {
			return nil, fmt.Errorf("verify: %s did not pass", f.Path)
		}
		rf := ReceiptFile{Size: f.Size, Digest: f.Digest, Check: f.Check}
		if rf.Digest == "" && r.fileDigests != nil {
			rf.Digest = r.fileDigests[f.Path]
		}
		rc.Files[f.Path] = rf
	}
	if d := r.Deep; d != nil {
		rc.Deep = &ReceiptDeep{Source: d.Source, Commit: d.Commit, Sample: d.Sample}
	}
	return rc, nil
}

// WriteReceipt writes rc as JSON to path atomically (temporary file, fsync,
// rename): path holds either its old contents or the whole receipt.
func WriteReceipt(path string, rc *Receipt) error {
	if rc == nil {
		return errors.New("verify: nil receipt")
	}
	data, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		return err
	}
	return qpack.WriteFileAtomic(filepath.Clean(path), append(data, '\n'), 0o644)
}

// CheckReceiptTarget reports whether WriteReceipt may replace what is at
// path: nothing, or a regular file holding a receipt (one an earlier
// verification wrote). Anything else (a file qpack did not write, a
// directory, a link, a device) is refused, so an explicit receipt path
// never overwrites what qpack did not create.
func CheckReceiptTarget(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is %s, not a receipt: not replaced", path, regfile.Describe(st.Mode()))
	}
	data, err := regfile.ReadFile(path, maxReceiptBytes)
	if err == nil {
		_, err = parseReceipt(data)
	}
	if err != nil {
		return fmt.Errorf("%s exists and is not a receipt (%v): not replaced", path, err)
	}
	return nil
}

// Limits of a receipt read back.
const (
	maxReceiptString = 4096
	maxReceiptFiles  = qpack.MaxFiles
	maxReceiptBytes  = 64 << 20
)

// parseReceipt reads a receipt (untrusted: it is a file in the container
// like any other) and checks what a receipt NewReceipt made satisfies:
// manifestDigest is 64 lowercase hex digits, verifiedAt is RFC 3339, every
// file has a non-empty slash-separated path, a size >= 0 and a digest that
// is empty or 64 lowercase hex digits, strings are of bounded length.
func parseReceipt(data []byte) (*Receipt, error) {
	var rc Receipt
	if err := json.Unmarshal(data, &rc); err != nil {
		return nil, err
	}
	if !isLowerHex(rc.ManifestDigest, 64) {
		return nil, errors.New("manifestDigest is not 64 lowercase hex digits")
	}
	if len(rc.VerifiedAt) > 64 {
		return nil, errors.New("verifiedAt is not an RFC 3339 time")
	}
	if _, err := time.Parse(time.RFC3339, rc.VerifiedAt); err != nil {
		return nil, errors.New("verifiedAt is not an RFC 3339 time")
	}
	for _, s := range []struct{ key, v string }{{"tool", rc.Tool}, {"container", rc.Container}} {
		if len(s.v) > maxReceiptString {
			return nil, fmt.Errorf("%s is longer than %d bytes", s.key, maxReceiptString)
		}
	}
	if d := rc.Deep; d != nil {
		if len(d.Source) > maxReceiptString || len(d.Commit) > maxReceiptString {
			return nil, fmt.Errorf("deep: source or commit longer than %d bytes", maxReceiptString)
		}
		if d.Sample < 0 {
			return nil, fmt.Errorf("deep: sample %d", d.Sample)
		}
	}
	if len(rc.Files) > maxReceiptFiles {
		return nil, fmt.Errorf("%d files, more than %d", len(rc.Files), maxReceiptFiles)
	}
	for p, f := range rc.Files {
		if p == "" || len(p) > maxReceiptString || strings.Contains(p, "\\") {
			return nil, fmt.Errorf("files: bad path %q", truncate(p, 80))
		}
		if f.Size < 0 {
			return nil, fmt.Errorf("files: %q: size %d", p, f.Size)
		}
		if f.Digest != "" && !isLowerHex(f.Digest, 64) {
			return nil, fmt.Errorf("files: %q: digest is not 64 lowercase hex digits", p)
		}
		if len(f.Check) > 64 {
			return nil, fmt.Errorf("files: %q: check is longer than 64 bytes", p)
		}
	}
	return &rc, nil
}
