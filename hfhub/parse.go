package hfhub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"
)

// Limits on what the network may hand us (documented in doc.go, "Bounds").
const (
	maxJSONBytes = 64 << 20  // one API response (a tree page of 1000 entries is ~300 KB)
	maxFiles     = 1_000_000 // entries in one repository
	maxPathLen   = 4096
	maxFileSize  = 1 << 50 // 1 PiB: anything larger is nonsense
	// maxTreePages caps the pages of one listing when the model info's
	// file count is not known; when it is, the cap is the number of entries
	// (files and directories) model info implies plus treePageSlack. Every
	// page but the last must hold at least one entry either way.
	maxTreePages   = 100_000
	treePageSlack  = 16
	maxErrorBody   = 64 << 10 // an error body read for the server's message
	maxDrainBody   = 4 << 10  // bytes read off a body we drop, to keep its connection
	maxRepoIDLen   = 96*2 + 1
	maxRevisionLen = 255
)

// LFSInfo describes the large-file payload of an LFS entry.
type LFSInfo struct {
	SHA256      string `json:"sha256"`
	Size        int64  `json:"size"`
	PointerSize int64  `json:"pointerSize,omitempty"`
}

// FileInfo is one file of a repository at a commit.
type FileInfo struct {
	Path   string   `json:"path"`
	Size   int64    `json:"size"`   // the real size (the LFS size for LFS files)
	BlobID string   `json:"blobId"` // git blob sha1 (of the pointer file for LFS files)
	LFS    *LFSInfo `json:"lfs,omitempty"`
}

// ETag is the identifier the Hub serves for the file and the official cache
// names its blob after: the sha256 for LFS files, the git blob sha1 otherwise.
func (f FileInfo) ETag() string {
	if f.LFS != nil {
		return f.LFS.SHA256
	}
	return f.BlobID
}

// ModelInfo is the part of /api/models/{repo} this package uses.
type ModelInfo struct {
	ID           string     `json:"id"`
	SHA          string     `json:"sha"`
	Private      bool       `json:"private"`
	Gated        string     `json:"gated,omitempty"` // "", "auto" or "manual"
	Disabled     bool       `json:"disabled"`
	LastModified string     `json:"lastModified,omitempty"`
	Siblings     []FileInfo `json:"siblings"` // Size/BlobID/LFS only when the server sent them
}

type wireLFS struct {
	SHA256      *string `json:"sha256"`
	OID         *string `json:"oid"`
	Size        *int64  `json:"size"`
	PointerSize *int64  `json:"pointerSize"`
}

type wireSibling struct {
	RFilename *string  `json:"rfilename"`
	Size      *int64   `json:"size"`
	BlobID    *string  `json:"blobId"`
	LFS       *wireLFS `json:"lfs"`
}

type wireModelInfo struct {
	ID           *string         `json:"id"`
	SHA          *string         `json:"sha"`
	Private      bool            `json:"private"`
	Gated        json.RawMessage `json:"gated"`
	Disabled     bool            `json:"disabled"`
	LastModified string          `json:"lastModified"`
	Siblings     []wireSibling   `json:"siblings"`
}

