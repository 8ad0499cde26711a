package qpack

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each case damages a valid Swiftlet-style container in one way; Open must
// fail with an error that names the problem (and never panic).
func TestOpenRejectsCorruption(t *testing.T) {
	type fixup func(t *testing.T, fx *swiftFixture, dir string)
	manifest := func(old, new string) func(fx *swiftFixture) {
		return func(fx *swiftFixture) {
			fx.manifest = fx.swiftManifest("")
			if !strings.Contains(fx.manifest, old) {
				panic("fixture does not contain " + old)
			}
			fx.manifest = strings.Replace(fx.manifest, old, new, 1)
		}
	}
	layout := func(old, new string) func(fx *swiftFixture) {
		return func(fx *swiftFixture) {
			if !strings.Contains(fx.layout, old) {
				panic("layout does not contain " + old)
			}
			fx.layout = strings.Replace(fx.layout, old, new, 1)
		}
	}
	cases := []struct {
		name   string
		before func(fx *swiftFixture) // edits the fixture before it is written
		after  fixup                  // edits the directory after
		want   string                 // in the message
		is     error                  // errors.Is target, if any
	}{
		{name: "dotdot path", before: manifest(`"config.json" :`, `"..\/config.json" : 1, "config.json" :`), want: `contains ".."`, is: ErrInvalid},
		{name: "dotdot inside", before: manifest(`"config.json" :`, `"a\/..\/config.json" : 1, "config.json" :`), want: `contains ".."`},
		{name: "absolute path", before: manifest(`"config.json" :`, `"\/etc\/passwd" : 1, "config.json" :`), want: "is absolute"},
		{name: "backslash", before: manifest(`"config.json" :`, `"a\\b" : 1, "config.json" :`), want: "backslash"},
		{name: "dot component", before: manifest(`"config.json" :`, `".\/config.json" : 1, "config.json" :`), want: "not clean"},
		{name: "case duplicate", before: manifest(`"config.json" :`, `"Config.JSON" : 1, "config.json" :`), want: "case-insensitive"},
		{name: "duplicate key", before: manifest(`"config.json" :`, `"config.json" : 1, "config.json" :`), want: "more than once"},
		{name: "lists itself", before: manifest(`"config.json" :`, `"manifest.json" : 1, "config.json" :`), want: "must not list itself"},
		{name: "negative size", before: manifest(`"config.json" : 29`, `"config.json" : -29`), want: "negative size"},
		{name: "huge size", before: manifest(`"config.json" : 29`, `"config.json" : 99999999999999999999999`), want: "does not fit in 64 bits"},
		{name: "fractional size", before: manifest(`"config.json" : 29`, `"config.json" : 29.5`), want: "must be an integer"},
		{name: "wrong file size", before: manifest(`"config.json" : 29`, `"config.json" : 30`), want: "config.json: size is 29 bytes, manifest.json records 30"},
		{name: "missing listed file", after: func(t *testing.T, fx *swiftFixture, dir string) {
			os.Remove(filepath.Join(dir, "tokenizer.json"))
		}, want: "tokenizer.json: listed in manifest.json but missing"},
		{name: "unknown version", before: manifest(`"version" : 1`, `"version" : 2`), want: "version 2", is: ErrUnsupportedVersion},
		{name: "version string", before: manifest(`"version" : 1`, `"version" : "1"`), want: "version: must be an integer"},
		{name: "bad magic", before: manifest(`"QPACK"`, `"GTURBO"`), want: "magic", is: ErrNotContainer},
		{name: "no magic", before: manifest(`"magic" : "QPACK",`, ``), want: "no \"magic\"", is: ErrNotContainer},
		{name: "no manifest", after: func(t *testing.T, fx *swiftFixture, dir string) {
			os.Remove(filepath.Join(dir, ManifestName))
		}, want: "has no manifest.json", is: ErrNotContainer},
		{name: "not JSON", before: func(fx *swiftFixture) { fx.manifest = "QPACK\x00\x01" }, want: "manifest.json"},
		{name: "trailing data", before: func(fx *swiftFixture) { fx.manifest = fx.swiftManifest("") + "{}" }, want: "data after"},
		{name: "manifest too big", after: func(t *testing.T, fx *swiftFixture, dir string) {
			if err := os.Truncate(filepath.Join(dir, ManifestName), MaxManifestSize+1); err != nil {
				t.Fatal(err)
			}
		}, want: "larger than the limit"},
		{name: "no files key", before: manifest(`"files" :`, `"filez" :`), want: "files: missing"},
		{name: "no dense file listed", before: func(fx *swiftFixture) {
			delete(fx.files, DenseName)
		}, want: `does not list "model.safetensors"`},
		{name: "symlinked listed file", after: func(t *testing.T, fx *swiftFixture, dir string) {
			outside := filepath.Join(t.TempDir(), "c.json")
			writeFile(t, outside, fx.files["config.json"])
			p := filepath.Join(dir, "config.json")
			os.Remove(p)
			if err := os.Symlink(outside, p); err != nil {
				t.Fatal(err)
			}
		}, want: "config.json: is a symlink"},
		{name: "symlinked directory", after: func(t *testing.T, fx *swiftFixture, dir string) {
			if err := os.Symlink("/", filepath.Join(dir, "extra")); err != nil {
				t.Fatal(err)
			}
		}, want: "extra: is a symlink"},
		{name: "symlinked manifest", after: func(t *testing.T, fx *swiftFixture, dir string) {
			p := filepath.Join(dir, ManifestName)
			os.Rename(p, p+".real")
			os.Symlink(ManifestName+".real", p)
		}, want: "symlink"},
		{name: "fifo", after: func(t *testing.T, fx *swiftFixture, dir string) {
			if err := mkfifo(filepath.Join(dir, "pipe")); err != nil {
				t.Skip("no mkfifo:", err)
			}
		}, want: "pipe: is a named pipe"},

		// layout.json
		{name: "stride not aligned", before: layout(`"expertStride" : 16384`, `"expertStride" : 16000`), want: "expertStride: 16000 is not a positive multiple of 16384"},
		{name: "stride below payload", before: func(fx *swiftFixture) {
			fx.layout = strings.Replace(fx.layout, `"offset" : 3712, "shape" : [64, 1]`, `"offset" : 16300, "shape" : [64, 1]`, 1)
		}, want: "smaller than the payload"},
		{name: "overlapping sections", before: layout(`"offset" : 1152`, `"offset" : 1100`), want: "offset 1100 overlaps the previous section, which ends at 1152"},
		{name: "size not dtype x shape", before: layout(`"shape" : [32, 2], "size" : 128}`, `"shape" : [32, 2], "size" : 130}`), want: "size 130, but dtype BF16 x shape [32 2] is 128 bytes"},
		{name: "shape overflow", before: layout(`"shape" : [64, 4], "size" : 1024`, `"shape" : [4294967296, 4294967296, 4], "size" : 1024`), want: "overflows int64"},
		{name: "huge stride", before: func(fx *swiftFixture) {
			fx.layout = strings.Replace(fx.layout, `"expertStride" : 16384`, `"expertStride" : 9223372036854759424`, 1)
		}, want: "overflows int64"},
		{name: "huge count", before: layout(`"expertCount" : 3`, `"expertCount" : 1e300`), want: "expertCount: must be an integer"},
		{name: "too many experts", before: layout(`"expertCount" : 3`, `"expertCount" : 65537`), want: "expertCount: 65537 is out of range"},
		{name: "zero layers", before: layout(`"layerCount" : 2`, `"layerCount" : 0`), want: "layerCount: 0 is out of range"},
		{name: "linearLayers length", before: layout("true,\n    false", "true"), want: "linearLayers: has 1 entries, want one per layer (2)"},
		{name: "linearLayers type", before: layout("true,\n    false", "true, 0"), want: "linearLayers[1]: must be a boolean"},
		{name: "empty sections", before: func(fx *swiftFixture) {
			i := strings.Index(fx.layout, `"sections" : [`)
			fx.layout = fx.layout[:i] + `"sections" : []}`
		}, want: "sections: empty"},
		{name: "unknown dtype", before: layout(`"dtype" : "U32"`, `"dtype" : "Q4_K"`), want: "unknown dtype"},
		{name: "negative offset", before: layout(`"offset" : 0`, `"offset" : -1`), want: "negative offset"},
		{name: "section out of order", before: func(fx *swiftFixture) {
			fx.layout = strings.Replace(fx.layout, `"name" : "gate_proj.scales"`, `"name" : "gate_proj.biases2"`, 1)
		}, want: "unknown section name"},
		{name: "layout missing key", before: layout(`"layerCount" : 2,`, ``), want: "layerCount: missing"},
		{name: "layout not an object", before: func(fx *swiftFixture) { fx.layout = "[1,2,3]" }, want: "expected a JSON object"},
		{name: "layout too big", before: func(fx *swiftFixture) {
			fx.layout = strings.Replace(fx.layout, "{", "{\"pad\": \""+strings.Repeat("x", MaxLayoutSize)+"\",", 1)
		}, want: "more than the limit"},

		// layer files
		{name: "missing layer file", before: func(fx *swiftFixture) {
			delete(fx.files, LayerFile(1))
		}, want: `layer 1: "packed_experts/layer_01.bin" is not listed`},
		{name: "layer file deleted", after: func(t *testing.T, fx *swiftFixture, dir string) {
			os.Remove(filepath.Join(dir, "packed_experts", "layer_01.bin"))
		}, want: "packed_experts/layer_01.bin: listed in manifest.json but missing"},
		{name: "short layer file", before: func(fx *swiftFixture) {
			fx.files[LayerFile(0)] = fx.files[LayerFile(0)][:2*16384]
		}, want: "layer 0: size 32768, want expertCount 3 x stride 16384 = 49152"},
		{name: "extra layer file", before: func(fx *swiftFixture) {
			fx.files[LayerFile(2)] = make([]byte, 3*16384)
		}, want: `"packed_experts/layer_02.bin" is not one of the layout's 2 layer files`},

		// model.safetensors
		{name: "bad dense header", before: func(fx *swiftFixture) {
			fx.files[DenseName] = safetensorsBytes(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}`, make([]byte, 8))
		}, want: `model.safetensors: tensor "a": data_offsets`, is: ErrInvalid},
		{name: "dense header length lies", before: func(fx *swiftFixture) {
			b := append([]byte(nil), fx.files[DenseName]...)
			b[6] = 0xff
			fx.files[DenseName] = b
		}, want: "model.safetensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fx := newSwiftFixture()
			if c.before != nil {
				c.before(fx)
			}
			dir := fx.write(t)
			if c.after != nil {
				c.after(t, fx, dir)
			}
			cont, err := Open(dir)
			if err == nil {
				cont.Close()
				t.Fatalf("Open succeeded, want an error containing %q", c.want)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %q is not %v", err, c.is)
			}
		})
	}
}

// Damage to the "qpack" extension of a container this package wrote.
func TestOpenRejectsBadExtension(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out.qpack")
	w, err := Create(dst, tinyLayout(t), CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writeTiny(t, w, []int{0, 1})
	writeDense(t, w)
	if _, err := w.Finish(info); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dst, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	m := c.Manifest
	c.Close()
	d0 := m.Ext.ExpertDigests[LayerFile(0)][0]
	fd := m.Ext.FileDigests[DenseName]

	cases := []struct {
		name, old, new, want string
	}{
		{"digest algorithm", `"digestAlgorithm": "blake3"`, `"digestAlgorithm": "md5"`, `"md5" is not supported`},
		{"uppercase digest", `"` + fd + `"`, `"` + strings.ToUpper(fd) + `"`, "digest of \"model.safetensors\" is not 64 lowercase hex"},
		{"short digest", `"` + fd + `"`, `"abc"`, "not 64 lowercase hex"},
		{"digest of unlisted file", `"fileDigests": {`, `"fileDigests": {"nope.bin": "` + fd + `", `, `"nope.bin" is not listed`},
		{"missing file digest", `"model.safetensors": "` + fd + `",`, ``, `no digest for "model.safetensors"`},
		{"expert digest count", `"` + d0 + `",`, ``, `has 2 digests, want one per expert (3)`},
		{"expert digest not hex", `"` + d0 + `"`, `"` + strings.Repeat("g", 64) + `"`, "expert 0: digest is not 64 lowercase hex"},
		{"expert digest not layer", `"expertDigests": {`, `"expertDigests": {"model.safetensors": [], `, `"model.safetensors" is not a layer file`},
		{"commit", `"commit": "` + strings.Repeat("ab", 20) + `"`, `"commit": "main"`, "not a 40-character"},
		{"shard sha", strings.Repeat("0f", 32), "xyz", "sha256"},
		{"shard size", `"size": 1234`, `"size": -1`, "negative size"},
		{"extension type", `"qpack": {`, `"qpack": 5, "x": {`, "qpack: expected a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(string(good), c.old) {
				t.Fatalf("manifest does not contain %q", c.old)
			}
			bad := strings.Replace(string(good), c.old, c.new, 1)
			if err := os.WriteFile(filepath.Join(dst, ManifestName), []byte(bad), 0o644); err != nil {
				t.Fatal(err)
			}
			cont, err := Open(dst)
			if err == nil {
				cont.Close()
				t.Fatalf("Open succeeded, want an error containing %q", c.want)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not contain %q or is not ErrInvalid", err, c.want)
			}
		})
	}
}

// A file swapped after Open is refused when first read.
func TestOpenFileDetectsReplacement(t *testing.T) {
	dir := newSwiftFixture().write(t)
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.LayerPath(1)
	data, _ := os.ReadFile(p)
	writeFile(t, p+".new", data) // same bytes, another inode
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16384)
	if err := c.ReadExpert(1, 0, buf); err == nil || !strings.Contains(err.Error(), "changed since the container was opened") {
		t.Errorf("ReadExpert after the file was replaced: %v", err)
	}
	if err := c.ReadExpert(0, 0, buf); err != nil {
		t.Errorf("untouched layer: %v", err)
	}
	if _, err := c.OpenFile("nope"); err == nil {
		t.Error("OpenFile of an unlisted name gave no error")
	}
}

func TestCheckPath(t *testing.T) {
	good := []string{"config.json", "tokenizer/vocab.txt", "packed_experts/layer_00.bin", "a b", "ü.txt"}
	for _, p := range good {
		if err := CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v", p, err)
		}
	}
	bad := map[string]string{
		"": "empty", "/a": "absolute", "a/../b": `".."`, "..": `".."`, "a\\b": "backslash",
		"c:x": "colon", "a//b": "not clean", "a/": "not clean", "./a": "not clean", "a\x00b": "control",
		"\xff": "UTF-8", ".hidden": "starting with", "a/.git/x": "starting with",
		strings.Repeat("a/", 17) + "b": "deeper", strings.Repeat("x", 256): "longer than 255",
	}
	for p, want := range bad {
		if err := CheckPath(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckPath(%q) = %v, want an error containing %q", p, err, want)
		}
	}
}
