package qpack

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Format identity.
const (
	Magic = "QPACK"
	// Version is the major format version this package reads and writes.
	// Swiftlet writes 1; a reader refuses any other value.
	Version = 1
	// FormatMinor is the minor version of this package's extension
	// ("qpack" key). Minor versions only add optional keys, so a reader
	// accepts any minor and ignores what it does not know.
	FormatMinor = 0
	// DigestBLAKE3 is the only digest algorithm defined in v1.
	DigestBLAKE3 = "blake3"
)

// Limits a reader applies before trusting a manifest.
const (
	MaxManifestSize = 64 << 20
	MaxFiles        = 1 << 16
	maxShards       = 1 << 14
	maxStringLen    = 4096
)

// Manifest is manifest.json. The first seven fields are the ones Swiftlet
// writes and reads; Ext is this toolchain's extension under the key
// "qpack" (nil when absent, as in a container Swiftlet wrote).
type Manifest struct {
	Magic            string
	Version          int
	ModelName        string
	SourceCheckpoint string
	QuantBits        *int // nil when absent or null
	QuantGroupSize   *int // nil when absent or null
	// Files maps every file of the container except manifest.json itself
	// (slash-separated relative path) to its size in bytes.
	Files map[string]int64
	Ext   *Extension
}

// Extension is the "qpack" object of the manifest. Swift's decoder ignores it.
type Extension struct {
	ToolVersion     string
	FormatMinor     int
	Source          Source
	DigestAlgorithm string            // "blake3"
	FileDigests     map[string]string // every path in Files -> lowercase hex digest of the whole file
	// ExpertDigests maps each layer file to one digest per expert, in expert
	// order, each over the expert's whole stride (padding included).
	ExpertDigests map[string][]string
}

// Source records where the container's bytes came from.
type Source struct {
	Repo     string  // "org/name" on the Hub, or "" for a local directory
	Revision string  // the revision asked for (branch, tag or sha)
	Commit   string  // the 40-hex commit it resolved to, or ""
	Dir      string  // the source directory's name (what Swiftlet puts in sourceCheckpoint)
	Shards   []Shard // the source safetensors shards
}

// Shard is one source checkpoint file.
type Shard struct {
	Name   string
	Size   int64
	SHA256 string // lowercase hex, or "" when not known
}

