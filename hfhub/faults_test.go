package hfhub

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// faultCase is one scripted failure and what must come of it.
type faultCase struct {
	name  string
	fault hubtest.Fault
	// ok: the download must succeed with the right bytes. Otherwise it must
	// fail with an error containing errHas, leaving no blob behind.
	ok     bool
	errHas string
}

const (
	lfsPath = "model.safetensors"
	regPath = "config.json"
)

func faultRepo() []hubtest.File {
	return []hubtest.File{
		{Path: lfsPath, Data: randBytes(300_000, 7), LFS: true},
		{Path: regPath, Data: randBytes(20_000, 8)},
	}
}

func faultCases() []faultCase {
	cdn := func(k hubtest.FaultKind) hubtest.Fault {
		return hubtest.Fault{Kind: k, Route: hubtest.RouteCDN, Path: lfsPath, Skip: 1}
	}
	return []faultCase{
		{name: "reset before headers", fault: hubtest.Fault{Kind: hubtest.FaultReset, Route: hubtest.RouteCDN, Path: lfsPath}, ok: true},
		{name: "cut after headers", fault: hubtest.Fault{Kind: hubtest.FaultCut, Route: hubtest.RouteCDN, Path: lfsPath, AfterBytes: 0}, ok: true},
		{name: "cut mid-body", fault: hubtest.Fault{Kind: hubtest.FaultCut, Route: hubtest.RouteCDN, Path: lfsPath, AfterBytes: 5000, Times: 3}, ok: true},
		{name: "cut at last byte", fault: hubtest.Fault{Kind: hubtest.FaultCut, Route: hubtest.RouteCDN, Path: lfsPath, AfterBytes: 1 << 30}, ok: true},
		{name: "cut mid-body regular file", fault: hubtest.Fault{Kind: hubtest.FaultCut, Route: hubtest.RouteResolve, Method: "GET", Path: regPath, AfterBytes: 1000}, ok: true},
		{name: "stall after headers", fault: hubtest.Fault{Kind: hubtest.FaultStall, Route: hubtest.RouteCDN, Path: lfsPath, AfterBytes: 100, Delay: 3 * time.Second}, ok: true},
		{name: "stall before headers", fault: hubtest.Fault{Kind: hubtest.FaultStallHeaders, Route: hubtest.RouteCDN, Path: lfsPath, Delay: 3 * time.Second}, ok: true},
		{name: "trickle", fault: hubtest.Fault{Kind: hubtest.FaultTrickle, Route: hubtest.RouteCDN, Path: lfsPath, Delay: 10 * time.Millisecond}, ok: true},
		{name: "503 on CDN GET", fault: hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 503, Times: 2}, ok: true},
		{name: "500 on HEAD", fault: hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteResolve, Method: "HEAD", Status: 500}, ok: true},
		{name: "502 on model info", fault: hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteInfo, Status: 502}, ok: true},
		{name: "504 on tree", fault: hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteTree, Status: 504}, ok: true},
		{name: "429 with Retry-After", fault: hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 429, RetryAfter: "1"}, ok: true},
		{name: "429 with RateLimit", fault: hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteResolve, Status: 429, RateLimit: `"resolvers";r=0;t=0`}, ok: true},
		{name: "408", fault: hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 408}, ok: true},
		{name: "5xx forever", fault: hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 503, Times: -1}, errHas: "503"},
		{name: "403 is not retried", fault: hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteResolve, Method: "GET", Path: regPath, Status: 403, Times: -1}, errHas: "HTTP 403"},
		{name: "ignored Range once", fault: cdn(hubtest.FaultIgnoreRange), ok: true},
		{name: "ignored Range always", fault: hubtest.Fault{Kind: hubtest.FaultIgnoreRange, Route: hubtest.RouteCDN, Times: -1}, ok: true},
		{name: "ignored Range after offset 0", fault: hubtest.Fault{Kind: hubtest.FaultIgnoreLaterRange, Route: hubtest.RouteCDN, Times: -1}, ok: true},
		{name: "200 with the slice and Content-Range", fault: hubtest.Fault{Kind: hubtest.FaultSliceOK, Route: hubtest.RouteCDN, Times: -1}, ok: true},
		{name: "trickle at 4 KB/s on one connection", fault: hubtest.Fault{Kind: hubtest.FaultTrickle, Route: hubtest.RouteCDN, Path: lfsPath, Rate: 4000, Skip: 1}, ok: true},
		{name: "model info hangs after headers", fault: hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteInfo, Times: 2}, ok: true},
		{name: "model info hangs forever", fault: hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteInfo, Times: -1}, errHas: "stalled: no data for"},
		{name: "error body hangs", fault: hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteTree, Status: 404, Times: -1}, errHas: "HTTP 404"},
		{name: "tree page hangs mid-body", fault: hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteTree, AfterBytes: 20}, ok: true},
		{name: "range hangs after headers", fault: hubtest.Fault{Kind: hubtest.FaultHang, Route: hubtest.RouteCDN, Path: lfsPath, Times: 2}, ok: true},
		{name: "empty tree pages with fresh next links", fault: hubtest.Fault{Kind: hubtest.FaultEmptyPages, Route: hubtest.RouteTree, Times: -1}, errHas: "empty but links to a next page"},
		{name: "LFS redirect without X-Linked-Size", fault: hubtest.Fault{Kind: hubtest.FaultNoLinkedSize, Route: hubtest.RouteResolve, Path: lfsPath, Times: -1}, errHas: "X-Linked-Size"},
		{name: "206 at the wrong offset", fault: cdn(hubtest.FaultWrongOffset), ok: true},
		{name: "206 at the wrong offset always", fault: hubtest.Fault{Kind: hubtest.FaultWrongOffset, Route: hubtest.RouteCDN, Skip: 1, Times: -1, Shift: 10}, errHas: "not the range asked for"},
		{name: "206 without Content-Range", fault: cdn(hubtest.FaultNoContentRange), ok: true},
		{name: "Content-Length too long", fault: cdn(hubtest.FaultBadLength), ok: true},
		{name: "206 lying about its offset", fault: cdn(hubtest.FaultLyingRange), errHas: "hash mismatch"},
		{name: "wrong bytes", fault: cdn(hubtest.FaultWrongBytes), errHas: "hash mismatch"},
		{name: "wrong bytes in a regular file", fault: hubtest.Fault{Kind: hubtest.FaultWrongBytes, Route: hubtest.RouteResolve, Method: "GET", Path: regPath}, errHas: "hash mismatch"},
		{name: "signed URL expires", fault: hubtest.Fault{Kind: hubtest.FaultExpire, Route: hubtest.RouteCDN, Skip: 2, Times: 2}, ok: true},
		{name: "redirect loop", fault: hubtest.Fault{Kind: hubtest.FaultRedirectLoop, Route: hubtest.RouteResolve, Path: lfsPath, Times: -1}, errHas: "redirect loop"},
		{name: "captive portal", fault: hubtest.Fault{Kind: hubtest.FaultHTML, Route: hubtest.RouteResolve, Path: regPath, Times: -1}, errHas: "no ETag"},
		{name: "truncated tree JSON once", fault: hubtest.Fault{Kind: hubtest.FaultTruncatedJSON, Route: hubtest.RouteTree}, ok: true},
		{name: "truncated tree JSON always", fault: hubtest.Fault{Kind: hubtest.FaultTruncatedJSON, Route: hubtest.RouteTree, Times: -1}, errHas: "invalid response"},
		{name: "truncated model info once", fault: hubtest.Fault{Kind: hubtest.FaultTruncatedJSON, Route: hubtest.RouteInfo}, ok: true},
		{name: "truncated model info always", fault: hubtest.Fault{Kind: hubtest.FaultTruncatedJSON, Route: hubtest.RouteInfo, Times: -1}, errHas: "invalid response"},
	}
}

