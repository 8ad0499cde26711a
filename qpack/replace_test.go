package qpack

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qpack-go/qpack/internal/treehash"
)

// finishTiny writes the tiny container at dst (replacing a container there).
func finishTiny(t *testing.T, dst string) {
	t.Helper()
	w, err := Create(dst, tinyLayout(t), CreateOptions{Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	writeTiny(t, w, []int{0, 1})
	writeDense(t, w)
	if _, err := w.Finish(info); err != nil {
		t.Fatal(err)
	}
}

// TestReplaceRefusals: each destination below is not a container qpack may
// replace. CheckContainerDir, Create with Overwrite and ReplaceDir all
// refuse it with a *ReplaceError naming it and saying why, and it (and
// the directory around it) is byte for byte as it was.
func TestReplaceRefusals(t *testing.T) {
	good := filepath.Join(t.TempDir(), "good.qpack")
	finishTiny(t, good)
	copyContainer := func(t *testing.T, dst string) {
		must(t, os.MkdirAll(filepath.Join(dst, ExpertsDir), 0o755))
		for _, p := range append([]string{ManifestName}, containerFiles(t, good)...) {
			data, err := os.ReadFile(filepath.Join(good, filepath.FromSlash(p)))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(dst, filepath.FromSlash(p)), data, 0o644))
		}
	}
	cases := []struct {
		name   string
		make   func(t *testing.T, dst string)
		reason string
	}{
		{"ordinary directory", func(t *testing.T, dst string) {
			must(t, os.Mkdir(dst, 0o755))
			must(t, os.WriteFile(filepath.Join(dst, "thesis.tex"), []byte("years of work"), 0o644))
		}, "is not a qpack container (no manifest.json)"},
		{"empty directory", func(t *testing.T, dst string) { must(t, os.Mkdir(dst, 0o755)) }, "no manifest.json"},
		{"regular file", func(t *testing.T, dst string) { must(t, os.WriteFile(dst, []byte("data"), 0o644)) },
			"is a regular file, not a container directory"},
		{"symlink to a container", func(t *testing.T, dst string) { must(t, os.Symlink(good, dst)) },
			"is a symbolic link (to " + good},
		{"wrong magic", func(t *testing.T, dst string) {
			must(t, os.Mkdir(dst, 0o755))
			must(t, os.WriteFile(filepath.Join(dst, ManifestName), []byte(`{"magic":"NOTQPACK","version":1}`), 0o644))
		}, `has magic "NOTQPACK"`},
		{"no magic (some other manifest.json)", func(t *testing.T, dst string) {
			must(t, os.Mkdir(dst, 0o755))
			must(t, os.WriteFile(filepath.Join(dst, ManifestName), []byte(`{"name":"my-web-app","version":"1.0.0"}`), 0o644))
		}, "is not a qpack container"},
		{"manifest is not JSON", func(t *testing.T, dst string) {
			must(t, os.Mkdir(dst, 0o755))
			must(t, os.WriteFile(filepath.Join(dst, ManifestName), []byte("CACHE MANIFEST\n"), 0o644))
		}, "is not a JSON object"},
		{"unknown version", func(t *testing.T, dst string) {
			must(t, os.Mkdir(dst, 0o755))
			must(t, os.WriteFile(filepath.Join(dst, ManifestName), []byte(`{"magic":"QPACK","version":99}`), 0o644))
		}, "format version this qpack does not know (manifest.json: version 99, want 1)"},
		{"manifest is a directory", func(t *testing.T, dst string) {
			must(t, os.MkdirAll(filepath.Join(dst, ManifestName), 0o755))
		}, "manifest.json is a directory"},
		{"manifest is a FIFO", func(t *testing.T, dst string) {
			must(t, os.Mkdir(dst, 0o755))
			if err := mkfifo(filepath.Join(dst, ManifestName)); err != nil {
				t.Skip("no FIFOs here")
			}
		}, "manifest.json is a named pipe"},
		{"container holding a user file", func(t *testing.T, dst string) {
			copyContainer(t, dst)
			must(t, os.WriteFile(filepath.Join(dst, "notes.txt"), []byte("mine"), 0o644))
		}, "holds files that are not part of the container (notes.txt)"},
		{"container holding a symlink", func(t *testing.T, dst string) {
			copyContainer(t, dst)
			must(t, os.Symlink("/etc", filepath.Join(dst, ExpertsDir, "etc")))
		}, "(packed_experts/etc)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "out.qpack")
			c.make(t, dst)
			before := treehash.Must(t, parent)
			check := func(what string, err error) {
				t.Helper()
				var re *ReplaceError
				if !errors.As(err, &re) || !errors.Is(err, ErrNotReplaceable) {
					t.Fatalf("%s: error %v, want a *ReplaceError", what, err)
				}
				if !strings.Contains(err.Error(), dst) || !strings.Contains(err.Error(), c.reason) {
					t.Errorf("%s: %q does not name %s and say %q", what, err, dst, c.reason)
				}
				if after := treehash.Must(t, parent); after != before {
					t.Fatalf("%s changed the refused destination", what)
				}
			}
			check("CheckContainerDir", CheckContainerDir(dst))
			_, err := Create(dst, tinyLayout(t), CreateOptions{Overwrite: true})
			check("Create with Overwrite", err)

			// A finished temporary directory to put in its place.
			tmpParent := t.TempDir()
			tmpDst := filepath.Join(tmpParent, "x.qpack")
			finishTiny(t, tmpDst)
			check("ReplaceDir", ReplaceDir(tmpDst, dst))
			if _, err := Open(tmpDst); err != nil {
				t.Errorf("the refused ReplaceDir lost its source: %v", err)
			}
		})
	}
	// The container copied from good is replaceable (so the cases above are
	// refused for what was added to it).
	dst := filepath.Join(t.TempDir(), "copy.qpack")
	copyContainer(t, dst)
	if err := CheckContainerDir(dst); err != nil {
		t.Fatalf("a copy of a container: %v", err)
	}
}

