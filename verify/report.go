package verify

import (
	"fmt"
	"sort"
	"strings"
)

// Status is the outcome of a verification.
type Status string

const (
	// StatusOK: every check passed.
	StatusOK Status = "ok"
	// StatusDamaged: the container is bad (a file missing, of the wrong
	// size, unreadable, or with bytes that do not match their digest or
	// the source). Exit code 1.
	StatusDamaged Status = "damaged"
	// StatusUnusable: the input cannot be verified: not a container, an
	// unsupported version, a structure that breaks the format's rules
	// while its bytes are as written, or a source that is not usable as a
	// reference (unreachable, different from the recorded one, or failing
	// its own hash). Exit code 2.
	StatusUnusable Status = "unusable"
)

// Scope says what a problem is about.
type Scope string

const (
	ScopeContainer Scope = "container"
	ScopeSource    Scope = "source"
)

// Problem kinds.
const (
	KindMissing      = "missing"       // a listed file is absent
	KindNotRegular   = "not-regular"   // a symlink, directory or special file
	KindSize         = "size"          // truncated or extended
	KindRead         = "read"          // an I/O error while reading
	KindDigest       = "digest"        // a file's bytes do not match its digest
	KindExpertDigest = "expert-digest" // an expert blob does not match its digest
	KindManifest     = "manifest"      // a manifest entry contradicts bytes that are otherwise vouched for
	KindPadding      = "padding"       // a byte between or after an expert's sections is not zero
	KindStructure    = "structure"     // the container breaks a rule of the format
	KindMismatch     = "source-mismatch"
	KindSourceHash   = "source-hash" // a source shard does not hash to what it must
	KindSource       = "source"      // the source is not the recorded one, or lacks a tensor
)

// Problem is one thing found wrong. Layer and Expert are set for expert
// blobs, Section when it is known (deep checks), Tensor for dense tensors
// and source tensors, Offset for the first bad byte within File.
type Problem struct {
	Scope   Scope  `json:"scope"`
	Kind    string `json:"kind"`
	File    string `json:"file,omitempty"`
	Key     string `json:"key,omitempty"`
	Layer   *int   `json:"layer,omitempty"`
	Expert  *int   `json:"expert,omitempty"`
	Section string `json:"section,omitempty"`
	Tensor  string `json:"tensor,omitempty"`
	Offset  *int64 `json:"offset,omitempty"`
	Message string `json:"message"`
}

func intp(v int) *int       { return &v }
func int64p(v int64) *int64 { return &v }

// String renders the problem on one line, naming the file and, where known,
// the layer, expert, section or tensor.
func (p Problem) String() string {
	var b strings.Builder
	if p.Scope == ScopeSource {
		b.WriteString("source ")
	}
	if p.File != "" {
		b.WriteString(p.File)
	}
	if p.Key != "" {
		fmt.Fprintf(&b, " [%s]", p.Key)
	}
	if p.Layer != nil {
		fmt.Fprintf(&b, " layer %d", *p.Layer)
	}
	if p.Expert != nil {
		fmt.Fprintf(&b, " expert %d", *p.Expert)
	}
	if p.Section != "" {
		fmt.Fprintf(&b, " section %s", p.Section)
	}
	if p.Tensor != "" {
		fmt.Fprintf(&b, " tensor %s", p.Tensor)
	}
	if p.Offset != nil {
		fmt.Fprintf(&b, " at byte %d", *p.Offset)
	}
	b.WriteString(": ")
	b.WriteString(p.Message)
	return b.String()
}

// Check names how a file's bytes were checked.
const (
	CheckFileDigest    = "file-digest"         // whole-file BLAKE3 against fileDigests
	CheckExpertDigests = "expert-digests"      // every stride against expertDigests (layer files, quick mode)
	CheckBoth          = "file+expert-digests" // both, in one pass
	CheckComputed      = "computed"            // no digest recorded: hashed for the receipt only
	CheckSize          = "size"                // only the size was checked (the file could not be read)
)

