package verify

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

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
	type truth struct {
		size    int64
		digest  string
		experts []string
	}
	facts := map[string]truth{}
	stride := fx.layout.ExpertStride
	for p := range fx.manifest.Files {
		data, err := os.ReadFile(filepath.Join(fx.dir, filepath.FromSlash(p)))
		if err != nil {
			f.Fatal(err)
		}
		sum := blake3.Sum256(data)
		tr := truth{size: int64(len(data)), digest: hex.EncodeToString(sum[:])}
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
		r, _ := Verify(context.Background(), fx.dir, Options{Workers: 2, KeepCache: true, BlockSize: 64 << 10})
		if r == nil {
			t.Fatal("nil report")
		}
		if r.Status != StatusOK {
			return
		}
		m, err := qpack.ParseManifest(data)
		if err != nil {
			t.Fatalf("ok for a manifest that does not parse: %v", err)
		}
		for p, size := range m.Files {
			tr, ok := facts[p]
			if !ok || tr.size != size {
				t.Fatalf("ok, but %s is listed with %d bytes (file: %+v, exists %v)", p, size, tr, ok)
			}
			if m.Ext != nil && m.Ext.FileDigests[p] != tr.digest {
				t.Fatalf("ok, but %s has digest %s, manifest says %s", p, tr.digest, m.Ext.FileDigests[p])
			}
			if m.Ext != nil && tr.experts != nil {
				for e, d := range m.Ext.ExpertDigests[p] {
					if d != tr.experts[e] {
						t.Fatalf("ok, but %s expert %d differs", p, e)
					}
				}
			}
		}
	})
}

// expertRE is an independent spelling of the expert-name rule, for
// FuzzParseExpertName.
var expertRE = regexp.MustCompile(`^(.*\.)?layers\.(0|[1-9][0-9]{0,8})\.(?:.+\.)?(switch_mlp|switch_glu)\.((?:gate|up|down)_proj\.(?:weight|scales|biases))$`)

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
