package repack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/internal/tinymodel"
	"github.com/qpack-go/qpack/internal/treehash"
	"github.com/qpack-go/qpack/qpack"
)

// outputSource returns a private copy of a tiny checkpoint under a new
// directory (so a test may put outputs beside or inside it).
func outputSource(t *testing.T) (root, src string) {
	t.Helper()
	v := tinymodel.Variants()[0]
	root = t.TempDir()
	src = filepath.Join(root, "ckpt")
	copyDir(t, tiny(t, v.Name, v.Spec), src)
	return root, src
}

func outputOpts(src, out string, overwrite bool) Options {
	return Options{FromDir: src, Output: out, Overwrite: overwrite, Reserve: -1, RangeSize: 16 << 10, TileSize: 4 << 10, ToolVersion: "test"}
}

// refused runs the repack, requires an *OutputError naming path and saying
// why, and requires every tree in keep to be byte for byte unchanged.
func refused(t *testing.T, o Options, path, why string, keep ...string) {
	t.Helper()
	before := make([]string, len(keep))
	for i, k := range keep {
		before[i] = treehash.Must(t, k)
	}
	_, err := Run(context.Background(), o)
	var oe *OutputError
	if !errors.As(err, &oe) || !errors.Is(err, ErrUnsafeOutput) {
		t.Fatalf("repack %s -> %s: error %v, want an *OutputError", o.FromDir, o.Output, err)
	}
	if oe.Path != path || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), why) {
		t.Errorf("error %q (path %s) does not name %s and say %q", err, oe.Path, path, why)
	}
	for i, k := range keep {
		if after := treehash.Must(t, k); after != before[i] {
			t.Errorf("%s changed although the repack was refused", k)
		}
	}
}

