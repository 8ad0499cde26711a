package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/qpack-go/qpack/hfhub"
	"github.com/qpack-go/qpack/runtime"
	"github.com/qpack-go/qpack/runtime/runner"
)

// modelRef is a MODEL argument resolved to a directory: the argument as
// given, and, when it named a Hub repository, the snapshot of it found in
// the Hugging Face cache.
type modelRef struct {
	Arg      string `json:"arg"`
	Path     string `json:"path"`
	Repo     string `json:"repo,omitempty"`
	Revision string `json:"revision,omitempty"`
	Commit   string `json:"commit,omitempty"`
}

// resolveModel turns a MODEL argument (of generate, chat, logits, serve)
// into the directory to load: an existing path is used as it is (a .qpack
// container or an MLX checkpoint directory); otherwise an argument that is
// a Hub repository id ("org/name") names the snapshot of revision
// (default main: refs/main, or a 40-hex commit) in the official cache
// (HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub), which must hold
// a complete checkpoint. Nothing is written and nothing is fetched. Its
// errors carry exit code 2 and say how to get what is missing.
func resolveModel(arg, revision string) (*modelRef, error) {
	return resolveModelIn(arg, revision, "")
}

// resolveModelIn is resolveModel with the cache root given (--cache-dir;
// "" is the official one).
func resolveModelIn(arg, revision, cacheDir string) (*modelRef, error) {
	root := cacheDir
	if root == "" {
		root = hfhub.HubCacheDir()
	}
	ref := &modelRef{Arg: arg, Path: arg}
	if arg == "" {
		return nil, withCode(2, errors.New("MODEL is empty"))
	}
	_, statErr := os.Stat(arg)
	repoLike := errors.Is(statErr, fs.ErrNotExist) && looksLikeRepoID(arg)
	if repoLike && !strings.Contains(arg, "/") {
		// A one-part name is a repository only if the cache has it.
		st, err := os.Stat(filepath.Join(root, hfhub.RepoFolderName(arg)))
		repoLike = err == nil && st.IsDir()
	}
	if !repoLike {
		if revision != "" {
			return nil, withCode(2, fmt.Errorf("--revision %s: MODEL %s is a path, not a Hub repository id", revision, arg))
		}
		if err := runner.CheckModelPath(arg); err != nil {
			return nil, withCode(2, err)
		}
		return ref, nil
	}
	if err := hfhub.ValidateRepoID(arg); err != nil {
		return nil, withCode(2, fmt.Errorf("MODEL %s: no such file or directory, and not a Hub repository id: %v", arg, err))
	}
	snap, err := cachedSnapshot(root, arg, revision)
	if err != nil {
		return nil, withCode(2, err)
	}
	ref.Path, ref.Repo, ref.Revision, ref.Commit = snap.dir, arg, snap.revision, snap.commit
	return ref, nil
}