// parseModelInfo decodes and validates a model_info body. repo names the
// repository in errors.
func parseModelInfo(repo string, body []byte) (*ModelInfo, error) {
	var w wireModelInfo
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("model info of %s: %w: %v", repo, ErrBadResponse, err)
	}
	if w.ID == nil || *w.ID == "" {
		return nil, fmt.Errorf("model info of %s: %w: no \"id\"", repo, ErrBadResponse)
	}
	if w.SHA == nil || !isCommit(*w.SHA) {
		return nil, fmt.Errorf("model info of %s: %w: \"sha\" is not a 40-hex commit", repo, ErrBadResponse)
	}
	if len(w.Siblings) > maxFiles {
		return nil, fmt.Errorf("model info of %s: %w: %d siblings (limit %d)", repo, ErrBadResponse, len(w.Siblings), maxFiles)
	}
	mi := &ModelInfo{ID: *w.ID, SHA: *w.SHA, Private: w.Private, Disabled: w.Disabled, LastModified: sanitizeMessage(w.LastModified)}
	if len(mi.ID) > maxRepoIDLen || !utf8.ValidString(mi.ID) {
		return nil, fmt.Errorf("model info of %s: %w: bad \"id\"", repo, ErrBadResponse)
	}
	switch g := bytes.TrimSpace(w.Gated); {
	case len(g) == 0, string(g) == "null", string(g) == "false":
	case string(g) == "true":
		mi.Gated = "auto"
	default:
		var s string
		if json.Unmarshal(g, &s) != nil || (s != "auto" && s != "manual") {
			return nil, fmt.Errorf("model info of %s: %w: \"gated\" is %.40s", repo, ErrBadResponse, g)
		}
		mi.Gated = s
	}
	seen := make(map[string]bool, len(w.Siblings))
	for i, s := range w.Siblings {
		if s.RFilename == nil {
			return nil, fmt.Errorf("model info of %s: %w: sibling %d has no \"rfilename\"", repo, ErrBadResponse, i)
		}
		if err := ValidateRepoPath(*s.RFilename); err != nil {
			return nil, fmt.Errorf("model info of %s: sibling %d refused: %w", repo, i, err)
		}
		if seen[*s.RFilename] {
			return nil, fmt.Errorf("model info of %s: %w: sibling %q listed twice", repo, ErrBadResponse, *s.RFilename)
		}
		seen[*s.RFilename] = true
		fi := FileInfo{Path: *s.RFilename, Size: -1}
		if s.Size != nil {
			if *s.Size < 0 || *s.Size > maxFileSize {
				return nil, fmt.Errorf("model info of %s: %w: %q has size %d", repo, ErrBadResponse, fi.Path, *s.Size)
			}
			fi.Size = *s.Size
		}
		if s.BlobID != nil {
			if !isSHA1(*s.BlobID) {
				return nil, fmt.Errorf("model info of %s: %w: %q has a blobId that is not 40 hex", repo, ErrBadResponse, fi.Path)
			}
			fi.BlobID = *s.BlobID
		}
		if s.LFS != nil {
			lfs, err := checkLFS(s.LFS, s.LFS.SHA256, fi.Size)
			if err != nil {
				return nil, fmt.Errorf("model info of %s: %w: %q: %v", repo, ErrBadResponse, fi.Path, err)
			}
			fi.LFS = lfs
		}
		mi.Siblings = append(mi.Siblings, fi)
	}
	return mi, nil
}

func checkLFS(w *wireLFS, hash *string, size int64) (*LFSInfo, error) {
	if hash == nil || !isSHA256(*hash) {
		return nil, fmt.Errorf("lfs hash is not 64 hex")
	}
	if w.Size == nil || *w.Size < 0 || *w.Size > maxFileSize {
		return nil, fmt.Errorf("lfs size missing or out of range")
	}
	if w.PointerSize == nil || *w.PointerSize < 0 || *w.PointerSize > 1<<20 {
		return nil, fmt.Errorf("lfs pointerSize missing or out of range")
	}
	if size >= 0 && size != *w.Size {
		return nil, fmt.Errorf("size %d differs from lfs size %d", size, *w.Size)
	}
	return &LFSInfo{SHA256: *hash, Size: *w.Size, PointerSize: *w.PointerSize}, nil
}

type wireTreeEntry struct {
	Type *string  `json:"type"`
	OID  *string  `json:"oid"`
	Size *int64   `json:"size"`
	Path *string  `json:"path"`
	LFS  *wireLFS `json:"lfs"`
}

// parseTreePage decodes one page of /api/models/{repo}/tree/{rev}: files are
// returned, directory entries validated and dropped.
func parseTreePage(repo string, body []byte) ([]FileInfo, error) {
	fs, _, err := parseTreePageN(repo, body)
	return fs, err
}