func TestOutputRefused(t *testing.T) {
	cases := []struct {
		name string
		// setup returns the options and the path the refusal must name.
		setup func(t *testing.T, root, src string) (Options, string)
		why   string
	}{
		{"ordinary directory", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(root, "out.qpack")
			must(t, os.Mkdir(out, 0o755))
			must(t, os.WriteFile(filepath.Join(out, "thesis.tex"), []byte("years of work"), 0o644))
			return outputOpts(src, out, true), out
		}, "--overwrite replaces only a qpack container, and it is not a qpack container (no manifest.json)"},
		{"regular file", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(root, "out.qpack")
			must(t, os.WriteFile(out, []byte("data"), 0o644))
			return outputOpts(src, out, true), out
		}, "it is a regular file, not a container directory"},
		{"another program's manifest.json", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(root, "site")
			must(t, os.Mkdir(out, 0o755))
			must(t, os.WriteFile(filepath.Join(out, "manifest.json"), []byte(`{"name":"app","icons":[]}`), 0o644))
			return outputOpts(src, out, true), out
		}, "is not a qpack container (manifest.json has magic"},
		{"unknown format version", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(root, "future.qpack")
			must(t, os.Mkdir(out, 0o755))
			must(t, os.WriteFile(filepath.Join(out, "manifest.json"), []byte(`{"magic":"QPACK","version":7}`), 0o644))
			return outputOpts(src, out, true), out
		}, "format version this qpack does not know"},
		{"the source itself", func(t *testing.T, root, src string) (Options, string) {
			return outputOpts(src, src, true), src
		}, "it is the source directory " + "SRC"},
		{"the source itself, without --overwrite", func(t *testing.T, root, src string) (Options, string) {
			return outputOpts(src, src, false), src
		}, "it is the source directory"},
		{"the source through a symlink", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(root, "alias.qpack")
			must(t, os.Symlink(src, out))
			return outputOpts(src, out, true), out
		}, "it is the source directory"},
		{"the source named through a symlink", func(t *testing.T, root, src string) (Options, string) {
			alias := filepath.Join(root, "alias")
			must(t, os.Symlink(src, alias))
			return outputOpts(alias, src, true), src
		}, "it is the source directory " + "ALIAS"},
		{"inside the source", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(src, "out.qpack")
			return outputOpts(src, out, false), out
		}, "it lies inside the source directory"},
		{"inside the source through a symlinked parent", func(t *testing.T, root, src string) (Options, string) {
			alias := filepath.Join(root, "alias")
			must(t, os.Symlink(src, alias))
			out := filepath.Join(alias, "out.qpack")
			return outputOpts(src, out, false), out
		}, "it lies inside the source directory"},
		{"containing the source", func(t *testing.T, root, src string) (Options, string) {
			return outputOpts(src, root, true), root
		}, "it contains the source directory"},
		{"the source has the output's partial name", func(t *testing.T, root, src string) (Options, string) {
			part := filepath.Join(root, "x.partial")
			must(t, os.Rename(src, part))
			return outputOpts(part, filepath.Join(root, "x"), false), part
		}, "it is the source directory"},
		{"a partial directory qpack did not make", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(root, "out.qpack")
			part := out + ".partial"
			must(t, os.Mkdir(part, 0o755))
			must(t, os.WriteFile(filepath.Join(part, "draft.txt"), []byte("mine"), 0o644))
			return outputOpts(src, out, false), part
		}, "a repack would resume into it or remove it, and it is not a partial container qpack made (it has no .qpack-partial marker)"},
		{"a partial directory qpack did not make, with --discard-partial", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(root, "out.qpack")
			part := out + ".partial"
			must(t, os.Mkdir(part, 0o755))
			must(t, os.WriteFile(filepath.Join(part, "draft.txt"), []byte("mine"), 0o644))
			o := outputOpts(src, out, true)
			o.DiscardPartial = true
			return o, part
		}, "it has no .qpack-partial marker"},
		{"a file where the lock goes", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(root, "out.qpack")
			must(t, os.WriteFile(out+".lock", []byte("my notes"), 0o644))
			return outputOpts(src, out, false), out + ".lock"
		}, "the lock file repack takes (and removes when done) exists"},
		{"a symlink to a container", func(t *testing.T, root, src string) (Options, string) {
			real := filepath.Join(root, "real.qpack")
			runDir(t, src, real, nil)
			out := filepath.Join(root, "link.qpack")
			must(t, os.Symlink(real, out))
			return outputOpts(src, out, true), out
		}, "it is a symbolic link (to "},
		{"a container holding a user's file", func(t *testing.T, root, src string) (Options, string) {
			out := filepath.Join(root, "out.qpack")
			runDir(t, src, out, nil)
			must(t, os.WriteFile(filepath.Join(out, "README.md"), []byte("my notes"), 0o644))
			return outputOpts(src, out, true), out
		}, "it holds files that are not part of the container (README.md)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root, src := outputSource(t)
			o, path := c.setup(t, root, src)
			why := strings.NewReplacer("SRC", src, "ALIAS", filepath.Join(root, "alias")).Replace(c.why)
			// The whole tree around output and source is unchanged.
			refused(t, o, path, why, root)
		})
	}
}

// TestOutputCacheSnapshot: a source laid out like a Hugging Face cache
// snapshot (shards are symlinks into blobs/) protects blobs/ too: an output
// that contains it is refused; one beside the snapshot is fine.
func TestOutputCacheSnapshot(t *testing.T) {
	root, flat := outputSource(t)
	store := filepath.Join(root, "store")
	blobs := filepath.Join(store, "blobs")
	snap := filepath.Join(root, "hub", "models--org--tiny", "snapshots", strings.Repeat("a", 40))
	must(t, os.MkdirAll(blobs, 0o755))
	must(t, os.MkdirAll(snap, 0o755))
	ents, err := os.ReadDir(flat)
	must(t, err)
	for i, e := range ents {
		blob := filepath.Join(blobs, "blob"+string(rune('a'+i)))
		must(t, os.Rename(filepath.Join(flat, e.Name()), blob))
		rel, err := filepath.Rel(snap, blob)
		must(t, err)
		must(t, os.Symlink(rel, filepath.Join(snap, e.Name())))
	}
	// A container-looking output that contains blobs/ (but not the
	// snapshot) would be replaced with --overwrite: the manifest is there to
	// get past that check.
	must(t, os.WriteFile(filepath.Join(store, "manifest.json"), []byte(`{"magic":"QPACK","version":1}`), 0o644))
	refused(t, outputOpts(snap, store, true), store, "it contains the directory "+blobs, root)

	out := filepath.Join(root, "tiny.qpack")
	runDir(t, snap, out, nil)
	if _, err := qpack.Open(out); err != nil {
		t.Fatal(err)
	}
}

