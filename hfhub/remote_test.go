package hfhub

import (
	"bytes"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

func openTestFile(t *testing.T, cfg hubtest.Config, data []byte, ro ReaderOptions, mod ...func(*Options)) (*hubtest.Server, *RemoteFile) {
	t.Helper()
	hub := newHub(t, cfg)
	commit := hub.MustAddRepo("org/m", []hubtest.File{{Path: "w.safetensors", Data: data, LFS: true}}, hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, func(o *Options) {
		for _, m := range mod {
			m(o)
		}
	})
	f, err := c.OpenFile(ctxT(t), "org/m", commit, "w.safetensors", ro)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size() != int64(len(data)) || f.ETag() != sha256Hex(data) || f.Commit() != commit {
		t.Fatalf("size %d etag %s commit %s", f.Size(), f.ETag(), f.Commit())
	}
	hub.ResetLog()
	return hub, f
}

func cdnRanges(hub *hubtest.Server) []string {
	var out []string
	for _, r := range hub.Requests() {
		if r.Role == "cdn" && r.Method == "GET" {
			out = append(out, r.Range)
		}
	}
	sort.Strings(out)
	return out
}

func TestReadAtSplitsAcrossConnections(t *testing.T) {
	data := randBytes(100_000, 11)
	hub, f := openTestFile(t, hubtest.Config{}, data, ReaderOptions{ChunkSize: 30_000, Connections: 3})
	buf := make([]byte, 70_000)
	n, err := f.ReadAt(buf, 20_000)
	if err != nil || n != len(buf) || !bytes.Equal(buf, data[20_000:90_000]) {
		t.Fatalf("ReadAt: n=%d err=%v equal=%v", n, err, bytes.Equal(buf, data[20_000:90_000]))
	}
	want := []string{"bytes=20000-49999", "bytes=50000-79999", "bytes=80000-89999"}
	if got := cdnRanges(hub); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("ranges %v, want %v", got, want)
	}
	// Past the end: a short read with io.EOF, as os.File does.
	n, err = f.ReadAt(buf[:100], 99_950)
	if n != 50 || err != io.EOF || !bytes.Equal(buf[:50], data[99_950:]) {
		t.Fatalf("tail read: n=%d err=%v", n, err)
	}
	if _, err := f.ReadAt(buf[:1], 100_000); err != io.EOF {
		t.Fatalf("read at EOF: %v", err)
	}
	if _, err := f.ReadAt(buf[:1], -1); err == nil {
		t.Fatal("negative offset accepted")
	}
}

