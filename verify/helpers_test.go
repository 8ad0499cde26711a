package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/qpack-go/qpack/qpack"
	"github.com/qpack-go/qpack/repack"
	"github.com/qpack-go/qpack/safetensors"
)

// The containers under test are made by the repack from the committed tiny
// checkpoints, once per test binary, then copied for each test so a test
// may damage its copy.
var (
	builtMu sync.Mutex
	built   = map[string]string{}
	buildTo string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "verify-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildTo = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func tinyDir(name string) string { return filepath.Join("..", "testdata", "tiny", name) }

// fixture is a container and the checkpoint it was made from, both copies
// the test owns.
type fixture struct {
	src       string // checkpoint directory
	dir       string // container
	layout    *qpack.Layout
	manifest  *qpack.Manifest
	dense     *safetensors.Header
	ckptShard []string // shard files of the checkpoint, sorted
}

func newFixture(t testing.TB, ckpt string) *fixture {
	t.Helper()
	builtMu.Lock()
	pristine, ok := built[ckpt]
	if !ok {
		pristine = filepath.Join(buildTo, ckpt+".qpack")
		_, err := repack.Run(context.Background(), repack.Options{FromDir: tinyDir(ckpt), Output: pristine, Reserve: -1, ToolVersion: "verify-test"})
		if err != nil {
			builtMu.Unlock()
			t.Fatalf("repack %s: %v", ckpt, err)
		}
		built[ckpt] = pristine
	}
	builtMu.Unlock()
	base := t.TempDir()
	f := &fixture{src: filepath.Join(base, ckpt), dir: filepath.Join(base, ckpt+".qpack")}
	copyDir(t, tinyDir(ckpt), f.src)
	copyDir(t, pristine, f.dir)
	c, err := qpack.Open(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	f.layout, f.manifest, f.dense = c.Layout, c.Manifest, c.Dense
	c.Close()
	ents, _ := filepath.Glob(filepath.Join(f.src, "*.safetensors"))
	for _, e := range ents {
		f.ckptShard = append(f.ckptShard, filepath.Base(e))
	}
	return f
}

func copyDir(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// flip XORs the byte at off of file rel (inside dir) with x and returns a
// function that undoes it.
func flip(t *testing.T, dir, rel string, off int64, x byte) func() {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	fl, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	var b [1]byte
	if _, err := fl.ReadAt(b[:], off); err != nil {
		t.Fatalf("flip %s@%d: %v", rel, off, err)
	}
	b[0] ^= x
	if _, err := fl.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	return func() {
		b[0] ^= x
		fl, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fl.Close()
		if _, err := fl.WriteAt(b[:], off); err != nil {
			t.Fatal(err)
		}
	}
}

func run(t *testing.T, dir string, o Options) *Report {
	t.Helper()
	o.Workers = max(o.Workers, 2)
	if o.BlockSize == 0 {
		o.BlockSize = 64 << 10 // several blocks per layer file, so block edges are exercised
	}
	r, _ := Verify(context.Background(), dir, o)
	if r == nil {
		t.Fatal("nil report")
	}
	return r
}

func dump(r *Report) string {
	b, _ := json.MarshalIndent(r, "", "  ")
	return string(b)
}

func wantStatus(t *testing.T, r *Report, s Status) {
	t.Helper()
	if r.Status != s {
		t.Fatalf("status %s, want %s\n%s", r.Status, s, dump(r))
	}
}

// onlyFile fails unless every container problem names file.
func onlyFile(t *testing.T, r *Report, file string) {
	t.Helper()
	for _, p := range r.ContainerProblems() {
		if p.File != file {
			t.Fatalf("problem names %s, want only %s: %s\n%s", p.File, file, p, dump(r))
		}
	}
}

// find returns the problems matching pred.
func find(r *Report, pred func(Problem) bool) []Problem {
	var out []Problem
	for _, p := range r.Problems {
		if pred(p) {
			out = append(out, p)
		}
	}
	return out
}

func is(p *int, v int) bool { return p != nil && *p == v }

// editManifest rewrites manifest.json with fn applied to its text.
func editManifest(t *testing.T, dir string, fn func(string) string) {
	t.Helper()
	p := filepath.Join(dir, qpack.ManifestName)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	out := fn(string(data))
	if out == string(data) {
		t.Fatal("editManifest: no change")
	}
	if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// otherHex changes the first character of a hex digest.
func otherHex(d string) string {
	c := "0"
	if strings.HasPrefix(d, "0") {
		c = "1"
	}
	return c + d[1:]
}