func containerFiles(t *testing.T, dir string) []string {
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.Manifest.SortedFiles()
}

// TestReplaceContainer: a container is replaced; a damaged one too (its
// manifest still says QPACK, version 1); nothing is left beside it.
func TestReplaceContainer(t *testing.T) {
	parent := t.TempDir()
	dst := filepath.Join(parent, "out.qpack")
	finishTiny(t, dst)
	must(t, CheckContainerDir(dst))
	finishTiny(t, dst) // replaces it
	if _, err := Open(dst); err != nil {
		t.Fatal(err)
	}
	// What other commands write into a container belongs to it: the
	// receipt, and temporary files of an interrupted atomic write.
	must(t, os.WriteFile(filepath.Join(dst, "verified-install.json"), []byte("{}"), 0o644))
	must(t, os.WriteFile(filepath.Join(dst, ".verified-install.json.tmp-12345"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(dst, ExpertsDir, ".layout.json.tmp-99"), nil, 0o644))
	must(t, CheckContainerDir(dst))
	for _, alien := range []string{".notes.tmp-1", ".verified-install.json.tmp-x", "verified-install.json.tmp-1", ".git"} {
		p := filepath.Join(dst, alien)
		must(t, os.WriteFile(p, nil, 0o644))
		if err := CheckContainerDir(dst); !errors.Is(err, ErrNotReplaceable) || !strings.Contains(err.Error(), alien) {
			t.Errorf("a container holding %s: %v", alien, err)
		}
		must(t, os.Remove(p))
	}
	finishTiny(t, dst)
	// Damaged past parsing, identity intact.
	must(t, os.WriteFile(filepath.Join(dst, ManifestName), []byte(`{"magic":"QPACK","version":1,"files":"garbage"}`), 0o644))
	must(t, CheckContainerDir(dst))
	finishTiny(t, dst)
	if _, err := Open(dst); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(parent)
	must(t, err)
	if len(entries) != 1 {
		t.Errorf("left beside the container: %v", entries)
	}
}

// TestPartialMarker: Create marks its temporary directory, Finish removes
// the marker; CheckPartialDir accepts a marked directory or a finished
// container and refuses anything else.
func TestPartialMarker(t *testing.T) {
	parent := t.TempDir()
	dst := filepath.Join(parent, "out.qpack")
	w, err := Create(dst, tinyLayout(t), CreateOptions{})
	must(t, err)
	if err := CheckPartialDir(dst + ".partial"); err != nil {
		t.Fatalf("Create's temporary directory: %v", err)
	}
	writeTiny(t, w, []int{0, 1})
	writeDense(t, w)
	if _, err := w.Finish(info); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dst, PartialMarker)); !os.IsNotExist(err) {
		t.Errorf("the marker is in the finished container: %v", err)
	}
	if err := CheckPartialDir(dst); err != nil {
		t.Errorf("a finished container (killed before its rename): %v", err)
	}
	user := filepath.Join(parent, "mine.qpack.partial")
	must(t, os.Mkdir(user, 0o755))
	must(t, os.WriteFile(filepath.Join(user, "data"), []byte("x"), 0o644))
	if err := CheckPartialDir(user); !errors.Is(err, ErrNotReplaceable) || !strings.Contains(err.Error(), "is not a partial container qpack made (it has no .qpack-partial marker)") {
		t.Errorf("a user's directory named like a partial one: %v", err)
	}
	// A marker that is a directory does not count.
	must(t, os.Mkdir(filepath.Join(user, PartialMarker), 0o755))
	if err := CheckPartialDir(user); !errors.Is(err, ErrNotReplaceable) {
		t.Errorf("a marker that is a directory: %v", err)
	}
	link := filepath.Join(parent, "link.partial")
	must(t, os.Symlink(dst, link))
	if err := CheckPartialDir(link); !errors.Is(err, ErrNotReplaceable) {
		t.Errorf("a symlink: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