func TestReadRangesCoalescesAndStreams(t *testing.T) {
	data := randBytes(200_000, 12)
	hub, f := openTestFile(t, hubtest.Config{}, data, ReaderOptions{MaxRequest: 50_000, MaxGap: 100})
	// Adjacent and near ranges, out of order, one overlapping, one empty.
	ranges := []Range{
		{Off: 10_000, Len: 1_000}, {Off: 0, Len: 10_000}, {Off: 11_050, Len: 500}, // gap of 50: merged
		{Off: 20_000, Len: 100}, // gap of 8,450: new request
		{Off: 20_050, Len: 100}, // overlaps: own request
		{Off: 150_000, Len: 50_000},
		{Off: 5, Len: 0},
	}
	var mu sync.Mutex
	got := map[Range][]byte{}
	err := f.ReadRanges(ctxT(t), ranges, 4, func(r Range, body io.Reader) error {
		b, err := io.ReadAll(body)
		mu.Lock()
		got[r] = b
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		if !bytes.Equal(got[r], data[r.Off:r.End()]) {
			t.Errorf("range %+v: wrong bytes (%d)", r, len(got[r]))
		}
	}
	want := []string{"bytes=0-11549", "bytes=150000-199999", "bytes=20000-20099", "bytes=20050-20149"}
	if g := cdnRanges(hub); strings.Join(g, ",") != strings.Join(want, ",") {
		t.Fatalf("requests %v, want %v", g, want)
	}
	// fn may stop reading early; the rest of the range is skipped.
	hub.ResetLog()
	err = f.ReadRanges(ctxT(t), []Range{{Off: 0, Len: 5000}, {Off: 5000, Len: 5000}}, 1, func(r Range, body io.Reader) error {
		b := make([]byte, 10)
		if _, err := io.ReadFull(body, b); err != nil {
			return err
		}
		if !bytes.Equal(b, data[r.Off:r.Off+10]) {
			t.Errorf("range %+v: wrong head", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if g := cdnRanges(hub); len(g) != 1 || g[0] != "bytes=0-9999" {
		t.Fatalf("requests %v", g)
	}
	// Out-of-file ranges are refused before any request.
	if err := f.ReadRanges(ctxT(t), []Range{{Off: 199_999, Len: 2}}, 1, nil); err == nil {
		t.Fatal("range past EOF accepted")
	}
	// An error from fn stops everything and is returned.
	sentinel := io.ErrShortWrite
	err = f.ReadRanges(ctxT(t), []Range{{Off: 0, Len: 10}, {Off: 100_000, Len: 10}}, 2, func(Range, io.Reader) error { return sentinel })
	if err != sentinel {
		t.Fatalf("fn error: got %v", err)
	}
}

// Each range-level failure is either repaired (the bytes delivered are
// exactly the file's) or reported; the reader never hands on bytes from a
// response that is not the exact 206 asked for.
func TestReaderFaults(t *testing.T) {
	data := randBytes(120_000, 13)
	cases := []struct {
		f  hubtest.Fault
		ok bool
	}{
		{hubtest.Fault{Kind: hubtest.FaultCut, AfterBytes: 7_000, Times: 4}, true},
		{hubtest.Fault{Kind: hubtest.FaultStall, AfterBytes: 3_000, Delay: 2 * time.Second}, true},
		{hubtest.Fault{Kind: hubtest.FaultTrickle, Delay: 5 * time.Millisecond}, true},
		{hubtest.Fault{Kind: hubtest.FaultIgnoreRange, Times: 2}, true},
		{hubtest.Fault{Kind: hubtest.FaultWrongOffset, Shift: 1}, true},
		{hubtest.Fault{Kind: hubtest.FaultNoContentRange}, true},
		{hubtest.Fault{Kind: hubtest.FaultBadLength}, true},
		{hubtest.Fault{Kind: hubtest.FaultExpire}, true},
		{hubtest.Fault{Kind: hubtest.FaultStatus, Status: 500, Times: 3}, true},
		{hubtest.Fault{Kind: hubtest.FaultStatus, Status: 404}, false},
		{hubtest.Fault{Kind: hubtest.FaultStall, AfterBytes: 0, Delay: 5 * time.Second, Times: -1}, false},
		{hubtest.Fault{Kind: hubtest.FaultIgnoreRange, Times: -1}, true}, // RFC 9110 allows it: one sequential stream
		{hubtest.Fault{Kind: hubtest.FaultIgnoreLaterRange, Times: -1}, true},
		{hubtest.Fault{Kind: hubtest.FaultSliceOK, Times: -1}, true},
		{hubtest.Fault{Kind: hubtest.FaultTrickle, Rate: 2000, Times: 1}, true}, // hedged
		{hubtest.Fault{Kind: hubtest.FaultHang, AfterBytes: 100, Times: -1}, false},
	}
	for _, tc := range cases {
		name := tc.f.Kind.String()
		if tc.f.Times < 0 {
			name += " forever"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hub, f := openTestFile(t, hubtest.Config{}, data, ReaderOptions{ChunkSize: 40_000, Connections: 2}, fastStall)
			tc.f.Route = hubtest.RouteCDN
			hub.Inject(tc.f)
			buf := make([]byte, 100_000)
			n, err := f.ReadAt(buf, 10_000)
			if tc.ok {
				if err != nil {
					t.Fatalf("want success: %v", err)
				}
				if n != len(buf) || !bytes.Equal(buf, data[10_000:110_000]) {
					t.Fatal("wrong bytes delivered")
				}
				return
			}
			if err == nil {
				t.Fatal("want an error")
			}
			if strings.TrimSpace(err.Error()) == "" || !strings.Contains(err.Error(), "w.safetensors") {
				t.Fatalf("unclear error %q", err)
			}
		})
	}
}

// The stall rule is time since the last byte: a stall is noticed after
// about StallTimeout, not after the server gives up, and the retry resumes
// at the last byte received.
func TestStallResumesFromLastByte(t *testing.T) {
	data := randBytes(50_000, 14)
	hub, f := openTestFile(t, hubtest.Config{}, data, ReaderOptions{ChunkSize: 1 << 20}, fastStall)
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultStall, Route: hubtest.RouteCDN, AfterBytes: 12_345, Delay: 10 * time.Second})
	buf := make([]byte, len(data))
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data) {
		t.Fatal("wrong bytes")
	}
	// The first request (the whole file: no Range) stalls after 12,345
	// bytes; the next one resumes exactly there (a loaded machine may add
	// later resumes, never earlier).
	var got []string
	for _, r := range hub.Requests() {
		if r.Role == "cdn" {
			got = append(got, r.Range)
		}
	}
	if len(got) < 2 || got[0] != "" || got[1] != "bytes=12345-49999" {
		t.Fatalf("requests %q, want no Range then bytes=12345-49999", got)
	}
}
