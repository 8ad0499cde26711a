//go:build linux

package qpack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file truncated while it is hashed through mappings makes the digest
// fail with an error (the fault on the vanished pages is caught), not
// crash the program.
func TestDigestOpenFileTruncated(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f.bin")
	const n = 20 << 20
	if err := os.WriteFile(p, randBytes(n, 3), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	polls := 0
	stop := func() bool {
		if polls++; polls == 2 { // after the first window is mapped
			if err := os.Truncate(p, 0); err != nil {
				t.Error(err)
			}
		}
		return false
	}
	for _, experts := range []int{0, 5} {
		if err := os.WriteFile(p, randBytes(n, 3), 0o644); err != nil {
			t.Fatal(err)
		}
		polls = 0
		_, _, err := digestOpenFile(f, n, experts, n/int64(max(experts, 1)), nil, stop)
		if err == nil || !strings.Contains(err.Error(), "could not be read") {
			t.Errorf("%d experts: digest of a file truncated under it: %v", experts, err)
		}
	}
}
