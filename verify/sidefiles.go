package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/qpack-go/qpack/qpack"
)

// maxSideFile bounds a side file read for the comparison (tokenizer.json is
// about 11 MB for Qwen).
const maxSideFile = 64 << 20

// compareSideFiles compares the container's copies of the checkpoint's
// side files (config.json, tokenizer and template files: every listed file
// that is neither the dense file, a layer file nor the manifest) with the
// source's, which the source reads through its own hash check (the Hub
// listing's or the cache's digest). A difference is a container problem
// naming the file; a side file the source lacks is a source problem.
func (v *verifier) compareSideFiles(ctx context.Context, src *Source, rep *DeepReport) {
	if src.ck == nil || v.man == nil || v.root == nil {
		return
	}
	var names []string
	for p := range v.man.Files {
		if p == qpack.DenseName || p == qpack.ManifestName || strings.HasPrefix(p, "packed_experts/") || strings.Contains(p, "/") {
			continue
		}
		names = append(names, p)
	}
	sort.Strings(names)
	for _, name := range names {
		mine, err := v.readSmall(name)
		if err != nil {
			continue // the inventory reports a missing or unreadable file
		}
		theirs, err := src.ck.ReadFile(ctx, name, maxSideFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			v.problem(Problem{Scope: ScopeSource, Kind: KindSource, File: name,
				Message: fmt.Sprintf("the container has %s but the source %s does not", name, src.Desc)})
			continue
		case err != nil:
			v.problem(Problem{Scope: ScopeSource, Kind: KindSource, File: name, Message: err.Error()})
			continue
		}
		rep.SideFiles++
		if !bytes.Equal(mine, theirs) {
			v.problem(Problem{Scope: ScopeContainer, Kind: KindMismatch, File: name,
				Message: fmt.Sprintf("differs from the source's %s (%d bytes, the source's %d)", name, len(mine), len(theirs))})
		}
	}
}

// readSmall reads a listed container file of at most maxSideFile bytes.
func (v *verifier) readSmall(name string) ([]byte, error) {
	f, err := v.root.Open(filepath.FromSlash(name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() > maxSideFile {
		return nil, fmt.Errorf("%s: not a small regular file", name)
	}
	return io.ReadAll(io.LimitReader(f, maxSideFile))
}

// mapProblem holds a problem found while mapping the container onto the
// source's headers until the headers are known to be the hashed bytes
// (flushMapProblems): a tampered header read must not blame the container.
func (v *verifier) mapProblem(p Problem) {
	v.mu.Lock()
	v.mapPending = append(v.mapPending, p)
	v.mu.Unlock()
}

// flushMapProblems reports the problems mapProblem held, unless a shard's
// header turned out not to be the hashed one: then the map said nothing
// about the container, and they are dropped with a note.
func (v *verifier) flushMapProblems() {
	v.mu.Lock()
	pending, bad := v.mapPending, v.headerBad
	v.mapPending = nil
	v.mu.Unlock()
	if bad {
		if len(pending) > 0 {
			v.note("%d difference(s) between the container and the source's headers not reported: a header read is not the hashed source", len(pending))
		}
		return
	}
	for _, p := range pending {
		v.problem(p)
	}
}

// cacheNote says, for a Hub source's shard read from the HF cache, which
// blob it was: a rerun would read the same damaged blob again.
func cacheNote(src *Source, sh *SourceShard) string {
	if src.Repo == "" || sh.path == "" {
		return ""
	}
	// The blob itself, not the snapshot link to it: a download relinks an
	// existing blob without hashing it, so removing the link alone would
	// not help.
	blob := sh.path
	if p, err := filepath.EvalSymlinks(blob); err == nil {
		blob = p
	}
	return fmt.Sprintf(" (read from the HF cache blob %s: remove it, or rerun online with --no-cache)", blob)
}
