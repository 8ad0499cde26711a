package hfhub

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// Every body the client waits for is bounded by the one stall rule: a
// server that sends headers and then nothing ends in ErrStalled after about
// (MaxRetries+1) × StallTimeout, never a hang.
func TestStallRuleBoundsEveryWait(t *testing.T) {
	cases := []struct {
		name  string
		fault hubtest.Fault
	}{
		{"model info body", hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteInfo, Times: -1}},
		{"model info headers", hubtest.Fault{Kind: hubtest.FaultStallHeaders, Route: hubtest.RouteInfo, Delay: time.Minute, Times: -1}},
		{"tree page mid-body", hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteTree, AfterBytes: 30, Times: -1}},
		{"error body", hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteTree, Status: 500, Times: -1}},
		{"resolve HEAD headers", hubtest.Fault{Kind: hubtest.FaultStallHeaders, Route: hubtest.RouteResolve, Method: "HEAD", Delay: time.Minute, Times: -1}},
		{"small file body", hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteResolve, Method: "GET", Path: regPath, AfterBytes: 10, Times: -1}},
		{"CDN range body", hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteCDN, AfterBytes: 1000, Times: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hub := newHub(t, hubtest.Config{})
			hub.MustAddRepo("org/m", faultRepo(), hubtest.RepoOptions{})
			hub.Inject(tc.fault)
			c, _ := newTestClient(t, hub, func(o *Options) { o.StallTimeout = 200 * time.Millisecond; o.MaxRetries = 2 })
			t0 := time.Now()
			_, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: t.TempDir(), ChunkSize: 64 << 10})
			took := time.Since(t0)
			if err == nil {
				t.Fatal("want an error")
			}
			if !errors.Is(err, ErrStalled) && !strings.Contains(err.Error(), "HTTP 500") {
				t.Fatalf("want ErrStalled, got %v", err)
			}
			if took > 10*time.Second { // 3 attempts × 200 ms, plus backoffs: far below
				t.Fatalf("took %v: the stall rule did not bound the wait", took)
			}
		})
	}
}

func TestPaginationBounds(t *testing.T) {
	hub := newHub(t, hubtest.Config{TreePageSize: 1})
	var files []hubtest.File
	for i := 0; i < 20; i++ {
		files = append(files, hubtest.File{Path: "f" + string(rune('a'+i)), Data: []byte{byte(i)}})
	}
	commit := hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, nil)
	// Model info says 20 entries: 20 pages of one are fine.
	if got, err := c.listFiles(ctxT(t), "org/m", commit, 20); err != nil || len(got) != 20 {
		t.Fatalf("20 pages: %d files, %v", len(got), err)
	}
	// ListFilesOf takes the cap from model info.
	mi, err := c.ModelInfo(ctxT(t), "org/m", commit)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.ListFilesOf(ctxT(t), "org/m", mi); err != nil || len(got) != 20 {
		t.Fatalf("ListFilesOf: %d files, %v", len(got), err)
	}
	mi.Siblings = mi.Siblings[:2]
	if _, err := c.ListFilesOf(ctxT(t), "org/m", mi); err == nil || !strings.Contains(err.Error(), "more than 18 pages") {
		t.Fatalf("ListFilesOf with 2 siblings: want the page cap, got %v", err)
	}
	// A listing far longer than model info said is cut off.
	if _, err := c.listFiles(ctxT(t), "org/m", commit, 2); err == nil || !strings.Contains(err.Error(), "more than 18 pages") {
		t.Fatalf("want the page cap, got %v", err)
	}
	// Empty pages with fresh next links end at the first one.
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultEmptyPages, Route: hubtest.RouteTree, Skip: 3, Times: -1})
	hub.ResetLog()
	_, err = c.ListFiles(ctxT(t), "org/m", commit)
	if err == nil || !strings.Contains(err.Error(), "page 4 is empty") {
		t.Fatalf("want an empty-page error, got %v", err)
	}
	if n := len(hub.Requests()); n != 4 {
		t.Fatalf("%d requests for the listing, want 4", n)
	}
}