// looksLikeRepoID: "org/name" or "name" with no path syntax of its own
// (no leading "/", "." or "~", no backslash, at most one "/", not at the end).
func looksLikeRepoID(s string) bool {
	if strings.ContainsAny(s[:1], "/.~") || strings.Contains(s, `\`) || strings.HasSuffix(s, "/") {
		return false
	}
	return strings.Count(s, "/") <= 1
}

func getHint(repo string) string {
	name := repo[strings.LastIndex(repo, "/")+1:]
	return fmt.Sprintf("get it with `qpack download %s` to run the checkpoint, or `qpack repack --from-hf %s --output %s.qpack` to build a container and run that", repo, repo, name)
}

type snapshot struct {
	dir, revision, commit string
}

// maxRefSize bounds a refs/ file (a commit id and a newline).
const maxRefSize = 256

// cachedSnapshot finds repo's snapshot for revision ("" is main) under the
// cache root and checks that it holds a checkpoint that can be loaded.
func cachedSnapshot(root, repo, revision string) (*snapshot, error) {
	repoDir := filepath.Join(root, hfhub.RepoFolderName(repo))
	if st, err := os.Stat(repoDir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("MODEL %s: no such file or directory, and no repository %s in the Hugging Face cache %s: %s", repo, repo, root, getHint(repo))
	}
	rev := revision
	if rev == "" {
		rev = "main"
	}
	if err := hfhub.ValidateRepoPath(rev); err != nil || len(rev) > 255 {
		return nil, fmt.Errorf("--revision %q: not a branch, tag or commit name", revision)
	}
	commit := rev
	if !isCommitID(rev) {
		refPath := filepath.Join(repoDir, "refs", filepath.FromSlash(rev))
		data, err := readSmallFile(refPath, maxRefSize)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s@%s in the Hugging Face cache: %w", repo, rev, err)
		}
		if err != nil {
			snaps := listDir(filepath.Join(repoDir, "snapshots"))
			hint := "no snapshot is cached"
			if len(snaps) > 0 {
				hint = fmt.Sprintf("cached snapshots: %s (pass one with --revision)", strings.Join(snaps, ", "))
			}
			return nil, fmt.Errorf("%s@%s is not in the Hugging Face cache %s (no refs/%s; %s): %s", repo, rev, root, rev, hint, getHint(repo))
		}
		commit = strings.TrimSpace(string(data))
		if !isCommitID(commit) {
			return nil, fmt.Errorf("%s: holds %q, not a 40-hex commit id", refPath, commit)
		}
	}
	dir := filepath.Join(repoDir, "snapshots", commit)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%s@%s: the Hugging Face cache %s has no snapshot %s: %s", repo, rev, root, commit, getHint(repo))
	}
	if err := checkSnapshot(dir, repo, rev); err != nil {
		return nil, err
	}
	return &snapshot{dir: dir, revision: rev, commit: commit}, nil
}

func isCommitID(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// checkSnapshot refuses, before anything loads, a cached snapshot that
// cannot run: a prebuilt container (its files are links into the cache's
// blobs, which a container may not hold), or a checkpoint that lacks its
// config, tokenizer or one of the shards its index names (a download that
// did not finish, or one limited with --include).
func checkSnapshot(dir, repo, rev string) error {
	at := repo + "@" + rev
	if runtime.IsContainer(dir) {
		name := repo[strings.LastIndex(repo, "/")+1:]
		return fmt.Errorf("%s in the Hugging Face cache (%s) is a prebuilt .qpack container, whose files there are links into the cache's blobs, which a container may not hold: fetch it as a container with `qpack repack --from-hf %s --output %s.qpack` and run that", at, dir, repo, name)
	}
	var missing []string
	for _, f := range []string{"config.json", "tokenizer.json"} {
		if !isFile(filepath.Join(dir, f)) {
			missing = append(missing, f)
		}
	}
	shards, err := indexShards(filepath.Join(dir, "model.safetensors.index.json"))
	switch {
	case err != nil:
		return err
	case shards == nil:
		shards = []string{"model.safetensors"}
	}
	for _, s := range shards {
		if !isFile(filepath.Join(dir, filepath.FromSlash(s))) {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s in the Hugging Face cache (%s) is incomplete: it lacks %s; complete it with `qpack download %s`", at, dir, strings.Join(missing, ", "), repo)
	}
	return nil
}

// indexShards lists the shard files of a model.safetensors.index.json
// (nil without one).
func indexShards(path string) ([]string, error) {
	data, err := readSmallFile(path, 64<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseIndexShards(path, data)
}

// parseIndexShards lists, sorted and without duplicates, the shard files
// the weight_map of an index file names; each must be a safe relative
// path.
func parseIndexShards(path string, data []byte) ([]string, error) {
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	var out []string
	for _, f := range idx.WeightMap {
		if err := hfhub.ValidateRepoPath(f); err != nil {
			return nil, fmt.Errorf("%s: weight_map: %v", path, err)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: empty weight_map", path)
	}
	slices.Sort(out)
	return out, nil
}

// isFile follows links (a snapshot's files are links into blobs/): a
// dangling link is not a file.
func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func listDir(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// readSmallFile reads at most limit bytes of path, refusing a larger file
// and anything but a regular file (a FIFO would block the open).
func readSmallFile(path string, limit int64) ([]byte, error) {
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", path, limit)
	}
	return data, nil
}
