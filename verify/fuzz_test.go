package verify

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/qpack"
	"github.com/zeebo/blake3"
)

// FuzzManifest writes arbitrary bytes as a container's manifest.json and
// verifies it. Verify must not panic, and whenever it says "ok" everything
// the manifest claims must be true of the files: every listed size, file
// digest and expert digest, checked here by hashing the files directly.
func FuzzManifest(f *testing.F) {
	fx := newFixture(f, next)
	orig, err := os.ReadFile(filepath.Join(fx.dir, qpack.ManifestName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(orig)
	facts := map[string]manifestTruth{}
	stride := fx.layout.ExpertStride
	for p := range fx.manifest.Files {
		data, err := os.ReadFile(filepath.Join(fx.dir, filepath.FromSlash(p)))
		if err != nil {
			f.Fatal(err)
		}
		sum := blake3.Sum256(data)
		tr := manifestTruth{size: int64(len(data)), digest: hex.EncodeToString(sum[:])}
		if _, ok := parseLayerFile(p); ok {
			for off := int64(0); off+stride <= int64(len(data)); off += stride {
				s := blake3.Sum256(data[off : off+stride])
				tr.experts = append(tr.experts, hex.EncodeToString(s[:]))
			}
		}
		facts[p] = tr
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(fx.dir, qpack.ManifestName), data, 0o644); err != nil {
			t.Fatal(err)
		}
		// Both modes: by default layer files are vouched for by their
		// expert digests alone and the report says their whole-file
		// digests were not checked (LayerFileDigests false); Full checks
		// those too.
		for _, full := range []bool{false, true} {
			checkManifestClaims(t, fx.dir, data, full, facts)
		}
	})
}

// manifestTruth is what FuzzManifest hashed of a fixture file.
type manifestTruth struct {
	size    int64
	digest  string
	experts []string
}

// checkManifestClaims verifies dir (Full or not); when the report says
// ok, every claim of the manifest the report covers must hold of the files.
func checkManifestClaims(t *testing.T, dir string, data []byte, full bool, facts map[string]manifestTruth) {
	t.Helper()
	r, _ := Verify(context.Background(), dir, Options{Workers: 2, KeepCache: true, BlockSize: 64 << 10, Full: full})
	if r == nil {
		t.Fatal("nil report")
	}
	if r.Status != StatusOK {
		return
	}
	m, err := qpack.ParseManifest(data)
	if err != nil {
		t.Fatalf("full %v: ok for a manifest that does not parse: %v", full, err)
	}
	if full && m.Ext != nil && !r.LayerFileDigests {
		t.Fatalf("full: ok without checking the layer files' whole-file digests")
	}
	for p, size := range m.Files {
		tr, ok := facts[p]
		if !ok || tr.size != size {
			t.Fatalf("full %v: ok, but %s is listed with %d bytes (file: %+v, exists %v)", full, p, size, tr, ok)
		}
		_, layer := parseLayerFile(p)
		if m.Ext != nil && (!layer || r.LayerFileDigests) && m.Ext.FileDigests[p] != tr.digest {
			t.Fatalf("full %v: ok, but %s has digest %s, manifest says %s", full, p, tr.digest, m.Ext.FileDigests[p])
		}
		if m.Ext != nil && tr.experts != nil {
			for e, d := range m.Ext.ExpertDigests[p] {
				if d != tr.experts[e] {
					t.Fatalf("full %v: ok, but %s expert %d differs", full, p, e)
				}
			}
		}
	}
}

// expertRE is an independent spelling of the expert-name rule, for
// FuzzParseExpertName.
var expertRE = regexp.MustCompile(`(?s)^(.*\.)?layers\.(0|[1-9][0-9]{0,8})\.(?:.+\.)?(switch_mlp|switch_glu)\.((?:gate|up|down)_proj\.(?:weight|scales|biases))$`)

func FuzzParseExpertName(f *testing.F) {
	for _, s := range []string{
		"model.layers.7.mlp.switch_mlp.gate_proj.weight",
		"language_model.model.layers.12.mlp.switch_glu.down_proj.biases",
		"a.layers.1.layers.x.switch_mlp.up_proj.scales",
		"model.layers.07.mlp.switch_mlp.gate_proj.weight",
		"mtp.layers.0.mlp.switch_mlp.gate_proj.weight",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		en, ok := parseExpertName(name)
		m := expertRE.FindStringSubmatch(name)
		if strings.Contains(name, "..") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") {
			m = nil // empty components never name a module
		}
		if ok != (m != nil) {
			t.Fatalf("%q: parse %v, reference %v", name, ok, m != nil)
		}
		if !ok {
			return
		}
		l, _ := strconv.Atoi(m[2])
		if en.prefix != m[1] || en.layer != l || en.section != m[4] {
			t.Fatalf("%q: %+v, reference %q", name, en, m)
		}
	})
}

// FuzzReceipt feeds arbitrary bytes as verified-install.json. An accepted
// receipt must hold what checkReceipt relies on (a 64-hex manifest digest,
// an RFC 3339 time) and every bound, and survive a round trip through
// WriteReceipt's encoding.
func FuzzReceipt(f *testing.F) {
	f.Add([]byte(`{"tool":"qpack","container":"/x","verifiedAt":"2025-01-02T03:04:05Z","manifestDigest":"` + strings.Repeat("ab", 32) + `","digestsRecorded":true,"layerFileDigestsChecked":false,"files":{"config.json":{"size":3,"digest":"` + strings.Repeat("0", 64) + `","check":"file-digest"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rc, err := parseReceipt(data)
		if err != nil {
			if rc != nil {
				t.Fatal("receipt and error")
			}
			return
		}
		if !isLowerHex(rc.ManifestDigest, 64) {
			t.Fatalf("accepted manifestDigest %q", rc.ManifestDigest)
		}
		if _, err := time.Parse(time.RFC3339, rc.VerifiedAt); err != nil || len(rc.VerifiedAt) > 64 {
			t.Fatalf("accepted verifiedAt %q", rc.VerifiedAt)
		}
		if len(rc.Tool) > maxReceiptString || len(rc.Container) > maxReceiptString || len(rc.Files) > maxReceiptFiles {
			t.Fatal("accepted an unbounded field")
		}
		for p, fl := range rc.Files {
			if p == "" || fl.Size < 0 || (fl.Digest != "" && !isLowerHex(fl.Digest, 64)) {
				t.Fatalf("accepted file %q %+v", p, fl)
			}
		}
		if rc.Deep != nil && rc.Deep.Sample < 0 {
			t.Fatalf("accepted deep %+v", rc.Deep)
		}
		out := filepath.Join(t.TempDir(), ReceiptName)
		if err := WriteReceipt(out, rc); err != nil {
			t.Fatal(err)
		}
		again, err := parseReceipt(must(os.ReadFile(out)))
		if err != nil || !reflect.DeepEqual(rc, again) {
			b, _ := json.Marshal(rc)
			t.Fatalf("round trip: %s -> %+v, %v", b, again, err)
		}
	})
}
