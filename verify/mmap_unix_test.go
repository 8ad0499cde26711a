//go:build unix

package verify

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// A mapped container file that shrinks under the comparison gives a read
// error, not a crash.
func TestCompareViewFault(t *testing.T) {
	p := filepath.Join(t.TempDir(), "layer")
	page := os.Getpagesize()
	data := make([]byte, 4*page)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mapFile(f, len(data))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unmapFile(m)
	s := &segment{n: int64(2 * page), dstOff: int64(2 * page)}
	type rec struct {
		first, count int64
		err          error
	}
	var got []rec
	record := func(first, count int64, err error) { got = append(got, rec{first, count, err}) }

	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	src := append([]byte(nil), data[2*page:]...)
	compareView(m, s, 0, src, record)
	src[page+5] ^= 1
	compareView(m, s, 0, src, record)
	if len(got) != 1 || got[0].first != int64(page+5) || got[0].count != 1 || got[0].err != nil {
		t.Fatalf("%+v", got)
	}
	got = nil
	if err := os.Truncate(p, int64(page)); err != nil {
		t.Fatal(err)
	}
	compareView(m, s, 0, src, record)
	if len(got) != 1 || got[0].err == nil {
		t.Fatalf("after truncation: %+v", got)
	}
	// Beyond the mapping.
	got = nil
	compareView(m, &segment{n: 10, dstOff: int64(len(data)) - 5}, 0, make([]byte, 10), record)
	if len(got) != 1 || got[0].err == nil {
		t.Fatalf("beyond the end: %+v", got)
	}
}