// TestOutputSameFile: the same directory reached by another path (a bind
// mount, a case-insensitive name) is recognised by its identity, not its
// spelling.
func TestOutputSameFile(t *testing.T) {
	dir := t.TempDir()
	st, err := os.Stat(dir)
	must(t, err)
	p := dirRef{what: "the source", real: "/elsewhere/by/another/name", st: st, inside: true}
	if got := relation(dir, p); got != "it is the source" {
		t.Errorf("the same directory: %q", got)
	}
	if got := relation(filepath.Join(dir, "sub", "out.qpack"), p); got != "it lies inside the source" {
		t.Errorf("a path inside it: %q", got)
	}
	// dir contains child, though the spelled paths share nothing.
	child := filepath.Join(dir, "child")
	must(t, os.Mkdir(child, 0o755))
	cst, err := os.Stat(child)
	must(t, err)
	alias := filepath.Join(t.TempDir(), "mount")
	must(t, os.Symlink(dir, alias)) // stands in for a second mount of dir
	p = dirRef{what: "the source", real: filepath.Join(alias, "child"), st: cst, inside: true}
	if got := relation(dir, p); got != "it contains the source" {
		t.Errorf("a parent of it: %q", got)
	}
	if got := relation(filepath.Join(t.TempDir(), "out.qpack"), p); got != "" {
		t.Errorf("an unrelated path: %q", got)
	}
}

// TestOutputOverwriteContainer: --overwrite replaces a container (and a
// partial left by a killed run is qpack's to discard); nothing is left
// beside the output.
func TestOutputOverwriteContainer(t *testing.T) {
	root, src := outputSource(t)
	out := filepath.Join(root, "out.qpack")
	runDir(t, src, out, nil)
	// Mark the old container (a file it lists, changed) so that the
	// replacement shows.
	cfg := filepath.Join(out, "config.json")
	must(t, os.WriteFile(cfg, []byte(`{"old":true}`), 0o644))
	res := runDir(t, src, out, func(o *Options) { o.Overwrite = true })
	if res.AlreadyComplete {
		t.Fatal("--overwrite kept the old container")
	}
	if data, err := os.ReadFile(cfg); err != nil || string(data) == `{"old":true}` {
		t.Fatalf("the old container's config.json is still there (%v)", err)
	}
	c, err := qpack.Open(out)
	must(t, err)
	c.Close()
	ents, err := os.ReadDir(root)
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "ckpt out.qpack" {
		t.Errorf("beside the output after --overwrite: %v", names)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestOutputInsideHubCache: a Hub repo is read from its folder in the cache,
// so an output inside that folder is refused; without the folder (nothing
// cached) or with NoCache there is nothing to protect.
func TestOutputInsideHubCache(t *testing.T) {
	cache := t.TempDir()
	repo := filepath.Join(cache, "models--org--tiny")
	must(t, os.MkdirAll(filepath.Join(repo, "blobs"), 0o755))
	out := filepath.Join(repo, "snapshots", "out.qpack")
	must(t, os.MkdirAll(filepath.Dir(out), 0o755))
	o := Options{FromHF: "org/tiny", CacheDir: cache}
	err := checkOutput(out, false, sourceDirs(o)...)
	if !errors.Is(err, ErrUnsafeOutput) || !strings.Contains(err.Error(), repo) {
		t.Fatalf("output inside the cached repo: err = %v", err)
	}
	o.NoCache = true
	if err := checkOutput(out, false, sourceDirs(o)...); err != nil {
		t.Fatalf("NoCache: %v", err)
	}
	other := Options{FromHF: "org/other", CacheDir: cache}
	if err := checkOutput(filepath.Join(cache, "x.qpack"), false, sourceDirs(other)...); err != nil {
		t.Fatalf("nothing cached: %v", err)
	}
}
