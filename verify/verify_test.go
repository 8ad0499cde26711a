package verify

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/qpack"
	"github.com/zeebo/blake3"
)

const next = "qwen3_next-q4g64"

func TestIntactPassesAndReceipt(t *testing.T) {
	f := newFixture(t, next)
	for _, quick := range []bool{false, true} {
		r := run(t, f.dir, Options{Full: !quick})
		wantStatus(t, r, StatusOK)
		if r.ExitCode() != 0 || len(r.Problems) != 0 || !r.DigestsRecorded || r.LayerFileDigests == quick {
			t.Fatalf("quick=%v: %s", quick, dump(r))
		}
		if len(r.Files) != len(f.manifest.Files) {
			t.Fatalf("%d file results for %d files", len(r.Files), len(f.manifest.Files))
		}
		var total int64
		for _, fr := range r.Files {
			total += fr.Size
			_, layer := parseLayerFile(fr.Path)
			want := CheckFileDigest
			if layer {
				want = map[bool]string{false: CheckBoth, true: CheckExpertDigests}[quick]
			}
			if !fr.OK || fr.Check != want {
				t.Fatalf("quick=%v: %+v, want check %s", quick, fr, want)
			}
		}
		if r.BytesHashed != total {
			t.Fatalf("hashed %d bytes, the files hold %d", r.BytesHashed, total)
		}
	}

	r := run(t, f.dir, Options{})
	rc, err := NewReceipt(r, "test", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(f.dir, ReceiptName)
	if err := WriteReceipt(path, rc); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got Receipt
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	mdata, _ := os.ReadFile(filepath.Join(f.dir, qpack.ManifestName))
	msum := blake3.Sum256(mdata)
	if got.ManifestDigest != hex.EncodeToString(msum[:]) || got.VerifiedAt != "2025-01-02T03:04:05Z" || len(got.Files) != len(f.manifest.Files) {
		t.Fatalf("receipt: %s", data)
	}
	// Every digest in the receipt is the file's BLAKE3, hashed here
	// independently, and its size the file's size.
	for p, rf := range got.Files {
		b, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		sum := blake3.Sum256(b)
		if rf.Digest != hex.EncodeToString(sum[:]) || rf.Size != int64(len(b)) {
			t.Fatalf("receipt %s: %+v, file has %d bytes, BLAKE3 %x", p, rf, len(b), sum)
		}
	}
	// The receipt is not part of the container: a second run is still
	// clean and does not list it as an extra file.
	r = run(t, f.dir, Options{})
	wantStatus(t, r, StatusOK)
	if len(r.ExtraFiles) != 0 {
		t.Fatalf("extra files %v", r.ExtraFiles)
	}
	if entries, _ := filepath.Glob(filepath.Join(f.dir, ".*")); len(entries) != 0 {
		t.Fatalf("temporary files left: %v", entries)
	}
	// After a verification, any change to manifest.json is caught through
	// the receipt's digest of it, even in free text no digest covers.
	undoM := flip(t, f.dir, qpack.ManifestName, int64(strings.Index(string(mdata), "verify-test")+3), 1)
	r = run(t, f.dir, Options{})
	wantStatus(t, r, StatusDamaged)
	if got := find(r, func(p Problem) bool { return p.Kind == KindManifest && p.File == qpack.ManifestName }); len(got) != 1 || r.VerifiedBefore != "2025-01-02T03:04:05Z" {
		t.Fatal(dump(r))
	}
	undoM()
	undoM = flip(t, f.dir, qpack.ManifestName, 0, 0x10) // '{' -> 'k': no longer JSON
	r = run(t, f.dir, Options{})
	wantStatus(t, r, StatusDamaged)
	if r.Error == "" || len(find(r, func(p Problem) bool { return p.Kind == KindManifest })) != 1 {
		t.Fatal(dump(r))
	}
	undoM()

	// No receipt for a damaged container.
	undo := flip(t, f.dir, "config.json", 3, 1)
	defer undo()
	if _, err := NewReceipt(run(t, f.dir, Options{}), "test", time.Now()); err == nil {
		t.Fatal("receipt for a damaged container")
	}
}

// TestFlippedByteSweep flips single bytes all over every file of the
// container and checks each is caught and named: the file, and for layer
// files the layer and expert the byte belongs to.
func TestFlippedByteSweep(t *testing.T) {
	f := newFixture(t, next)
	// Runs of three experts, so layer files are split over several jobs.
	defer func(n int64) { runBytes = n }(runBytes)
	runBytes = 3 * f.layout.ExpertStride
	rng := rand.New(rand.NewPCG(1, 2))
	stride := f.layout.ExpertStride
	for _, p := range f.manifest.SortedFiles() {
		size := f.manifest.Files[p]
		offs := []int64{0, size - 1, size / 2}
		for i := 0; i < 6; i++ {
			offs = append(offs, rng.Int64N(size))
		}
		layer, isLayer := parseLayerFile(p)
		for i, off := range offs {
			quick := i%2 == 1
			undo := flip(t, f.dir, p, off, 0x20)
			r := run(t, f.dir, Options{Full: !quick})
			undo()
			wantStatus(t, r, StatusDamaged)
			if r.ExitCode() != 1 {
				t.Fatalf("exit code %d", r.ExitCode())
			}
			onlyFile(t, r, p)
			if isLayer {
				e := int(off / stride)
				hit := find(r, func(pr Problem) bool {
					return pr.Kind == KindExpertDigest && is(pr.Layer, layer) && is(pr.Expert, e)
				})
				if len(hit) != 1 {
					t.Fatalf("%s byte %d (quick=%v): want one expert-digest problem for layer %d expert %d\n%s", p, off, quick, layer, e, dump(r))
				}
				// Bytes outside the sections are padding: named with
				// their exact offset.
				in := off % stride
				if in >= f.layout.Payload() {
					pad := find(r, func(pr Problem) bool {
						return pr.Kind == KindPadding && is(pr.Layer, layer) && is(pr.Expert, e) && pr.Offset != nil && *pr.Offset == off
					})
					if len(pad) != 1 {
						t.Fatalf("%s byte %d: padding not reported at its offset\n%s", p, off, dump(r))
					}
				}
			} else if len(find(r, func(pr Problem) bool { return pr.Kind == KindDigest && pr.File == p })) != 1 {
				t.Fatalf("%s byte %d: no digest problem\n%s", p, off, dump(r))
			}
		}
	}
	wantStatus(t, run(t, f.dir, Options{}), StatusOK)
}

func TestManifestDamage(t *testing.T) {
	f := newFixture(t, next)
	ext := f.manifest.Ext
	t.Run("magic", func(t *testing.T) {
		f := newFixture(t, next)
		editManifest(t, f.dir, func(s string) string { return strings.Replace(s, `"QPACK"`, `"QPACL"`, 1) })
		r, err := Verify(context.Background(), f.dir, Options{})
		if !errors.Is(err, qpack.ErrNotContainer) || r.ExitCode() != 2 {
			t.Fatalf("err %v, exit %d", err, r.ExitCode())
		}
	})
	t.Run("syntax", func(t *testing.T) {
		f := newFixture(t, next)
		editManifest(t, f.dir, func(s string) string { return strings.Replace(s, `"files": {`, `"files": [`, 1) })
		r, err := Verify(context.Background(), f.dir, Options{})
		if err == nil || r.Status != StatusUnusable || !strings.Contains(err.Error(), qpack.ManifestName) {
			t.Fatalf("err %v, status %s", err, r.Status)
		}
	})
	t.Run("version", func(t *testing.T) {
		f := newFixture(t, next)
		editManifest(t, f.dir, func(s string) string { return strings.Replace(s, `"version": 1`, `"version": 2`, 1) })
		r, err := Verify(context.Background(), f.dir, Options{})
		if !errors.Is(err, qpack.ErrUnsupportedVersion) || r.ExitCode() != 2 {
			t.Fatalf("err %v, exit %d", err, r.ExitCode())
		}
	})
	t.Run("size", func(t *testing.T) {
		f := newFixture(t, next)
		n := f.manifest.Files["config.json"]
		editManifest(t, f.dir, func(s string) string {
			return strings.Replace(s, `"config.json": `+itoa(n), `"config.json": `+itoa(n+1), 1)
		})
		r := run(t, f.dir, Options{})
		wantStatus(t, r, StatusDamaged)
		if len(find(r, func(p Problem) bool { return p.Kind == KindSize && p.File == "config.json" })) != 1 {
			t.Fatal(dump(r))
		}
	})
	// A damaged layer-file digest: the expert digests vouch for the data,
	// so the manifest entry is named as the culprit (full mode).
	t.Run("fileDigest", func(t *testing.T) {
		f := newFixture(t, next)
		p := qpack.LayerFile(1)
		d := ext.FileDigests[p]
		editManifest(t, f.dir, func(s string) string { return strings.Replace(s, d, otherHex(d), 1) })
		r := run(t, f.dir, Options{Full: true})
		wantStatus(t, r, StatusDamaged)
		hit := find(r, func(pr Problem) bool {
			return pr.Kind == KindManifest && pr.File == qpack.ManifestName && strings.Contains(pr.Key, p)
		})
		if len(hit) != 1 || len(r.ContainerProblems()) != 1 {
			t.Fatal(dump(r))
		}
	})
	t.Run("expertDigest", func(t *testing.T) {
		f := newFixture(t, next)
		p := qpack.LayerFile(2)
		d := ext.ExpertDigests[p][3]
		editManifest(t, f.dir, func(s string) string { return strings.Replace(s, d, otherHex(d), 1) })
		r := run(t, f.dir, Options{Full: true})
		wantStatus(t, r, StatusDamaged)
		hit := find(r, func(pr Problem) bool {
			return pr.Kind == KindManifest && pr.File == qpack.ManifestName && is(pr.Layer, 2) && is(pr.Expert, 3)
		})
		if len(hit) != 1 || len(r.ContainerProblems()) != 1 {
			t.Fatal(dump(r))
		}
		// By default the side at fault is unknown, but the expert is named.
		r = run(t, f.dir, Options{})
		wantStatus(t, r, StatusDamaged)
		if len(find(r, func(pr Problem) bool { return pr.Kind == KindExpertDigest && is(pr.Layer, 2) && is(pr.Expert, 3) })) != 1 {
			t.Fatal(dump(r))
		}
	})
	t.Run("auxDigest", func(t *testing.T) {
		f := newFixture(t, next)
		d := ext.FileDigests["tokenizer.json"]
		editManifest(t, f.dir, func(s string) string { return strings.Replace(s, d, otherHex(d), 1) })
		r := run(t, f.dir, Options{})
		wantStatus(t, r, StatusDamaged)
		onlyFile(t, r, "tokenizer.json")
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestTruncatedAndExtended(t *testing.T) {
	f := newFixture(t, next)
	for _, tc := range []struct {
		file  string
		delta int64
	}{
		{qpack.LayerFile(4), -1},
		{qpack.LayerFile(4), -f.layout.ExpertStride * 3},
		{qpack.LayerFile(0), +1},
		{qpack.DenseName, -100},
		{qpack.DenseName, +4096},
		{"config.json", -1},
		{qpack.LayoutName, +1},
	} {
		p := filepath.Join(f.dir, filepath.FromSlash(tc.file))
		size := f.manifest.Files[tc.file]
		orig := must(os.ReadFile(p))
		if err := os.Truncate(p, size+tc.delta); err != nil {
			t.Fatal(err)
		}
		r := run(t, f.dir, Options{})
		if err := os.WriteFile(p, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, r, StatusDamaged)
		onlyFile(t, r, tc.file)
		hit := find(r, func(pr Problem) bool {
			return pr.Kind == KindSize && pr.File == tc.file && pr.Offset != nil && *pr.Offset == min(size, size+tc.delta)
		})
		if len(hit) != 1 {
			t.Fatalf("%s %+d: %s", tc.file, tc.delta, dump(r))
		}
	}
	wantStatus(t, run(t, f.dir, Options{}), StatusOK)
}

func TestSwappedExperts(t *testing.T) {
	f := newFixture(t, next)
	swapExperts(t, f, 5, 1, 6)
	for _, quick := range []bool{false, true} {
		r := run(t, f.dir, Options{Full: !quick})
		wantStatus(t, r, StatusDamaged)
		got := find(r, func(pr Problem) bool { return pr.Kind == KindExpertDigest })
		if len(got) != 2 || !is(got[0].Layer, 5) || !is(got[0].Expert, 1) || !is(got[1].Layer, 5) || !is(got[1].Expert, 6) {
			t.Fatalf("quick=%v: %s", quick, dump(r))
		}
	}
}

func swapExperts(t *testing.T, f *fixture, layer, a, b int) {
	t.Helper()
	p := filepath.Join(f.dir, filepath.FromSlash(qpack.LayerFile(layer)))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := f.layout.ExpertStride
	ba := append([]byte(nil), data[int64(a)*s:int64(a+1)*s]...)
	copy(data[int64(a)*s:int64(a+1)*s], data[int64(b)*s:int64(b+1)*s])
	copy(data[int64(b)*s:int64(b+1)*s], ba)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNotAContainer(t *testing.T) {
	dir := t.TempDir()
	r, err := Verify(context.Background(), dir, Options{})
	if !errors.Is(err, qpack.ErrNotContainer) || r.ExitCode() != 2 || r.Error == "" {
		t.Fatalf("empty dir: %v %s", err, dump(r))
	}
	r, err = Verify(context.Background(), filepath.Join(dir, "nope"), Options{})
	if err == nil || r.ExitCode() != 2 {
		t.Fatalf("missing dir: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644)
	if r, err := Verify(context.Background(), filepath.Join(dir, "file"), Options{}); err == nil || r.ExitCode() != 2 {
		t.Fatalf("a file: %v", err)
	}
}

func TestStructure(t *testing.T) {
	t.Run("symlink", func(t *testing.T) {
		f := newFixture(t, next)
		p := filepath.Join(f.dir, "config.json")
		os.Rename(p, p+".real")
		if err := os.Symlink("config.json.real", p); err != nil {
			t.Skip(err)
		}
		r := run(t, f.dir, Options{})
		wantStatus(t, r, StatusDamaged)
		if len(find(r, func(pr Problem) bool { return pr.Kind == KindNotRegular && pr.File == "config.json" })) != 1 {
			t.Fatal(dump(r))
		}
	})
	t.Run("missing", func(t *testing.T) {
		f := newFixture(t, next)
		os.Remove(filepath.Join(f.dir, filepath.FromSlash(qpack.LayerFile(3))))
		r := run(t, f.dir, Options{})
		wantStatus(t, r, StatusDamaged)
		if len(find(r, func(pr Problem) bool { return pr.Kind == KindMissing && pr.File == qpack.LayerFile(3) })) != 1 {
			t.Fatal(dump(r))
		}
	})
	t.Run("extra", func(t *testing.T) {
		f := newFixture(t, next)
		os.WriteFile(filepath.Join(f.dir, "notes.txt"), []byte("hi"), 0o644)
		r := run(t, f.dir, Options{})
		wantStatus(t, r, StatusOK)
		if len(r.ExtraFiles) != 1 || r.ExtraFiles[0] != "notes.txt" {
			t.Fatal(dump(r))
		}
	})
}

func TestNoDigests(t *testing.T) {
	f := newFixture(t, next)
	stripExtension(t, f.dir)
	r := run(t, f.dir, Options{})
	wantStatus(t, r, StatusOK)
	if r.DigestsRecorded || len(r.Notes) == 0 || !strings.Contains(r.Notes[0], "no digests") {
		t.Fatal(dump(r))
	}
	for _, fr := range r.Files {
		if fr.Check != CheckComputed || len(fr.Digest) != 64 {
			t.Fatalf("%+v", fr)
		}
	}
	// Padding is still checked without digests.
	off := 2*f.layout.ExpertStride + f.layout.Payload() + 5
	undo := flip(t, f.dir, qpack.LayerFile(6), off, 1)
	r = run(t, f.dir, Options{})
	undo()
	wantStatus(t, r, StatusDamaged)
	if got := find(r, func(p Problem) bool { return p.Kind == KindPadding }); len(got) != 1 || !is(got[0].Layer, 6) || !is(got[0].Expert, 2) || *got[0].Offset != off {
		t.Fatal(dump(r))
	}
}

// stripExtension removes the "qpack" key from manifest.json, as a container
// Swiftlet wrote has none.
func stripExtension(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, qpack.ManifestName)
	var m map[string]any
	if err := json.Unmarshal(must(os.ReadFile(p)), &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "qpack")
	if err := os.WriteFile(p, must(json.MarshalIndent(m, "", " ")), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestExpertChecker(t *testing.T) {
	f := newFixture(t, next)
	c, err := qpack.Open(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ck, err := NewContainerChecker(c)
	if err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, c.Layout.ExpertStride)
	for l := 0; l < c.Layout.LayerCount; l++ {
		for e := 0; e < c.Layout.ExpertCount; e++ {
			if err := c.ReadExpert(l, e, blob); err != nil {
				t.Fatal(err)
			}
			if err := ck.CheckOnce(l, e, blob); err != nil {
				t.Fatal(err)
			}
			if !ck.Checked(l, e) {
				t.Fatal("not marked")
			}
		}
	}
	if err := c.ReadExpert(4, 3, blob); err != nil {
		t.Fatal(err)
	}
	blob[100] ^= 1
	err = ck.Check(4, 3, blob)
	var ee *ExpertError
	if !errors.As(err, &ee) || ee.Layer != 4 || ee.Expert != 3 || !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "layer 4 expert 3") {
		t.Fatalf("%v", err)
	}
	// The same blob under another expert's name is refused too.
	blob[100] ^= 1
	if err := ck.Check(4, 2, blob); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("swapped blob: %v", err)
	}
	if err := ck.CheckOnce(4, 3, blob[:10]); err != nil {
		t.Fatalf("CheckOnce of a checked expert: %v", err)
	}
	if err := ck.Check(4, 3, blob[:10]); err == nil {
		t.Fatal("short blob accepted")
	}
	if err := ck.Check(99, 0, blob); err == nil {
		t.Fatal("layer out of range accepted")
	}
	stripExtension(t, f.dir)
	c2, err := qpack.Open(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := NewContainerChecker(c2); !errors.Is(err, ErrNoDigests) {
		t.Fatalf("no digests: %v", err)
	}
}
