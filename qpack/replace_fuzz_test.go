package qpack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzCheckContainerDir: whatever manifest.json holds, CheckContainerDir
// never panics, and it accepts a directory (which --overwrite would then
// delete) only when encoding/json, reading the same bytes, finds the magic
// "QPACK" and version 1.
func FuzzCheckContainerDir(f *testing.F) {
	f.Add([]byte(`{"magic":"QPACK","version":1}`))
	f.Add([]byte(`{"magic":"QPACK","version":1,"files":{"a":1}}`))
	f.Add([]byte(`{"magic":"QPACK","version":2}`))
	f.Add([]byte(`{"name":"app","version":"1.0"}`))
	f.Add([]byte(`{"magic":"QPACK","magic":"OTHER","version":1}`))
	f.Add([]byte(`{"magic":"QPACK","Magic":"OTHER","version":1}`))
	f.Add([]byte(`{"magic":"QP\u0041CK","version":1.0}`))
	f.Add([]byte(`{"magic":"QPACK","version":1e0}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, manifest []byte) {
		d, err := os.MkdirTemp(dir, "c")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(d)
		if err := os.WriteFile(filepath.Join(d, ManifestName), manifest, 0o644); err != nil {
			t.Fatal(err)
		}
		if CheckContainerDir(d) != nil {
			return
		}
		// Keys as spelled (a map, not encoding/json's case-folding struct
		// match); of duplicates, the last.
		var fields map[string]json.RawMessage
		var magic string
		var version float64
		err = json.Unmarshal(manifest, &fields)
		if err == nil {
			err = json.Unmarshal(fields["magic"], &magic)
		}
		if err == nil {
			err = json.Unmarshal(fields["version"], &version)
		}
		if err != nil || magic != Magic || version != Version {
			t.Fatalf("accepted as a container, but encoding/json reads magic %q version %v (%v) from %q", magic, version, err, manifest)
		}
	})
}