// FileResult is what was checked for one listed file.
type FileResult struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Digest string `json:"digest,omitempty"` // the whole-file BLAKE3 computed, when computed
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
}

// Report is the result of Verify. Its JSON form is what `qpack
// verify-install --json` prints.
type Report struct {
	Container      string `json:"container"`
	Status         Status `json:"status"`
	Error          string `json:"error,omitempty"` // why the input is unusable
	ManifestDigest string `json:"manifest_digest,omitempty"`
	// VerifiedBefore is the time recorded by the receipt of an earlier
	// successful verification, if the container has one; the manifest is
	// then also checked against the receipt's digest of it.
	VerifiedBefore string `json:"verified_before,omitempty"`
	// DigestsRecorded is false for a container without the qpack extension
	// (Swiftlet writes none): only sizes, structure and padding can be
	// checked, and --deep against the source.
	DigestsRecorded  bool         `json:"digests_recorded"`
	LayerFileDigests bool         `json:"layer_file_digests_checked"`
	Files            []FileResult `json:"files"`
	Problems         []Problem    `json:"problems"`
	ProblemsOmitted  int          `json:"problems_omitted,omitempty"`
	Notes            []string     `json:"notes,omitempty"`
	ExtraFiles       []string     `json:"extra_files,omitempty"`
	Deep             *DeepReport  `json:"deep,omitempty"`
	BytesHashed      int64        `json:"bytes_hashed"`
	Seconds          float64      `json:"seconds"`

	fileDigests map[string]string // the manifest's, for the receipt
}

// ExitCode is the process exit code for the report: 0 ok, 1 damaged,
// 2 unusable.
func (r *Report) ExitCode() int {
	switch r.Status {
	case StatusOK:
		return 0
	case StatusDamaged:
		return 1
	default:
		return 2
	}
}

// ContainerProblems returns the problems with the container itself.
func (r *Report) ContainerProblems() []Problem {
	var out []Problem
	for _, p := range r.Problems {
		if p.Scope == ScopeContainer {
			out = append(out, p)
		}
	}
	return out
}

// problems collects problems up to a limit.
type problems struct {
	max     int
	list    []Problem
	omitted int
}

func (ps *problems) add(p Problem) {
	if ps.max > 0 && len(ps.list) >= ps.max {
		ps.omitted++
		return
	}
	ps.list = append(ps.list, p)
}

// finish sorts the problems and decides the status.
func (r *Report) finish(ps *problems, fatal error) {
	sort.SliceStable(ps.list, func(i, j int) bool { return lessProblem(ps.list[i], ps.list[j]) })
	r.Problems = ps.list
	if r.Problems == nil {
		r.Problems = []Problem{}
	}
	r.ProblemsOmitted = ps.omitted
	damaged, unusable := false, fatal != nil
	for _, p := range r.Problems {
		switch {
		case p.Scope == ScopeContainer && p.Kind != KindStructure:
			damaged = true
		default:
			unusable = true
		}
	}
	if fatal != nil {
		r.Error = fatal.Error()
	}
	switch {
	case damaged:
		r.Status = StatusDamaged
	case unusable:
		r.Status = StatusUnusable
	default:
		r.Status = StatusOK
	}
}

func lessProblem(a, b Problem) bool {
	if a.Scope != b.Scope {
		return a.Scope == ScopeContainer
	}
	if a.File != b.File {
		return a.File < b.File
	}
	ai, bi := deref(a.Layer), deref(b.Layer)
	if ai != bi {
		return ai < bi
	}
	ai, bi = deref(a.Expert), deref(b.Expert)
	if ai != bi {
		return ai < bi
	}
	ao, bo := int64(-1), int64(-1)
	if a.Offset != nil {
		ao = *a.Offset
	}
	if b.Offset != nil {
		bo = *b.Offset
	}
	if ao != bo {
		return ao < bo
	}
	if a.Tensor != b.Tensor {
		return a.Tensor < b.Tensor
	}
	return a.Kind < b.Kind
}

func deref(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}