// SortedFiles returns the paths of m.Files in sorted order.
func (m *Manifest) SortedFiles() []string {
	out := make([]string, 0, len(m.Files))
	for p := range m.Files {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// JSON shapes used only for encoding (keys are re-sorted by marshalSorted).
type manifestJSON struct {
	Magic            string           `json:"magic"`
	Version          int              `json:"version"`
	ModelName        string           `json:"modelName"`
	SourceCheckpoint string           `json:"sourceCheckpoint"`
	QuantBits        *int             `json:"quantBits,omitempty"`
	QuantGroupSize   *int             `json:"quantGroupSize,omitempty"`
	Files            map[string]int64 `json:"files"`
	Ext              *extensionJSON   `json:"qpack,omitempty"`
}

type extensionJSON struct {
	ToolVersion     string              `json:"toolVersion"`
	FormatMinor     int                 `json:"formatMinor"`
	Source          sourceJSON          `json:"source"`
	DigestAlgorithm string              `json:"digestAlgorithm"`
	FileDigests     map[string]string   `json:"fileDigests"`
	ExpertDigests   map[string][]string `json:"expertDigests"`
}

type sourceJSON struct {
	Repo     string      `json:"repo"`
	Revision string      `json:"revision"`
	Commit   string      `json:"commit"`
	Dir      string      `json:"dir"`
	Shards   []shardJSON `json:"shards"`
}

type shardJSON struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Marshal validates m and encodes it as manifest.json: sorted keys, two-space
// indentation, trailing newline. Absent quantBits/quantGroupSize are omitted,
// as Swift's encoder omits nil optionals.
func (m *Manifest) Marshal() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	j := manifestJSON{
		Magic: m.Magic, Version: m.Version, ModelName: m.ModelName,
		SourceCheckpoint: m.SourceCheckpoint, QuantBits: m.QuantBits,
		QuantGroupSize: m.QuantGroupSize, Files: m.Files,
	}
	if j.Files == nil {
		j.Files = map[string]int64{}
	}
	if e := m.Ext; e != nil {
		ej := &extensionJSON{
			ToolVersion: e.ToolVersion, FormatMinor: e.FormatMinor,
			DigestAlgorithm: e.DigestAlgorithm, FileDigests: e.FileDigests,
			ExpertDigests: e.ExpertDigests,
			Source: sourceJSON{Repo: e.Source.Repo, Revision: e.Source.Revision,
				Commit: e.Source.Commit, Dir: e.Source.Dir, Shards: []shardJSON{}},
		}
		for _, s := range e.Source.Shards {
			ej.Source.Shards = append(ej.Source.Shards, shardJSON(s))
		}
		if ej.FileDigests == nil {
			ej.FileDigests = map[string]string{}
		}
		if ej.ExpertDigests == nil {
			ej.ExpertDigests = map[string][]string{}
		}
		j.Ext = ej
	}
	b, err := marshalSorted(j)
	if err != nil {
		return nil, &Error{File: ManifestName, Err: err}
	}
	if len(b) > MaxManifestSize {
		return nil, errf(ManifestName, "", "encoded manifest is %d bytes, more than the %d a reader accepts", len(b), MaxManifestSize)
	}
	return b, nil
}

// ParseManifest decodes and validates manifest.json. Unknown keys are ignored
// (as Swift's decoder ignores them); a wrong magic gives ErrNotContainer, a
// version other than 1 ErrUnsupportedVersion, anything else that breaks a
// rule an *Error wrapping ErrInvalid that names the key.
func ParseManifest(data []byte) (*Manifest, error) {
	const file = ManifestName
	if len(data) > MaxManifestSize {
		return nil, errf(file, "", "%d bytes, more than the limit of %d", len(data), MaxManifestSize)
	}
	fields, err := objectFields(data)
	if err != nil {
		return nil, &Error{File: file, Err: &invalid{err.Error()}}
	}
	m := &Manifest{}

	// Identity first, so a file that is not a container at all, or a later
	// major version, is reported as such rather than as a missing key.
	raw, ok := fields["magic"]
	if !ok {
		return nil, &Error{File: file, Key: "magic", Err: fmt.Errorf("%w: no \"magic\" key", ErrNotContainer)}
	}
	if m.Magic, err = decodeString(raw); err != nil || m.Magic != Magic {
		return nil, &Error{File: file, Key: "magic", Err: fmt.Errorf("%w: magic is %s, want %q", ErrNotContainer, truncate(string(raw), 40), Magic)}
	}
	raw, ok = fields["version"]
	if !ok {
		return nil, errf(file, "version", "missing")
	}
	v, err := decodeInt(raw)
	if err != nil {
		return nil, errf(file, "version", "%v", err)
	}
	if v != Version {
		return nil, &Error{File: file, Key: "version", Err: fmt.Errorf("%w: version %d (this build reads version %d only; a newer qpack may read it)", ErrUnsupportedVersion, v, Version)}
	}
	m.Version = Version

	for _, k := range []struct {
		key string
		dst *string
	}{{"modelName", &m.ModelName}, {"sourceCheckpoint", &m.SourceCheckpoint}} {
		raw, ok := fields[k.key]
		if !ok {
			return nil, errf(file, k.key, "missing")
		}
		if *k.dst, err = decodeString(raw); err != nil {
			return nil, errf(file, k.key, "%v", err)
		}
	}
	for _, k := range []struct {
		key string
		dst **int
	}{{"quantBits", &m.QuantBits}, {"quantGroupSize", &m.QuantGroupSize}} {
		raw, ok := fields[k.key]
		if !ok || isNull(raw) {
			continue
		}
		n, err := decodeInt(raw)
		if err != nil {
			return nil, errf(file, k.key, "%v", err)
		}
		if n < 1 || n > 1<<20 {
			return nil, errf(file, k.key, "%d is out of range", n)
		}
		iv := int(n)
		*k.dst = &iv
	}

	raw, ok = fields["files"]
	if !ok || isNull(raw) {
		return nil, errf(file, "files", "missing")
	}
	m.Files = make(map[string]int64)
	err = walkObject(raw, func(p string, raw json.RawMessage) error {
		if len(m.Files) >= MaxFiles {
			return fmt.Errorf("more than %d entries", MaxFiles)
		}
		size, err := decodeInt(raw)
		if err != nil {
			return fmt.Errorf("size of %q: %v", p, err)
		}
		m.Files[p] = size
		return nil
	})
	if err != nil {
		return nil, errf(file, "files", "%v", err)
	}

	if raw, ok := fields["qpack"]; ok && !isNull(raw) {
		if m.Ext, err = parseExtension(raw); err != nil {
			return nil, err
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

func parseExtension(data []byte) (*Extension, error) {
	const file = ManifestName
	fields, err := objectFields(data)
	if err != nil {
		return nil, errf(file, "qpack", "%v", err)
	}
	e := &Extension{FileDigests: map[string]string{}, ExpertDigests: map[string][]string{}}
	str := func(f map[string]json.RawMessage, key, where string, dst *string) error {
		raw, ok := f[key]
		if !ok || isNull(raw) {
			return nil
		}
		s, err := decodeString(raw)
		if err != nil {
			return errf(file, where+key, "%v", err)
		}
		if len(s) > maxStringLen {
			return errf(file, where+key, "longer than %d bytes", maxStringLen)
		}
		*dst = s
		return nil
	}
	if err := str(fields, "toolVersion", "qpack.", &e.ToolVersion); err != nil {
		return nil, err
	}
	if err := str(fields, "digestAlgorithm", "qpack.", &e.DigestAlgorithm); err != nil {
		return nil, err
	}
	if raw, ok := fields["formatMinor"]; ok && !isNull(raw) {
		n, err := decodeInt(raw)
		if err != nil {
			return nil, errf(file, "qpack.formatMinor", "%v", err)
		}
		if n < 0 || n > 1<<20 {
			return nil, errf(file, "qpack.formatMinor", "%d is out of range", n)
		}
		e.FormatMinor = int(n)
	}

	if raw, ok := fields["source"]; ok && !isNull(raw) {
		sf, err := objectFields(raw)
		if err != nil {
			return nil, errf(file, "qpack.source", "%v", err)
		}
		for _, k := range []struct {
			key string
			dst *string
		}{{"repo", &e.Source.Repo}, {"revision", &e.Source.Revision}, {"commit", &e.Source.Commit}, {"dir", &e.Source.Dir}} {
			if err := str(sf, k.key, "qpack.source.", k.dst); err != nil {
				return nil, err
			}
		}
		if raw, ok := sf["shards"]; ok && !isNull(raw) {
			els, err := decodeArray(raw, maxShards)
			if err != nil {
				return nil, errf(file, "qpack.source.shards", "%v", err)
			}
			for i, el := range els {
				where := fmt.Sprintf("qpack.source.shards[%d].", i)
				shf, err := objectFields(el)
				if err != nil {
					return nil, errf(file, where[:len(where)-1], "%v", err)
				}
				var s Shard
				if err := str(shf, "name", where, &s.Name); err != nil {
					return nil, err
				}
				if err := str(shf, "sha256", where, &s.SHA256); err != nil {
					return nil, err
				}
				if raw, ok := shf["size"]; ok {
					if s.Size, err = decodeInt(raw); err != nil {
						return nil, errf(file, where+"size", "%v", err)
					}
				}
				e.Source.Shards = append(e.Source.Shards, s)
			}
		}
	}

	if raw, ok := fields["fileDigests"]; ok && !isNull(raw) {
		err := walkObject(raw, func(p string, raw json.RawMessage) error {
			if len(e.FileDigests) >= MaxFiles {
				return fmt.Errorf("more than %d entries", MaxFiles)
			}
			s, err := decodeString(raw)
			if err != nil {
				return fmt.Errorf("%q: %v", p, err)
			}
			e.FileDigests[p] = s
			return nil
		})
		if err != nil {
			return nil, errf(file, "qpack.fileDigests", "%v", err)
		}
	}
	if raw, ok := fields["expertDigests"]; ok && !isNull(raw) {
		err := walkObject(raw, func(p string, raw json.RawMessage) error {
			if len(e.ExpertDigests) >= MaxLayers {
				return fmt.Errorf("more than %d entries", MaxLayers)
			}
			els, err := decodeArray(raw, MaxExperts)
			if err != nil {
				return fmt.Errorf("%q: %v", p, err)
			}
			list := make([]string, len(els))
			for i, el := range els {
				if list[i], err = decodeString(el); err != nil {
					return fmt.Errorf("%q[%d]: %v", p, i, err)
				}
			}
			e.ExpertDigests[p] = list
			return nil
		})
		if err != nil {
			return nil, errf(file, "qpack.expertDigests", "%v", err)
		}
	}
	return e, nil
}

// Validate checks the rules that need only the manifest: magic and version,
// every path in Files (see CheckPath), no two paths that a case-insensitive
// or normalizing file system would confuse, sizes non-negative, the required
// entries present, and the extension's digests well formed and complete.
// Rules that need the layout (layer files and their sizes) are checked by Open.
func (m *Manifest) Validate() error {
	const file = ManifestName
	if m.Magic != Magic {
		return &Error{File: file, Key: "magic", Err: fmt.Errorf("%w: magic is %q, want %q", ErrNotContainer, m.Magic, Magic)}
	}
	if m.Version != Version {
		return &Error{File: file, Key: "version", Err: fmt.Errorf("%w: version %d (this build reads version %d only)", ErrUnsupportedVersion, m.Version, Version)}
	}
	if len(m.ModelName) > maxStringLen {
		return errf(file, "modelName", "longer than %d bytes", maxStringLen)
	}
	if len(m.SourceCheckpoint) > maxStringLen {
		return errf(file, "sourceCheckpoint", "longer than %d bytes", maxStringLen)
	}
	if len(m.Files) > MaxFiles {
		return errf(file, "files", "more than %d entries", MaxFiles)
	}
	folded := make(map[string]string, len(m.Files))
	for _, p := range m.SortedFiles() {
		size := m.Files[p]
		if err := CheckPath(p); err != nil {
			return errf(file, "files", "%v", err)
		}
		if p == ManifestName {
			return errf(file, "files", "lists %q, which must not list itself", ManifestName)
		}
		if size < 0 {
			return errf(file, "files", "%q has negative size %d", p, size)
		}
		k := foldKey(p)
		if other, dup := folded[k]; dup {
			return errf(file, "files", "%q and %q name the same file on a case-insensitive file system", other, p)
		}
		folded[k] = p
	}
	// A path may not be both a file and a directory ("a" and "a/b").
	for _, p := range m.SortedFiles() {
		for dir := p; ; {
			i := lastSlash(dir)
			if i < 0 {
				break
			}
			dir = dir[:i]
			if other, ok := folded[foldKey(dir)]; ok {
				return errf(file, "files", "%q is listed as a file but %q is inside it", other, p)
			}
		}
	}
	for _, need := range []string{DenseName, LayoutName} {
		if _, ok := m.Files[need]; !ok {
			return errf(file, "files", "does not list %q", need)
		}
	}
	if m.Ext != nil {
		if err := m.Ext.validate(m); err != nil {
			return err
		}
	}
	return nil
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

func (e *Extension) validate(m *Manifest) error {
	const file = ManifestName
	if e.DigestAlgorithm != DigestBLAKE3 {
		return errf(file, "qpack.digestAlgorithm", "%q is not supported (want %q)", e.DigestAlgorithm, DigestBLAKE3)
	}
	if e.FormatMinor < 0 {
		return errf(file, "qpack.formatMinor", "negative")
	}
	s := e.Source
	for _, f := range []struct{ key, v string }{{"repo", s.Repo}, {"revision", s.Revision}, {"commit", s.Commit}, {"dir", s.Dir}} {
		if len(f.v) > maxStringLen {
			return errf(file, "qpack.source."+f.key, "longer than %d bytes", maxStringLen)
		}
	}
	if s.Commit != "" && !isHex(s.Commit, 40) {
		return errf(file, "qpack.source.commit", "%q is not a 40-character lowercase hex commit id", truncate(s.Commit, 80))
	}
	if len(s.Shards) > maxShards {
		return errf(file, "qpack.source.shards", "more than %d entries", maxShards)
	}
	for i, sh := range s.Shards {
		key := fmt.Sprintf("qpack.source.shards[%d]", i)
		if sh.Name == "" || len(sh.Name) > maxStringLen {
			return errf(file, key+".name", "empty or too long")
		}
		if sh.Size < 0 {
			return errf(file, key+".size", "negative size %d", sh.Size)
		}
		if sh.SHA256 != "" && !isHex(sh.SHA256, 64) {
			return errf(file, key+".sha256", "%q is not 64 lowercase hex characters", truncate(sh.SHA256, 80))
		}
	}
	for _, p := range m.SortedFiles() {
		d, ok := e.FileDigests[p]
		if !ok {
			return errf(file, "qpack.fileDigests", "no digest for %q", p)
		}
		if !isHex(d, 64) {
			return errf(file, "qpack.fileDigests", "digest of %q is not 64 lowercase hex characters", p)
		}
	}
	if len(e.FileDigests) != len(m.Files) {
		for p := range e.FileDigests {
			if _, ok := m.Files[p]; !ok {
				return errf(file, "qpack.fileDigests", "%q is not listed in \"files\"", truncate(p, 200))
			}
		}
	}
	if len(e.ExpertDigests) > MaxLayers {
		return errf(file, "qpack.expertDigests", "more than %d entries", MaxLayers)
	}
	layerFiles := make([]string, 0, len(e.ExpertDigests))
	for p := range e.ExpertDigests {
		layerFiles = append(layerFiles, p)
	}
	sort.Strings(layerFiles)
	for _, p := range layerFiles {
		list := e.ExpertDigests[p]
		if _, ok := m.Files[p]; !ok {
			return errf(file, "qpack.expertDigests", "%q is not listed in \"files\"", truncate(p, 200))
		}
		if _, ok := parseLayerFile(p); !ok {
			return errf(file, "qpack.expertDigests", "%q is not a layer file", p)
		}
		if len(list) > MaxExperts {
			return errf(file, "qpack.expertDigests", "%q has more than %d entries", p, MaxExperts)
		}
		for i, d := range list {
			if !isHex(d, 64) {
				return errf(file, "qpack.expertDigests", "%q expert %d: digest is not 64 lowercase hex characters", p, i)
			}
		}
	}
	return nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