// parseTreePageN is parseTreePage that also says how many entries (files
// and directories) the page held.
func parseTreePageN(repo string, body []byte) ([]FileInfo, int, error) {
	var entries []wireTreeEntry
	if err := json.Unmarshal(body, &entries); err != nil {
		return nil, 0, fmt.Errorf("tree of %s: %w: %v", repo, ErrBadResponse, err)
	}
	out, err := treeFiles(repo, entries)
	return out, len(entries), err
}

func treeFiles(repo string, entries []wireTreeEntry) ([]FileInfo, error) {
	if len(entries) > maxFiles {
		return nil, fmt.Errorf("tree of %s: %w: %d entries on one page", repo, ErrBadResponse, len(entries))
	}
	var out []FileInfo
	for i, e := range entries {
		if e.Path == nil {
			return nil, fmt.Errorf("tree of %s: %w: entry %d has no \"path\"", repo, ErrBadResponse, i)
		}
		if err := ValidateRepoPath(*e.Path); err != nil {
			return nil, fmt.Errorf("tree of %s: entry %d refused: %w", repo, i, err)
		}
		typ := ""
		if e.Type != nil {
			typ = *e.Type
		}
		switch typ {
		case "directory":
			continue
		case "file":
		default:
			return nil, fmt.Errorf("tree of %s: %w: entry %q has type %.20q", repo, ErrBadResponse, *e.Path, typ)
		}
		if e.OID == nil || !isSHA1(*e.OID) {
			return nil, fmt.Errorf("tree of %s: %w: %q has no 40-hex \"oid\"", repo, ErrBadResponse, *e.Path)
		}
		if e.Size == nil || *e.Size < 0 || *e.Size > maxFileSize {
			return nil, fmt.Errorf("tree of %s: %w: %q has no valid \"size\"", repo, ErrBadResponse, *e.Path)
		}
		fi := FileInfo{Path: *e.Path, Size: *e.Size, BlobID: *e.OID}
		if e.LFS != nil {
			lfs, err := checkLFS(e.LFS, e.LFS.OID, fi.Size)
			if err != nil {
				return nil, fmt.Errorf("tree of %s: %w: %q: %v", repo, ErrBadResponse, fi.Path, err)
			}
			fi.LFS = lfs
		}
		out = append(out, fi)
	}
	return out, nil
}

// checkFileSet refuses duplicate paths and a path that is also a directory
// of another (they could not both exist on disk), and sorts by path.
func checkFileSet(repo string, files []FileInfo) error {
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	names := make(map[string]bool, len(files))
	for _, f := range files {
		if names[f.Path] {
			return fmt.Errorf("file list of %s: %w: %q listed twice", repo, ErrBadResponse, f.Path)
		}
		names[f.Path] = true
	}
	for _, f := range files {
		for d := f.Path; ; {
			i := strings.LastIndexByte(d, '/')
			if i < 0 {
				break
			}
			d = d[:i]
			if names[d] {
				return fmt.Errorf("file list of %s: %w: %q is both a file and the directory of %q", repo, ErrBadResponse, d, f.Path)
			}
		}
	}
	return nil
}

// ValidateRepoPath refuses a repository file path that could escape the
// directory it is written under or that no file system could hold: empty,
// absolute, "." or ".." segments, empty segments, backslashes, NUL and
// control characters, invalid UTF-8, over-long names.
func ValidateRepoPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty file path")
	case len(p) > maxPathLen:
		return fmt.Errorf("file path of %d bytes is too long", len(p))
	case !utf8.ValidString(p):
		return fmt.Errorf("file path %q is not valid UTF-8", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("absolute file path %q", p)
	case strings.ContainsRune(p, '\\'):
		return fmt.Errorf("file path %q contains a backslash", p)
	case len(p) >= 2 && p[1] == ':':
		return fmt.Errorf("file path %q looks like a drive path", p)
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("file path %q contains a control character", p)
		}
	}
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "" || seg == "." || seg == "..":
			return fmt.Errorf("file path %q has a %q segment", p, seg)
		case len(seg) > 255:
			return fmt.Errorf("file path %q has a segment longer than 255 bytes", p)
		}
	}
	return nil
}