// One range of a file trickles at 2 KB/s: its remaining bytes are hedged on
// another connection and the file arrives intact, without the trickle's
// duration (64 KiB at 2 KB/s is 32 s; the test's context allows 20).
func TestHedgeReplacesTricklingRange(t *testing.T) {
	data := randBytes(8*65536, 21)
	hub := newHub(t, hubtest.Config{})
	hub.MustAddRepo("org/m", []hubtest.File{{Path: lfsPath, Data: data, LFS: true}}, hubtest.RepoOptions{})
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultTrickle, Route: hubtest.RouteCDN, Rate: 2000, Match: hubtest.RangeFrom(3 * 65536)})
	c, _ := newTestClient(t, hub, nil)
	cache := t.TempDir()
	res, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, ChunkSize: 65536, Connections: 4})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, res.Files[0].LocalPath); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	if c.streams.wins.Load() < 1 {
		t.Fatalf("no hedge replaced the trickling range (%d launched)", c.streams.hedges.Load())
	}
	if !faultSeen(hub) {
		t.Fatal("the trickle never applied")
	}
	// Bytes kept, not refetched: at most one extra probe beyond the file.
	if n := hub.BytesServed(lfsPath); n > int64(len(data))+2*hedgeProbe {
		t.Fatalf("%d bytes served for a %d-byte file", n, len(data))
	}
}

// A server that ignores Range after offset 0 (RFC 9110 allows it): the file
// is read as one sequential stream, logged once, its hash checked; the
// bytes served stay linear in the file size.
func TestIgnoredRangeFallsBackToOneStream(t *testing.T) {
	data := randBytes(1<<20, 22)
	hub := newHub(t, hubtest.Config{})
	hub.MustAddRepo("org/m", []hubtest.File{{Path: lfsPath, Data: data, LFS: true}}, hubtest.RepoOptions{})
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultIgnoreLaterRange, Route: hubtest.RouteCDN, Times: -1})
	c, logs := newTestClient(t, hub, nil)
	res, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: t.TempDir(), ChunkSize: 64 << 10, Connections: 4})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, res.Files[0].LocalPath); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	if n := strings.Count(logs.String(), "ignores Range"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, logs)
	}
	// Each of the 4 first requests may get a whole file before the
	// fallback is known; then one stream. Quadratic would be ~8 MiB.
	if n := hub.BytesServed(lfsPath); n > 6*int64(len(data)) {
		t.Fatalf("%d bytes served for a %d-byte file", n, len(data))
	}
}

// A regular file of one chunk is fetched without Range.
func TestSmallFileWithoutRange(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	hub.MustAddRepo("org/m", faultRepo(), hubtest.RepoOptions{})
	c, _ := newTestClient(t, hub, nil)
	if _, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	for _, r := range hub.Requests() {
		if r.Method == "GET" && r.File != "" && r.Range != "" {
			t.Fatalf("%s fetched with Range %q", r.File, r.Range)
		}
	}
}

// Repack's path: concurrent single-range StreamRange-style calls
// (ReadRanges with one range each) share the client's hedging.
func TestConcurrentStreamsHedgeLaggard(t *testing.T) {
	data := randBytes(6*50_000, 23)
	hub, f := openTestFile(t, hubtest.Config{}, data, ReaderOptions{})
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultTrickle, Route: hubtest.RouteCDN, Rate: 1000, Match: hubtest.RangeFrom(2 * 50_000)})
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		go func(off int64) {
			errs <- f.ReadRanges(ctxT(t), []Range{{Off: off, Len: 50_000}}, 1, func(r Range, body io.Reader) error {
				b, err := io.ReadAll(body)
				if err != nil {
					return err
				}
				if !bytes.Equal(b, data[r.Off:r.End()]) {
					return errors.New("wrong bytes")
				}
				return nil
			})
		}(int64(i) * 50_000)
	}
	for i := 0; i < 6; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if !faultSeen(hub) || f.c.streams.wins.Load() < 1 {
		t.Fatalf("trickle applied %v, hedges won %d", faultSeen(hub), f.c.streams.wins.Load())
	}
}

// A lone stream with nothing to compare against is hedged when it is
// under MinRate.
func TestLoneSlowStreamHedged(t *testing.T) {
	data := randBytes(60_000, 24)
	hub, f := openTestFile(t, hubtest.Config{}, data, ReaderOptions{})
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultTrickle, Route: hubtest.RouteCDN, Rate: 2000})
	buf := make([]byte, 50_000)
	if _, err := f.ReadAtContext(ctxT(t), buf, 5_000); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data[5_000:55_000]) {
		t.Fatal("wrong bytes")
	}
	if !faultSeen(hub) || f.c.streams.wins.Load() != 1 {
		t.Fatalf("trickle applied %v, hedges won %d", faultSeen(hub), f.c.streams.wins.Load())
	}
}
