package hfhub

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qpack-go/qpack/hfhub/hubtest"
)

// parseRangeStart reads the first byte of "bytes=a-b".
func parseRangeStart(t *testing.T, h string) int64 {
	t.Helper()
	a, _, ok := strings.Cut(strings.TrimPrefix(h, "bytes="), "-")
	n, err := strconv.ParseInt(a, 10, 64)
	if !ok || err != nil {
		t.Fatalf("bad Range %q", h)
	}
	return n
}

// kill -9 of a downloading process at random points, then a rerun: the
// result is byte-identical and no chunk recorded as complete is fetched
// again.
func TestKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 64 << 10
	data := randBytes(3<<20, 21)
	hub := newHub(t, hubtest.Config{BandwidthPerConn: 300 << 10})
	hub.MustAddRepo("org/big", []hubtest.File{{Path: "big.safetensors", Data: data, LFS: true}}, hubtest.RepoOptions{})
	cache := t.TempDir()
	etag := sha256Hex(data)
	blobs := filepath.Join(cache, "models--org--big", "blobs")
	part := filepath.Join(blobs, etag+".qpack-part")

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	runs := 0
	run := func(killAfter time.Duration) (killed bool) {
		runs++
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), "HFHUB_TEST_CHILD=download", "HFHUB_CHILD_UA=run-"+strconv.Itoa(runs),
			"HFHUB_CHILD_ENDPOINT="+hub.URL, "HFHUB_CHILD_REPO=org/big", "HFHUB_CHILD_CACHE="+cache,
			"HFHUB_CHILD_CHUNK="+strconv.Itoa(chunk), "HFHUB_CHILD_CONNS=4")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if killAfter > 0 {
			select {
			case err := <-done:
				t.Logf("child finished before the kill at %v: %v", killAfter, err)
				return false
			case <-time.After(killAfter):
				cmd.Process.Signal(syscall.SIGKILL)
				<-done
				return true
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("final run: %v\n%s", err, stderr.String())
		}
		return false
	}

	// Up to three kills at random points, then a run to completion. Each run
	// is checked against the record the previous kill left.
	// Requests are attributed to runs by their User-Agent: a request a
	// killed child sent just before dying may reach the server later.
	prevDone := map[int64]bool{}
	kills, recorded := 0, 0
	for i := 0; ; i++ {
		killed := false
		if i < 3 {
			killed = run(time.Duration(150+rng.IntN(400)) * time.Millisecond)
		} else {
			run(0)
		}
		for _, r := range hub.Requests() {
			if r.UserAgent != "run-"+strconv.Itoa(runs) || r.Role != "cdn" || r.Method != "GET" {
				continue
			}
			if start := parseRangeStart(t, r.Range); prevDone[start/chunk] {
				t.Fatalf("chunk %d (Range %s) was recorded complete but fetched again", start/chunk, r.Range)
			}
		}
		if !killed {
			break
		}
		kills++
		prevDone = map[int64]bool{}
		if rec, err := readResumeRecord(part + ".json"); err == nil {
			for _, c := range rec.Done {
				prevDone[int64(c)] = true
			}
		}
		recorded += len(prevDone)
		t.Logf("kill %d: %d of %d chunks recorded complete", kills, len(prevDone), len(data)/chunk)
	}
	if kills == 0 || recorded == 0 {
		t.Logf("kills %d, chunks recorded %d: the resume check was weak this time", kills, recorded)
	}
	got, err := os.ReadFile(filepath.Join(blobs, etag))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the resumed file differs")
	}
	if _, err := os.Stat(part); err == nil {
		t.Fatal("temp file left behind")
	}
	if _, err := os.Stat(part + ".json"); err == nil {
		t.Fatal("resume record left behind")
	}
}