// ValidateRepoID checks a model id "org/name" or "name" the way the official
// client does: word characters, '-' and '.', at most 96 per part, no "--" or
// "..", not ending in ".git".
func ValidateRepoID(id string) error {
	parts := strings.Split(id, "/")
	if len(parts) > 2 || id == "" {
		return badInput("repository id %q: want \"org/name\" or \"name\"", id)
	}
	for _, p := range parts {
		if p == "" || len(p) > 96 {
			return badInput("repository id %q: each part must have 1 to 96 characters", id)
		}
		for _, c := range []byte(p) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
				return badInput("repository id %q: character %q is not allowed", id, c)
			}
		}
		if p[0] == '-' || p[0] == '.' || p[len(p)-1] == '-' || p[len(p)-1] == '.' {
			return badInput("repository id %q: a part cannot start or end with '-' or '.'", id)
		}
	}
	if strings.Contains(id, "--") || strings.Contains(id, "..") || strings.HasSuffix(id, ".git") {
		return badInput("repository id %q: \"--\", \"..\" and a \".git\" suffix are not allowed", id)
	}
	return nil
}

// validateRevision checks a branch, tag or commit name: it becomes a path
// under refs/ in the cache, so the same rules as file paths apply.
func validateRevision(rev string) error {
	if len(rev) > maxRevisionLen {
		return badInput("revision of %d bytes is too long", len(rev))
	}
	if err := ValidateRepoPath(rev); err != nil {
		return badInput("revision %q: %v", rev, err)
	}
	return nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < n; i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func isCommit(s string) bool { return isHex(s, 40) }
func isSHA1(s string) bool   { return isHex(s, 40) }
func isSHA256(s string) bool { return isHex(s, 64) }

// parseLinkNext returns the URL of rel="next" in a Link header, or "".
func parseLinkNext(h string) (string, error) {
	if len(h) > 16<<10 {
		return "", fmt.Errorf("%w: Link header of %d bytes", ErrBadResponse, len(h))
	}
	for len(h) > 0 {
		h = strings.TrimLeft(h, " \t,")
		if h == "" {
			break
		}
		if h[0] != '<' {
			return "", fmt.Errorf("%w: malformed Link header", ErrBadResponse)
		}
		end := strings.IndexByte(h, '>')
		if end < 0 {
			return "", fmt.Errorf("%w: malformed Link header", ErrBadResponse)
		}
		target := h[1:end]
		h = h[end+1:]
		// parameters up to the next comma outside quotes
		params, rest := splitLinkParams(h)
		h = rest
		for _, p := range params {
			k, v, _ := strings.Cut(p, "=")
			if !strings.EqualFold(strings.TrimSpace(k), "rel") {
				continue
			}
			v = strings.Trim(strings.TrimSpace(v), `"`)
			for _, r := range strings.Fields(v) {
				if strings.EqualFold(r, "next") {
					if _, err := url.Parse(target); err != nil {
						return "", fmt.Errorf("%w: Link next URL: %v", ErrBadResponse, err)
					}
					return target, nil
				}
			}
		}
	}
	return "", nil
}

func splitLinkParams(h string) (params []string, rest string) {
	inQuote := false
	start := 0
	for i := 0; i < len(h); i++ {
		switch h[i] {
		case '"':
			inQuote = !inQuote
		case ';':
			if !inQuote {
				if s := strings.TrimSpace(h[start:i]); s != "" {
					params = append(params, s)
				}
				start = i + 1
			}
		case ',':
			if !inQuote {
				if s := strings.TrimSpace(h[start:i]); s != "" {
					params = append(params, s)
				}
				return params, h[i+1:]
			}
		}
	}
	if s := strings.TrimSpace(h[start:]); s != "" {
		params = append(params, s)
	}
	return params, ""
}
