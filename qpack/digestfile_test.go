package qpack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// digestOpenFile (mappings where the platform has them) gives BLAKE3 of
// the file and of each stride, for sizes around the block and window
// sizes, and refuses a file whose size is not the one expected.
func TestDigestOpenFile(t *testing.T) {
	dir := t.TempDir()
	open := func(data []byte) *os.File {
		p := filepath.Join(dir, "f.bin")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	for _, n := range []int{0, 1, 4095, hashBlock + 3, 8<<20 - 1, 8 << 20, 8<<20 + 1, 25<<20 + 12345} {
		data := randBytes(n, uint64(n))
		var progressed int64
		d, eds, err := digestOpenFile(open(data), int64(n), 0, 0, func(k int64) { progressed += k }, nil)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if d != b3(data) || eds != nil || progressed != int64(n) {
			t.Errorf("%d bytes: digest %s (want %s), %d expert digests, progress %d", n, d, b3(data), len(eds), progressed)
		}
	}
	for _, c := range []struct {
		experts int
		stride  int64
	}{{3, 16384}, {5, 3<<20 + 16384}, {2, 9 << 20}} {
		data := randBytes(c.experts*int(c.stride), uint64(c.stride)+1)
		d, eds, err := digestOpenFile(open(data), int64(len(data)), c.experts, c.stride, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d != b3(data) || len(eds) != c.experts {
			t.Fatalf("%d x %d: digest %s (want %s), %d expert digests", c.experts, c.stride, d, b3(data), len(eds))
		}
		for e := range eds {
			if want := b3(data[int64(e)*c.stride : int64(e+1)*c.stride]); eds[e] != want {
				t.Errorf("%d x %d: expert %d digest %s, want %s", c.experts, c.stride, e, eds[e], want)
			}
		}
		if _, _, err := digestOpenFile(open(data[:len(data)-1]), int64(len(data)), c.experts, c.stride, nil, nil); err == nil || !strings.Contains(err.Error(), "ends inside expert") {
			t.Errorf("%d x %d, one byte short: %v", c.experts, c.stride, err)
		}
		if _, _, err := digestOpenFile(open(append(data, 0)), int64(len(data)), c.experts, c.stride, nil, nil); err == nil || !strings.Contains(err.Error(), "longer") {
			t.Errorf("%d x %d, one byte long: %v", c.experts, c.stride, err)
		}
	}
	if _, _, err := digestOpenFile(open([]byte("abc")), 4, 0, 0, nil, nil); err == nil {
		t.Error("a file shorter than expected: no error")
	}
	stops := 0
	if _, _, err := digestOpenFile(open(randBytes(5*hashBlock, 9)), 5*hashBlock, 0, 0, nil, func() bool { stops++; return stops > 2 }); err != errStopped {
		t.Errorf("stopped digest: %v", err)
	}
}