// An interrupted download (context cancelled) resumes in-process too, and
// fetches only the missing chunks: deterministic version of the kill test.
func TestResumeFetchesOnlyMissingChunks(t *testing.T) {
	const chunk = 32 << 10
	data := randBytes(20*chunk+123, 22)
	hub := newHub(t, hubtest.Config{})
	hub.MustAddRepo("org/big", []hubtest.File{{Path: "big.bin", Data: data, LFS: true}}, hubtest.RepoOptions{})
	// Chunk 7 fails for good on the first run.
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 404, Skip: 7})
	c, _ := newTestClient(t, hub, nil)
	cache := t.TempDir()
	req := DownloadRequest{Repo: "org/big", CacheDir: cache, ChunkSize: chunk, Connections: 1}
	if _, err := c.Download(ctxT(t), req); err == nil {
		t.Fatal("first run should fail")
	}
	part := filepath.Join(cache, "models--org--big", "blobs", sha256Hex(data)+".qpack-part")
	rec, err := readResumeRecord(part + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Done) != 7 {
		t.Fatalf("%d chunks recorded, want 7 (%v)", len(rec.Done), rec.Done)
	}
	// Damage nothing, rerun: only chunks 7..20 are fetched.
	from := hub.Seq()
	res, err := c.Download(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Files[0].Resumed != 7*chunk {
		t.Fatalf("resumed %d bytes, want %d", res.Files[0].Resumed, 7*chunk)
	}
	fetched := map[int64]bool{}
	for _, r := range hub.Requests() {
		if r.Seq >= from && r.Role == "cdn" && r.Method == "GET" {
			start := parseRangeStart(t, r.Range)
			if start%chunk == 0 { // not a mid-chunk resume
				fetched[start/chunk] = true
			}
			if start < 7*chunk {
				t.Fatalf("rerun fetched %s, inside the 7 chunks already done", r.Range)
			}
		}
	}
	if len(fetched) != 14 {
		t.Fatalf("rerun fetched chunks %v, want 7..20", fetched)
	}
	checkFiles(t, res.SnapshotDir, []hubtest.File{{Path: "big.bin", Data: data}})
}

// Resumed data that was damaged on disk is caught by the re-hash; the file
// is fetched again in full, never promoted.
func TestResumeRehashesDiskData(t *testing.T) {
	const chunk = 32 << 10
	data := randBytes(10*chunk, 23)
	hub := newHub(t, hubtest.Config{})
	hub.MustAddRepo("org/big", []hubtest.File{{Path: "big.bin", Data: data, LFS: true}}, hubtest.RepoOptions{})
	hub.Inject(hubtest.Fault{Kind: hubtest.FaultStatus, Route: hubtest.RouteCDN, Status: 404, Skip: 5})
	c, _ := newTestClient(t, hub, nil)
	cache := t.TempDir()
	req := DownloadRequest{Repo: "org/big", CacheDir: cache, ChunkSize: chunk, Connections: 1}
	if _, err := c.Download(ctxT(t), req); err == nil {
		t.Fatal("first run should fail")
	}
	part := filepath.Join(cache, "models--org--big", "blobs", sha256Hex(data)+".qpack-part")
	fh, err := os.OpenFile(part, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteAt([]byte{0xff, 0xff, 0xff}, 1000) // corrupt a recorded chunk
	fh.Close()
	res, err := c.Download(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, res.SnapshotDir, []hubtest.File{{Path: "big.bin", Data: data}})
}

// Two downloads of the same repository into the same cache at once: both
// succeed, the files are right, and each byte crossed the network once.
func TestConcurrentDownloadsShareTheCache(t *testing.T) {
	files := []hubtest.File{
		{Path: "a.safetensors", Data: randBytes(400_000, 31), LFS: true},
		{Path: "b.safetensors", Data: randBytes(300_000, 32), LFS: true},
		{Path: "config.json", Data: []byte(`{}`)},
	}
	hub := newHub(t, hubtest.Config{BandwidthPerConn: 2 << 20})
	hub.MustAddRepo("org/m", files, hubtest.RepoOptions{})
	cache := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := newTestClient(t, hub, nil)
			_, errs[i] = c.Download(ctxT(t), DownloadRequest{Repo: "org/m", CacheDir: cache, ChunkSize: 64 << 10, Connections: 3})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkFiles(t, filepath.Join(cache, "models--org--m", "snapshots", hub.Head("org/m", "main")), files)
	var cdnBytes int64
	log, ok := hub.SettledRequests() // a handler logs its bytes after the client may have read them
	if !ok {
		t.Fatalf("the hub's log still has requests in progress after 5 s")
	}
	for _, r := range log {
		if r.Role == "cdn" {
			cdnBytes += r.BodyBytes
		}
	}
	if want := int64(700_000); cdnBytes != want {
		t.Fatalf("the CDN sent %d bytes, want %d (each blob once)", cdnBytes, want)
	}
}