func TestDownloadFaults(t *testing.T) {
	files := faultRepo()
	for _, tc := range faultCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hub := newHub(t, hubtest.Config{TreePageSize: 1})
			commit := hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
			hub.Inject(tc.fault)
			c, _ := newTestClient(t, hub, fastStall)
			cache := t.TempDir()
			req := DownloadRequest{Repo: "org/m", CacheDir: cache, ChunkSize: 64 << 10, Connections: 3}
			res, err := c.Download(ctxT(t), req)
			snap := filepath.Join(cache, "models--org--m", "snapshots", commit)
			if tc.ok {
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				if tc.fault.Times >= 0 && hub.FaultsPending() != 0 || !faultSeen(hub) {
					t.Fatalf("the fault was never triggered")
				}
				checkFiles(t, snap, files)
				return
			}
			if err == nil {
				t.Fatalf("want an error containing %q, got success", tc.errHas)
			}
			if !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("error %q does not contain %q", err, tc.errHas)
			}
			// Nothing wrong may have entered the cache: every file present
			// must be byte-exact.
			for _, f := range files {
				p := filepath.Join(snap, f.Path)
				if b, err := os.ReadFile(p); err == nil && string(b) != string(f.Data) {
					t.Fatalf("%s: wrong bytes in the cache", f.Path)
				}
				blob := filepath.Join(cache, "models--org--m", "blobs", etagOf(f))
				if b, err := os.ReadFile(blob); err == nil && string(b) != string(f.Data) {
					t.Fatalf("%s: wrong bytes in blobs/", f.Path)
				}
			}
			if res != nil {
				for _, fr := range res.Files {
					if fr.Status == StatusFailed && fr.Error == "" {
						t.Errorf("%s failed without a message", fr.Path)
					}
				}
			}
			// Once the server behaves, a rerun completes.
			hub.ClearFaults()
			if _, err := c.Download(ctxT(t), req); err != nil {
				t.Fatalf("rerun: %v", err)
			}
			checkFiles(t, snap, files)
		})
	}
}

func etagOf(f hubtest.File) string {
	if f.LFS {
		return sha256Hex(f.Data)
	}
	return GitBlobSHA1(f.Data)
}

func checkFiles(t *testing.T, dir string, files []hubtest.File) {
	t.Helper()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatalf("%s: %v", f.Path, err)
		}
		if string(b) != string(f.Data) {
			t.Fatalf("%s: content differs", f.Path)
		}
	}
}

func TestDownloadHashMismatchIsErrHashMismatch(t *testing.T) {
	hub := newHub(t, hubtest.Config{})
	hub.MustAddRepo("org/m", faultRepo(), hubtest.RepoOptions{})
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultWrongBytes, Route: hubtest.RouteCDN})
	c, _ := newTestClient(t, hub, nil)
	_, err := c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: t.TempDir()})
	if !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("want ErrHashMismatch, got %v", err)
	}
}

// faultSeen reports whether the request log shows a fault applied.
func faultSeen(hub *hubtest.Server) bool {
	for _, r := range hub.Requests() {
		if r.Fault != "" {
			return true
		}
	}
	return false
}
