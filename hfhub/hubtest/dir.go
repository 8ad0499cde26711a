package hubtest

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultLFSThreshold is the size from which LoadDir serves a file as LFS
// when .gitattributes does not say (the Hub requires LFS above 10 MiB).
const DefaultLFSThreshold = 10 << 20

// LoadDir reads repositories from dir, laid out as dir/<org>/<name>/… (each
// directory two levels down is one repository, served as its "main"
// branch). A file is LFS when its repository's top-level .gitattributes
// gives it "filter=lfs" (patterns without '/' match the base name at any
// depth, others the whole path, with path.Match syntax), or when it has at
// least lfsThreshold bytes (0 → DefaultLFSThreshold; negative → only
// .gitattributes decides); .gitattributes itself is always a regular file. Names starting with ".git" other than
// .gitattributes are skipped, as are symlinks. Files stay open and are read
// on demand.
func LoadDir(dir string, lfsThreshold int64) (map[string][]File, error) {
	if lfsThreshold == 0 {
		lfsThreshold = DefaultLFSThreshold
	}
	orgs, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	repos := map[string][]File{}
	for _, org := range orgs {
		if !org.IsDir() || strings.HasPrefix(org.Name(), ".") {
			continue
		}
		names, err := os.ReadDir(filepath.Join(dir, org.Name()))
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			if !name.IsDir() || strings.HasPrefix(name.Name(), ".") {
				continue
			}
			id := org.Name() + "/" + name.Name()
			files, err := loadRepo(filepath.Join(dir, org.Name(), name.Name()), lfsThreshold)
			if err != nil {
				return nil, fmt.Errorf("repository %s: %w", id, err)
			}
			repos[id] = files
		}
	}
	if len(repos) == 0 {
		return nil, fmt.Errorf("%s: no repositories (expected %s/<org>/<name>/ directories)", dir, dir)
	}
	return repos, nil
}

func loadRepo(root string, threshold int64) ([]File, error) {
	patterns, err := lfsPatterns(filepath.Join(root, ".gitattributes"))
	if err != nil {
		return nil, err
	}
	var files []File
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != root && strings.HasPrefix(name, ".git") && name != ".gitattributes" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		lfs := rel != ".gitattributes" && (matchesLFS(patterns, rel) || threshold > 0 && st.Size() >= threshold)
		files = append(files, File{Path: rel, Content: fileContent{f: f, size: st.Size()}, LFS: lfs})
		return nil
	})
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, err
}

func lfsPatterns(p string) ([]string, error) {
	f, err := os.Open(p)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		for _, a := range fields[1:] {
			if a == "filter=lfs" {
				out = append(out, fields[0])
				break
			}
		}
	}
	return out, sc.Err()
}

func matchesLFS(patterns []string, rel string) bool {
	for _, pat := range patterns {
		pat = strings.TrimPrefix(pat, "/")
		target := rel
		if !strings.Contains(pat, "/") {
			target = path.Base(rel)
		}
		if ok, _ := path.Match(pat, target); ok {
			return true
		}
	}
	return false
}

// AddRepos adds every repository LoadDir found, each public on "main".
func (s *Server) AddRepos(repos map[string][]File, opts RepoOptions) error {
	ids := make([]string, 0, len(repos))
	for id := range repos {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if _, err := s.AddRepo(id, repos[id], opts); err != nil {
			return fmt.Errorf("repository %s: %w", id, err)
		}
	}
	return nil
}
